"""Launch, resume and summarise a study on Ray Tune.  Whose state a study is and how a resume
continues: docs/design.md §9; the run contract: :mod:`study.scheduling.contract`; Tune's hooks into it:
:mod:`study.tuning.hooks`."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shlex
import shutil
import sys
from typing import Any

import pandas as pd
import yaml

from study.errors import RayStartError, one_line
from study.results.atomicio import write_atomic
from study.results.filesystem import is_remote
from study.results.storage import META_FILE, read_meta, resolve, study_root
from study.results.tables import STATUSES, read_table
from study.scheduling.contract import RunContract
from study.scheduling.trials import launch_plan, pending
from study.spec.studyfile import StudySpec, selects
from study.status.variants import value_text, variant_labels

#: Ray Tune's experiment folder inside the study folder
TUNE_DIR = "tune"
#: Ray's and Tune's documented environment settings, set by :func:`init_ray` before it imports or starts Ray
#: (where the environment does not set them): no new-style console output, de-duplicated worker logs, Ray
#: Train V2 (DDP trials); a trial that diverges in its first epoch ends with no finite metric to report (the
#: project drops NaN values): Tune must not fail the whole study for that
RAY_DEFAULTS = {
    "RAY_AIR_NEW_OUTPUT": "0",
    "RAY_DEDUP_LOGS": "1",
    "RAY_TRAIN_V2_ENABLED": "1",
    "TUNE_DISABLE_STRICT_METRIC_CHECKING": "1",
}
#: set always: Tune's default per-trial loggers are off (the tables are the record; logger callbacks a study
#: file asks for are added explicitly, study/tuning/loggers.py), and so is Tune's SIGINT handler (the run
#: contract takes SIGINT/SIGTERM over)
RAY_SETTINGS = {"TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1", "TUNE_DISABLE_SIGINT_HANDLER": "1"}


def init_ray(address: str | None, *, num_cpus: int | None = None, echo: bool = False) -> None:
    """Connect to ``address`` or start a local, loopback-only Ray (``study.tuning.cluster``); Ray's own
    log lines are kept for the study's log file, printed only with ``echo`` (:mod:`study.tuning.raylog`)."""
    from study.tuning import raylog
    from study.tuning.cluster import ray_init_kwargs

    for name, value in RAY_DEFAULTS.items():
        os.environ.setdefault(name, value)
    os.environ.update(RAY_SETTINGS)
    raylog.capture(echo=echo)  # first: it imports Ray with the settings Ray reads then (study.tuning.cluster)
    import ray

    if ray.is_initialized():
        return
    kwargs = ray_init_kwargs(address, num_cpus=num_cpus)
    try:
        ray.init(**kwargs)
    except Exception as e:  # noqa: BLE001 - Ray raises bare Exceptions on start-up time-outs
        what = f"cannot join the Ray cluster at {address}" if address else "the local Ray did not start"
        raise RayStartError(f"{what}: {type(e).__name__}: {one_line(e)}") from None


def _meta(spec: StudySpec) -> dict[str, Any]:
    """``study.json``: every path in it is relative to the study folder."""
    return {
        "name": spec.study.name,
        "file": spec.file,
        "raw": spec.raw,
        "tables": "tables",
        "ddp_storage": "ddp",
        **spec.study.resources.model_dump(),
        "max_failures": spec.study.max_failures,
        "num_trials": spec.num_trials,
        # the metric Optuna and ASHA select on, None when nothing selects (a pure grid)
        "selection_metric": tuned_metric(spec)[0] if selects(spec.raw) else None,
        "optuna_journal": "optuna.journal",
        # the command-line overrides `raw` holds applied (shown by `study status`; resume reads `raw`)
        "overrides": list(spec.overrides),
    }


def tuned_metric(spec: StudySpec) -> tuple[str, str]:
    """(metric, mode) reported to Tune: the scheduler's ``metric`` if the study file
    sets it, else ``val_acc`` when a validation split exists, else ``test_acc``."""
    sched = spec.study.scheduler
    metric = (
        sched.metric
        if sched and sched.metric is not None
        else "val_acc"
        if spec.study.validation
        else "test_acc"
    )
    return metric, (sched and sched.mode) or ("min" if metric.endswith("loss") else "max")


