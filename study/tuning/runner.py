"""Launch, resume and summarise a study on Ray Tune (DESIGN §7-8).

Storage layout: ``<storage>/<name>/`` holds Ray's experiment state (trials,
checkpoints, searcher), ``study.yaml`` (the validated study file) and ``tables/``
(the Parquet tables every trial appends to while it runs).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# quiet Ray before it is imported (DESIGN §8)
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "1")
os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
# Tune saves and uploads its experiment state at its own adaptive period (≥ 10 s) and
# keeps its warning about excessive syncing.  A killed driver may lose the last
# seconds of Tune's bookkeeping; it never re-runs a finished trial all the same,
# because the project's own tables decide: the searcher and the trainable replay a
# key whose ``runs`` row says it ended (``searcher.py``, ``trainable.py``).
# Tune's default per-trial logs (result.json, progress.csv, params, event files) are
# off: the tables are the record, and each of those files was re-uploaded on every
# save of the experiment state (most of a study's requests to object storage).
# Logger callbacks a study file asks for are added explicitly and still run.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")

import pandas as pd
import yaml

from study.spec import StudySpec
from study.tables import STATUSES, compact_all, part_path, read_table, write_part

META_FILE = "study.json"
#: Environment variables naming an S3-compatible endpoint (read by pyarrow, and so by
#: Ray's storage and the tables); passed on to the workers of a cluster.
ENDPOINT_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def is_remote(storage: str) -> bool:
    return "://" in storage


def study_root(storage: str, name: str) -> str:
    return f"{storage.rstrip('/')}/{name}" if is_remote(storage) else str(Path(storage).resolve() / name)


def init_ray(address: str | None, *, num_cpus: int | None = None) -> None:
    import ray

    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = dict(logging_config=ray.LoggingConfig(log_level="WARNING"), log_to_driver=False)
    endpoint = {k: os.environ[k] for k in ENDPOINT_VARS if os.environ.get(k)}
    if address and endpoint:  # workers of an existing cluster do not inherit this process's environment
        kwargs["runtime_env"] = {"env_vars": endpoint}
    if address:
        ray.init(address=address, **kwargs)
    else:
        # a local Ray never listens beyond this machine: dashboard (when its extra
        # dependencies are installed) on the loopback interface only
        ray.init(dashboard_host="127.0.0.1", num_cpus=num_cpus, **kwargs)


def _meta(spec: StudySpec, root: str) -> dict[str, Any]:
    return {
        "name": spec.name, "file": spec.file, "raw": spec.raw, "tables": f"{root}/tables",
        "ddp_storage": f"{root}/ddp", "cpus_per_trial": spec.cpus_per_trial,
        "gpus_per_trial": spec.gpus_per_trial, "workers_per_trial": spec.workers_per_trial,
        "max_failures": spec.max_failures, "num_trials": spec.num_trials,
    }


def _write_meta(root: str, meta: dict[str, Any]) -> None:
    if is_remote(root):
        import pyarrow.fs as pafs

        fs, path = pafs.FileSystem.from_uri(root)
        with fs.open_output_stream(f"{path}/{META_FILE}") as f:
            f.write(json.dumps(meta, indent=2, default=str).encode())
        return
    Path(root).mkdir(parents=True, exist_ok=True)
    tmp = Path(root) / f".{META_FILE}.tmp"
    tmp.write_text(json.dumps(meta, indent=2, default=str))
    os.replace(tmp, Path(root) / META_FILE)
    (Path(root) / "study.yaml").write_text(yaml.safe_dump(meta["raw"], sort_keys=False))


def study_exists(root: str) -> bool:
    """Whether anything is stored under a study's folder (local or object storage)."""
    if not is_remote(root):
        return Path(root).exists() and any(Path(root).iterdir())
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(root)
    return bool(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))


def read_meta(root: str) -> dict[str, Any]:
    if is_remote(root):
        import pyarrow.fs as pafs

        fs, path = pafs.FileSystem.from_uri(root)
        with fs.open_input_stream(f"{path}/{META_FILE}") as f:
            return json.loads(f.read())
    return json.loads((Path(root) / META_FILE).read_text())


