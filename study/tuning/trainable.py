"""Ray Tune adapters around :func:`study.trial.train_trial`, in the Tune actor or under Ray Train
(DDP); their configuration, checkpoints and ledger: docs/design.md §9."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch

from study.errors import StorageError, cause
from study.models import encodings
from study.scheduling.ledger import trial_ledger
from study.scheduling.trials import ended_rows
from study.trial.config import TrainConfig
from study.trial.ledger import TrialLedger


def _scalars(metrics: dict[str, Any]) -> dict[str, Any]:
    """Reportable metrics: scalars, without NaN (a trial without a validation split
    reports no ``val_*``)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool)) and v == v}


def storage_errors(fn, *args, where: str = "storage", **kwargs):
    """Call ``fn``; an ``OSError`` (a full, read-only or vanished storage) becomes a :class:`StorageError`
    naming its file, else ``where`` (pyarrow's S3 messages name none)."""
    try:
        return fn(*args, **kwargs)
    except StorageError:  # StorageUnreachable is an OSError too: already one line naming its path
        raise
    except OSError as e:
        raise StorageError(str(e.filename or where), e.strerror or str(e)) from e


def _final(r: dict[str, Any]) -> dict[str, Any]:
    """A trial's last report from its ``runs`` row or :class:`~study.trial.loop.TrialResult` fields."""
    metrics = {
        "best_test_acc": r["best_test_acc"],
        "test_acc": r["final_test_acc"],
        "best_val_acc": r.get("best_val_acc"),
        "val_acc": r.get("final_val_acc"),
    }
    return _scalars(
        {
            "status": r["status"],
            "epoch": int(r["epochs_done"]) - 1,
            "epochs_done": int(r["epochs_done"]),
            **{k: float(v) for k, v in metrics.items() if v is not None},
        }
    )


def counted(trainable):
    """Count the attempt in the trial's ledger before anything can fail, and record
    the one-line cause of a failure there (the driver puts it in ``runs.error``)."""

    def run(config: dict[str, Any], *, meta: dict[str, Any]) -> None:
        from ray import tune

        rows = ended_rows(meta["tables"])
        done = next(iter(rows[rows.trial_id == config["key"]].to_dict("records")), None)
        if done is not None:
            # ended already (a retry after its last report was lost): reported, not re-trained
            tune.report(_final(done))
            return
        book = trial_ledger(meta["root"], config["key"])
        storage_errors(book.start, where=book.uri)
        try:
            trainable(config, meta=meta, book=book)
        except Exception as e:
            with contextlib.suppress(Exception):  # the storage may be what failed
                book.fail(cause(e))
            raise

    run.__name__ = run.__qualname__ = trainable.__name__
    run.__doc__ = trainable.__doc__
    return run


def _report(report_fn, warnings: list[str] | None = None):
    """``train_trial``'s per-epoch report as a Tune/Train report: scalar metrics and
    ``epochs_done`` (ASHA's time), no checkpoint (the trial keeps its own)."""

    def report(metrics: dict[str, Any], ckpt: str | None) -> None:
        if warnings:  # shown once by the driver (study.scheduling.contract)
            metrics = {**metrics, "warning": warnings.pop(0)}
        report_fn(_scalars({**metrics, "epochs_done": int(metrics["epoch"]) + 1}))

    return report


@counted
def study_trial(config: dict[str, Any], *, meta: dict[str, Any], book: TrialLedger) -> None:
    """Tune function trainable: one trial, in this process.  Its table identity is the
    searcher's key (grid cell, sample index); a key that already ended is replayed."""
    from ray import tune

    torch.set_num_threads(max(1, int(meta.get("cpus_per_trial", 1))))
    warnings: list[str] = []
    result = _train(
        meta,
        config,
        report=_report(tune.report, warnings),
        extra_run_fields=_run_fields(config, meta),
        ledger=book,
        warn=warnings.append,
    )
    tune.report(_final(dataclasses.asdict(result)))