def _tuner(
    spec: StudySpec, meta: dict[str, Any], plan: list, todo: list[tuple[int, int]], *, verbose: bool, contract
):
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from study.scheduling.sampler import GridSampler
    from study.scheduling.trials import trial_key
    from study.tuning.hooks import ContractCallback, GridSearcher, ProgressReporter, StopAll
    from study.tuning.loggers import logger_callbacks
    from study.tuning.trainable import make_trainable

    sched, (metric, mode) = spec.study.scheduler, tuned_metric(spec)
    scheduler = None  # Tune's default: FIFO
    if sched and sched.type == "asha":
        # epochs, not Tune's iteration count: a resumed trial reports its own epochs,
        # so its rungs are those of the epochs it trained (its iterations restart at 1)
        scheduler = ASHAScheduler(
            time_attr="epochs_done",
            max_t=max(spec.train_config(c).epochs for c in spec.cells),
            grace_period=sched.grace_period,
            reduction_factor=sched.reduction_factor,
        )
    sampler = GridSampler(
        spec=spec, todo=todo, metric=metric, mode=mode, tables=meta["tables"], journal=meta["optuna_journal"]
    )
    root = meta["root"]
    return tune.Tuner(
        make_trainable(meta),
        tune_config=tune.TuneConfig(
            metric=metric,
            mode=mode,
            search_alg=GridSearcher(sampler=sampler),
            scheduler=scheduler,
            num_samples=len(todo),
            reuse_actors=meta["workers_per_trial"] == 1,
            max_concurrent_trials=spec.study.max_concurrent,
            trial_dirname_creator=trial_dirname,
        ),
        run_config=tune.RunConfig(
            name=TUNE_DIR,
            storage_path=root,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=spec.study.max_failures),
            stop=StopAll(contract=contract),
            callbacks=[
                ProgressReporter(
                    plan=plan, meta=meta, pending=[trial_key(c, s) for c, s in todo], enabled=verbose
                ),
                ContractCallback(contract=contract),
                *logger_callbacks(spec.study.loggers, root=root, study=meta["name"], tables=meta["tables"]),
            ],
        ),
    )


def trial_dirname(trial) -> str:
    """A trial's folder (and its TensorBoard run name): its table key, then Ray's id
    (unique across re-created trials), instead of Ray's tag of every config value."""
    return f"{(trial.config or {}).get('key', 'trial')}_{trial.trial_id}"


def run_study(
    spec: StudySpec,
    *,
    storage: str,
    address: str | None = None,
    verbose: bool = True,
    num_cpus: int | None = None,
    show_tracebacks: bool = False,
    prog: str = "study run",
    plan: list | None = None,
    lock=None,
):
    """Run every trial of ``spec`` (validated: :func:`study.spec.studyfile.load_spec`; ``plan``: its
    :func:`launch_plan` if the caller made it; ``lock``: the study's :class:`study.tuning.lock.StudyLock`
    if the caller holds it); returns the ``runs`` table, with the run contract's exit status as
    ``runs.attrs["exit_code"]``."""
    root = study_root(storage, spec.study.name)
    with _locked(
        root, spec.study.name, lock, address=address, num_cpus=num_cpus, echo=show_tracebacks
    ) as lock:
        meta = _meta(spec)
        write_atomic(f"{root}/{META_FILE}", json.dumps(meta, indent=2, default=str).encode())
        if not is_remote(root):
            write_atomic(f"{root}/study.yaml", yaml.safe_dump(meta["raw"], sort_keys=False).encode())
        if verbose:
            print(
                f"study {spec.study.name}: {spec.num_trials} trials ({len(spec.cells)} grid cells x "
                f"{spec.study.num_samples} samples), storage {root}",
                file=sys.stderr,
                flush=True,
            )
        return _start(
            spec,
            resolve(root, meta),
            launch_plan(spec) if plan is None else plan,
            prog=prog,
            verbose=verbose,
            show_tracebacks=show_tracebacks,
            lock=lock,
        )


def resume_study(
    root: str,
    spec: StudySpec,
    *,
    address: str | None = None,
    verbose: bool = True,
    num_cpus: int | None = None,
    show_tracebacks: bool = False,
    prog: str = "study resume",
    lock=None,
):
    """Continue a study from what it stored: the trials whose ``runs`` row has not ended run again, each
    from its own latest checkpoint; Optuna continues its journal.  ``spec``: the study's stored file,
    validated by the caller; ``lock``: as :func:`run_study`'s."""
    meta = read_meta(root)
    with _locked(root, meta["name"], lock, address=address, num_cpus=num_cpus, echo=show_tracebacks) as lock:
        shown = " ".join(shlex.quote(o) for o in meta.get("overrides") or [])
        if verbose:
            print(
                f"resuming study {meta['name']} from {root}" + (f" (overrides: {shown})" if shown else ""),
                file=sys.stderr,
                flush=True,
            )
        return _start(
            spec,
            meta,
            launch_plan(spec),
            prog=prog,
            verbose=verbose,
            show_tracebacks=show_tracebacks,
            lock=lock,
        )