def _tuner(spec: StudySpec, meta: dict[str, Any], storage: str, *, verbose: bool):
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from study.tuning.progress import ProgressReporter
    from study.tuning.searcher import GridOptunaSearcher
    from study.tuning.trainable import make_trainable

    sched_cfg = spec.scheduler or {"type": "fifo"}
    metric, mode = sched_cfg.get("metric", "test_acc"), sched_cfg.get("mode", "max")
    if sched_cfg["type"] == "asha":
        epochs = max(spec.train_config(c).epochs for c in spec.cells)
        scheduler = ASHAScheduler(time_attr="training_iteration", max_t=epochs,
                                  grace_period=sched_cfg.get("grace_period", 1),
                                  reduction_factor=sched_cfg.get("reduction_factor", 3))
    else:
        scheduler = FIFOScheduler()
    searcher = GridOptunaSearcher(n_cells=len(spec.cells), sample=spec.sample, num_samples=spec.num_samples,
                                  seed=min(c.seed for c in spec.cells), metric=metric, mode=mode,
                                  tables=meta["tables"])
    return tune.Tuner(
        make_trainable(meta),
        tune_config=tune.TuneConfig(
            metric=metric, mode=mode, search_alg=searcher, scheduler=scheduler,
            num_samples=spec.num_trials, reuse_actors=meta["workers_per_trial"] == 1,
            max_concurrent_trials=spec.max_concurrent,
        ),
        run_config=tune.RunConfig(
            name=spec.name, storage_path=storage, verbose=0,
            failure_config=tune.FailureConfig(max_failures=spec.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            callbacks=[ProgressReporter(meta=meta, enabled=verbose)],
        ),
    )


def run_study(spec: StudySpec, *, storage: str, address: str | None = None, verbose: bool = True,
              num_cpus: int | None = None) -> pd.DataFrame:
    """Run every trial of ``spec``; returns the ``runs`` table at the end."""
    root = study_root(storage, spec.name)
    storage_abs = storage if is_remote(storage) else str(Path(storage).resolve())
    meta = _meta(spec, root)
    _write_meta(root, meta)
    init_ray(address, num_cpus=num_cpus)
    tuner = _tuner(spec, meta, storage_abs, verbose=verbose)
    _say(verbose, f"study {spec.name}: {spec.num_trials} trials ({len(spec.cells)} grid cells x "
                  f"{spec.num_samples} samples), storage {root}")
    results = tuner.fit()
    return finish(root, results, verbose=verbose)


def resume_study(root: str, *, address: str | None = None, verbose: bool = True,
                 num_cpus: int | None = None) -> pd.DataFrame:
    """Continue an interrupted study: finished trials are kept, errored and unfinished
    ones continue from their last checkpoint (``Tuner.restore``)."""
    from ray import tune

    from study.tuning.trainable import make_trainable

    meta = read_meta(root)
    init_ray(address, num_cpus=num_cpus)
    tuner = tune.Tuner.restore(root, trainable=make_trainable(meta), resume_errored=True,
                               resume_unfinished=True)
    _say(verbose, f"resuming study {meta['name']} from {root}")
    results = tuner.fit()
    return finish(root, results, verbose=verbose)


def finish(root: str, results, *, verbose: bool) -> pd.DataFrame:
    """Compact what trials left uncompacted (stopped early, killed), mark trials the
    scheduler stopped early or that errored, print the summary."""
    tables = f"{root}/tables"
    compact_all(tables)
    runs = read_table(tables, "runs")
    if not runs.empty:
        by_id = {r.trial_id: r for r in runs.itertuples(index=False)}
        for result in results:
            tid = (result.config or {}).get("key")
            if tid is None or tid not in by_id:
                continue
            row = by_id[tid]._asdict()
            if result.error is not None and row["status"] == "running":
                row["status"] = "error"
            elif row["status"] == "running" and row["epochs_done"] < row["epochs"]:
                row["status"] = "stopped"
            else:
                continue
            write_part(part_path(tables, "runs", tid), [row])
        runs = read_table(tables, "runs")
    if verbose:
        print(summary(runs), flush=True)
    return runs


def summary(runs: pd.DataFrame) -> str:
    if runs.empty:
        return "no trial recorded"
    counts = runs.status.value_counts()
    lines = ["trials: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES if counts.get(s, 0))]
    best = runs.sort_values("best_test_acc", ascending=False).groupby("name", sort=False).head(1)
    lines.append("best trial per model:")
    width = max(len(n) for n in best.name)
    for r in best.itertuples(index=False):
        lines.append(f"  {r.name:<{width}}  {r.trial_id}  best test acc {r.best_test_acc:.4f}  "
                     f"({r.epochs_done}/{r.epochs} epochs, {r.status})")
    return "\n".join(lines)


def _say(verbose: bool, line: str) -> None:
    if verbose:
        print(line, file=sys.stderr, flush=True)


__all__ = ["finish", "init_ray", "read_meta", "resume_study", "run_study", "study_root", "summary"]
