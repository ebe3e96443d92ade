"""Ray Tune adapters around :func:`study.trial.train_trial`.

``study_trial`` runs one trial in the Tune actor (one process, fractional or whole
GPU).  ``ddp_study_trial`` runs the same loop under Ray Train (``TorchTrainer`` with
N workers inside the Tune function, Train V2, DESIGN §8): gloo on CPU, NCCL on GPU.

Checkpoints: each epoch's checkpoint is reported to Tune (single process) or to
Ray Train (DDP), so a retried or restored trial continues from its last epoch.
The trial's Ray id names its table parts, so retries overwrite, never duplicate.

Every attempt is counted in the trial's ledger (``<study>/trials/<key>.json``) when
it starts.  A storage failure (disk full, unwritable, vanished) is raised as
:class:`study.errors.StorageError` naming the path; the driver then stops the study.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from study.errors import StorageError
from study.spec import validate
from study.trial import train_trial
from study.trial.ledger import TrialLedger

SCALAR_TYPES = (int, float, str, bool)


def trial_config(meta: dict[str, Any], config: dict[str, Any]):
    spec = validate(meta["raw"], file=meta["file"], default_name=meta["name"])
    return spec.train_config(spec.cells[config["cell"]], config.get("sampled"))


def _copy_checkpoint(src: str | None, dst: Path) -> None:
    if src:
        for f in Path(src).iterdir():
            if f.is_file():
                shutil.copy2(f, dst / f.name)


def _scalars(metrics: dict[str, Any]) -> dict[str, Any]:
    """Reportable metrics: scalars, without NaN (a trial without a validation split
    reports no ``val_*``)."""
    return {k: v for k, v in metrics.items() if isinstance(v, SCALAR_TYPES) and v == v}


def ledger(meta: dict[str, Any], key: str) -> TrialLedger:
    return TrialLedger(uri=f"{meta['root']}/trials/{key}.json")


def storage_errors(fn, *args, where: str = "storage", **kwargs):
    """Call ``fn``; an ``OSError`` (what a full, read-only or vanished storage raises,
    locally or from pyarrow's S3) becomes a :class:`StorageError` naming the path (the
    file where the error says, else ``where``: pyarrow's messages name no file)."""
    try:
        return fn(*args, **kwargs)
    except StorageError:
        raise
    except OSError as e:
        path = e.filename or where
        raise StorageError(str(path), e.strerror or str(e)) from e


def _finished_row(meta: dict[str, Any], key: str) -> dict[str, Any] | None:
    from study.tables import read_table

    runs = read_table(meta["tables"], "runs")
    row = runs[(runs.trial_id == key) & runs.status.isin(["finished", "diverged", "stopped"])]
    return None if row.empty else row.iloc[0].to_dict()


def _replay(row: dict[str, Any]) -> dict[str, Any]:
    """Final metrics of a trial that already ended (reported, not re-trained)."""
    return _scalars({"status": row["status"], "epoch": int(row["epochs_done"]) - 1,
                     "epochs_done": int(row["epochs_done"]), "best_test_acc": float(row["best_test_acc"]),
                     "test_acc": float(row["final_test_acc"]), "best_val_acc": _float(row.get("best_val_acc")),
                     "val_acc": _float(row.get("final_val_acc"))})


def _float(v: Any) -> float:
    return float("nan") if v is None else float(v)


def counted(trainable):
    """Count the attempt in the trial's ledger before anything can fail, and record
    the one-line cause of a failure there (the driver puts it in ``runs.error``)."""
    from study.errors import cause

    def run(config: dict[str, Any], *, meta: dict[str, Any]) -> None:
        from ray import tune

        done = _finished_row(meta, config["key"])
        if done is not None:
            tune.report(_replay(done))
            return
        book = ledger(meta, config["key"])
        storage_errors(book.start, where=book.uri)
        try:
            trainable(config, meta=meta, book=book)
        except Exception as e:
            try:
                book.fail(cause(e))
            except Exception:  # noqa: BLE001 - the storage may be what failed
                pass
            raise

    run.__name__ = run.__qualname__ = trainable.__name__
    run.__doc__ = trainable.__doc__
    return run


@counted
def study_trial(config: dict[str, Any], *, meta: dict[str, Any], book: TrialLedger) -> None:
    """Tune function trainable: one trial, in this process.  Its table identity is the
    searcher's key (grid cell, sample index); a key that already ended is replayed."""
    from ray import tune

    trial_id = config["key"]
    cfg = trial_config(meta, config)
    torch.set_num_threads(max(1, int(meta.get("cpus_per_trial", 1))))
    with tempfile.TemporaryDirectory(prefix="study-ckpt-") as local:
        local = Path(local)
        previous = tune.get_checkpoint()
        if previous is not None:
            with previous.as_directory() as d:
                _copy_checkpoint(d, local)

        warnings: list[str] = []

        def report(metrics: dict[str, Any], ckpt: Path | None) -> None:
            checkpoint = tune.Checkpoint.from_directory(str(ckpt)) if ckpt is not None else None
            if warnings:  # shown once by the driver (study.tuning.contract)
                metrics = {**metrics, "warning": warnings.pop(0)}
            tune.report(_scalars(metrics), checkpoint=checkpoint)

        result = storage_errors(train_trial, cfg, where=meta["root"], trial_id=trial_id, tables=meta["tables"],
                                checkpoint_dir=local,
                                study=meta["name"], report=report, extra_run_fields=_run_fields(config, meta),
                                ledger=book, warn=warnings.append)
        tune.report(_scalars({"status": result.status, "epoch": result.epochs_done - 1,
                              "epochs_done": result.epochs_done, "best_test_acc": result.best_test_acc,
                              "test_acc": result.final_test_acc, "best_val_acc": result.best_val_acc,
                              "val_acc": result.final_val_acc}))


def _run_fields(config: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Extra ``runs`` columns: grid cell, sample index, Ray's trial id, the metric the
    study selects on (None: nothing selects), the Ray node the (latest attempt of the)
    trial ran on, sampled values."""
    import ray
    from ray import tune

    fields = {"cell": config["cell"], "sample": config["sample"], "ray_trial_id": tune.get_context().get_trial_id(),
              "selection_metric": (meta or {}).get("selection_metric"), "node_ip": ray.util.get_node_ip_address()}
    return {**fields, **{f"sampled_{k}": v for k, v in (config.get("sampled") or {}).items()}}


def _ddp_worker(loop_config: dict[str, Any]) -> None:
    """Ray Train worker loop: one rank of a DDP trial (process group set up by Ray)."""
    import ray.train

    meta, config, trial_id = loop_config["meta"], loop_config["config"], loop_config["trial_id"]
    book = None
    if ray.train.get_context().get_world_rank() == 0:
        book = ledger(meta, trial_id)
        data = book.read()  # the Tune function counted this attempt
        book.attempts, book.device_seconds = int(data.get("attempts", 1)), float(data.get("device_seconds", 0.0))
    cfg = trial_config(meta, config)
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    device = ray.train.torch.get_device() if torch.cuda.is_available() else torch.device("cpu")
    with tempfile.TemporaryDirectory(prefix="study-ddp-") as local:
        local = Path(local)
        previous = ray.train.get_checkpoint()
        if previous is not None:
            with previous.as_directory() as d:
                _copy_checkpoint(d, local)

        def report(metrics: dict[str, Any], ckpt: Path | None) -> None:
            checkpoint = ray.train.Checkpoint.from_directory(str(ckpt)) if ckpt is not None else None
            ray.train.report(_scalars(metrics), checkpoint=checkpoint)

        storage_errors(train_trial, cfg, where=meta["root"], trial_id=trial_id, tables=meta["tables"],
                       checkpoint_dir=local if rank == 0 else None, study=meta["name"], report=report,
                       device=device, extra_run_fields=loop_config["fields"],
                       ledger=book)


@counted
def ddp_study_trial(config: dict[str, Any], *, meta: dict[str, Any], book: TrialLedger) -> None:
    """Tune function trainable for a multi-worker trial: a TorchTrainer inside Tune."""
    import ray.train
    from ray import tune
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    trial_id = config["key"]
    workers = int(meta["workers_per_trial"])
    gpus = meta["gpus_per_trial"]
    per_worker = {"CPU": max(meta["cpus_per_trial"] / workers, 0.01)}
    if gpus:
        per_worker["GPU"] = gpus / workers
    trainer = TorchTrainer(
        _ddp_worker,
        train_loop_config={"meta": meta, "config": config, "trial_id": trial_id, "fields": _run_fields(config, meta)},
        scaling_config=ray.train.ScalingConfig(num_workers=workers, use_gpu=bool(gpus),
                                               resources_per_worker=per_worker),
        run_config=ray.train.RunConfig(
            name=f"ddp-{trial_id}-{tune.get_context().get_trial_id()}", storage_path=meta["ddp_storage"], callbacks=[TuneReportCallback()],
            failure_config=ray.train.FailureConfig(max_failures=meta.get("max_failures", 0)),
        ),
    )
    trainer.fit()


def make_trainable(meta: dict[str, Any]):
    """The Tune trainable for a study: resources attached, metadata bound."""
    from ray import tune

    if meta["workers_per_trial"] > 1:
        fn = tune.with_parameters(ddp_study_trial, meta=meta)
        # the Tune function only coordinates; the Ray Train workers hold the resources
        return tune.with_resources(fn, {"cpu": 0.01})
    fn = tune.with_parameters(study_trial, meta=meta)
    res = {"cpu": meta["cpus_per_trial"]}
    if meta["gpus_per_trial"]:
        res["gpu"] = meta["gpus_per_trial"]
    return tune.with_resources(fn, res)