@contextlib.contextmanager
def _locked(root: str, name: str, lock, *, address: str | None, num_cpus: int | None, echo: bool):
    """The study's lock held (taken here unless the caller holds ``lock``): first, so a second driver is
    refused before Ray is even imported; then Ray started or joined (``echo``: :func:`init_ray`'s) and only
    then Ray's log lines going to the study's log file: a Ray that does not start leaves no study behind (the
    lock removes the folder it created)."""
    from study.tuning import raylog
    from study.tuning.lock import StudyLock

    mine = lock is None
    if mine:
        lock = StudyLock(root=root, name=name).acquire()
    try:
        init_ray(address, num_cpus=num_cpus, echo=echo)
        raylog.to_file(raylog.log_path(root, name))
        yield lock
    finally:
        raylog.release()
        if mine:
            lock.release()


def _start(
    spec: StudySpec,
    meta: dict[str, Any],
    plan: list,
    *,
    prog: str,
    verbose: bool,
    show_tracebacks: bool,
    lock,
):
    todo = pending(spec, meta["tables"], plan)
    contract = RunContract(meta=meta, prog=prog, lock=lock)
    contract.install()
    # a trial's traceback is printed by Tune only with --verbose (Tune's documented switch, read as it runs)
    os.environ["TUNE_PRINT_ALL_TRIAL_ERRORS"] = "1" if show_tracebacks else "0"
    try:
        if todo:
            tuner = _tuner(spec, meta, plan, todo, verbose=verbose, contract=contract)
            try:
                tuner.fit()
            except OSError as e:
                contract.storage_failed(f"{e.filename or contract.root}: {e.strerror or e}")
            except (EOFError, pickle.UnpicklingError) as e:
                # Tune reading back a file it wrote on a full disk (a trial's error.pkl, at the
                # end of fit): the storage failed; the study's own state is intact for `study resume`
                full = False
                if not is_remote(contract.root):
                    with contextlib.suppress(OSError):
                        full = shutil.disk_usage(contract.root).free < (1 << 20)
                contract.storage_failed(
                    f"{contract.root}: Ray could not read back a file it wrote "
                    f"({type(e).__name__}: {one_line(e, limit=200)}): "
                    + ("No space left on device" if full else "the storage is full or failing?")
                )
            except Exception:  # noqa: BLE001 - a consequence of a storage failure already reported
                if contract.storage_error is None:
                    raise
        contract.settle()
        runs = read_table(contract.tables, "runs")
    finally:
        contract.uninstall()
    if verbose:
        print(summary(runs), flush=True)
    if contract.signal is not None and contract.storage_error is None:
        contract.say(f"interrupted; continue with `study resume {contract.meta['name']}`")
    runs.attrs["exit_code"] = contract.exit_code(runs)
    return runs


def summary(runs: pd.DataFrame) -> str:
    if runs.empty:
        return "no trial recorded"
    counts = runs.status.value_counts()
    lines = ["trials: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES if counts.get(s, 0))]
    ok = runs[runs.status != "error"]
    if len(ok):
        # the trial "best" by the metric the study selected on (validation when there is a
        # split); test accuracy is reported, never used to choose, unless the study asked
        selected = "selection_metric" in ok and ok.selection_metric.notna().any()
        has_val = "best_val_acc" in ok and ok.best_val_acc.notna().any()
        metric = (
            str(ok.selection_metric.dropna().iloc[0]) if selected else "val_acc" if has_val else "test_acc"
        )
        by = "best_val_acc" if metric.startswith("val") and "best_val_acc" in ok else "best_test_acc"
        # one line per variant, named as Table 1 and `study status` name it; the values
        # Optuna sampled are a search inside a variant: its best trial shows them
        sampled = [c for c in runs if f"sampled_{c}" in runs and runs[f"sampled_{c}"].notna().any()]
        ok = ok.assign(variant=variant_labels(runs, within=tuple(sampled)).loc[ok.index])
        best = ok.sort_values(by, ascending=False).groupby("variant", sort=False).head(1)
        lines.append(
            f"best trial per model configuration (chosen by {by}"
            + (
                "; selected on the TEST set, as the study file asks: scheduler.metric: test_acc"
                if metric.startswith("test") and selected
                else ""
            )
            + "):"
        )
        width = max(len(v) for v in best.variant)
        for _, r in best.iterrows():
            val_txt = f"best val acc {r['best_val_acc']:.4f}  " if pd.notna(r.get("best_val_acc")) else ""
            searched = "".join(f"{c}={value_text(r[c])}  " for c in sampled)
            lines.append(
                f"  {r.variant:<{width}}  {r.trial_id}  {searched}{val_txt}best test acc "
                f"{r.best_test_acc:.4f}  ({r.epochs_done}/{r.epochs} epochs, {r.status})"
            )
    errors = [
        f"  {r.trial_id}  {getattr(r, 'error', None) or 'unknown error'}  "
        f"({int(r.attempts) if r.attempts == r.attempts else '?'} attempts)"
        for r in runs[runs.status == "error"].itertuples(index=False)
    ]
    return "\n".join(lines + (["errors:", *errors] if errors else []))


__all__ = ["init_ray", "read_meta", "resolve", "resume_study", "run_study", "study_root", "summary"]