def _train(meta: dict[str, Any], config: dict[str, Any], **kwargs):
    """:func:`train_trial` of the trial ``config`` of the study ``meta``."""
    from study.trial import train_trial  # here, not in the driver: torchvision's import costs 1.6 CPU-s

    # the encodings the study file names register in this process too (the driver's did when it read it)
    encodings.load(meta["raw"].get("encodings") or ())
    key = config["key"]
    return storage_errors(
        train_trial,
        TrainConfig.from_dict(config["train"]),
        where=meta["root"],
        trial_id=key,
        tables=meta["tables"],
        checkpoint_dir=f"{meta['root']}/trials/{key}",
        study=meta["name"],
        **kwargs,
    )


def _run_fields(config: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Extra ``runs`` columns (``node_ip``: the Ray node of the trial's latest attempt)."""
    import ray
    from ray import tune

    fields = {
        "cell": config["cell"],
        "sample": config["sample"],
        "ray_trial_id": tune.get_context().get_trial_id(),
        "selection_metric": meta.get("selection_metric"),
        "node_ip": ray.util.get_node_ip_address(),
    }
    return {**fields, **{f"sampled_{k}": v for k, v in (config.get("sampled") or {}).items()}}


def _ddp_worker(loop_config: dict[str, Any]) -> None:
    """Ray Train worker loop: one rank of a DDP trial (process group set up by Ray).
    Every rank reads the trial's checkpoint; rank 0 writes it, the tables and the ledger."""
    import ray.train

    meta, config = loop_config["meta"], loop_config["config"]
    book = None
    if ray.train.get_context().get_world_rank() == 0:
        book = trial_ledger(meta["root"], config["key"])
        data = book.read()  # the Tune function counted this attempt
        book.attempts, book.device_seconds = (
            int(data.get("attempts", 1)),
            float(data.get("device_seconds", 0.0)),
        )
    device = ray.train.torch.get_device() if torch.cuda.is_available() else torch.device("cpu")
    _train(
        meta,
        config,
        report=_report(ray.train.report),
        device=device,
        extra_run_fields=loop_config["fields"],
        ledger=book,
    )


@counted
def ddp_study_trial(config: dict[str, Any], *, meta: dict[str, Any], book: TrialLedger) -> None:
    """Tune function trainable for a multi-worker trial: a TorchTrainer inside Tune."""
    import ray.train
    from ray import tune
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    workers, gpus = int(meta["workers_per_trial"]), meta["gpus_per_trial"]
    per_worker = {
        "CPU": max(meta["cpus_per_trial"] / workers, 0.01),
        **({"GPU": gpus / workers} if gpus else {}),
    }
    trainer = TorchTrainer(
        _ddp_worker,
        train_loop_config={"meta": meta, "config": config, "fields": _run_fields(config, meta)},
        scaling_config=ray.train.ScalingConfig(
            num_workers=workers, use_gpu=bool(gpus), resources_per_worker=per_worker
        ),
        run_config=ray.train.RunConfig(
            name=f"ddp-{config['key']}-{tune.get_context().get_trial_id()}",
            storage_path=meta["ddp_storage"],
            callbacks=[TuneReportCallback()],
            failure_config=ray.train.FailureConfig(max_failures=meta.get("max_failures", 0)),
        ),
    )
    trainer.fit()


def make_trainable(meta: dict[str, Any]):
    """The Tune trainable for a study: resources attached, metadata bound."""
    from ray import tune

    if (
        meta["workers_per_trial"] > 1
    ):  # the Tune function only coordinates; the Ray Train workers hold the resources
        return tune.with_resources(tune.with_parameters(ddp_study_trial, meta=meta), {"cpu": 0.01})
    gpus = {"gpu": meta["gpus_per_trial"]} if meta["gpus_per_trial"] else {}
    return tune.with_resources(
        tune.with_parameters(study_trial, meta=meta), {"cpu": meta["cpus_per_trial"], **gpus}
    )
