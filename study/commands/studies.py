"""``study validate | run | status | resume``: studies on Ray Tune."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from study.cliutil import fail

DEFAULT_STORAGE = "results"


def register(sub) -> None:
    p = sub.add_parser("validate", help="check a study file and count its trials",
                       description="Validate a study file without running it: print the number of "
                       "trials and the distinct models. Errors: 'FILE: path.to.field: message', exit 2.")
    p.add_argument("file")
    p.add_argument("--data", help="override the file's data source")
    p.add_argument("--gpus", type=int, help="GPUs of the target cluster (checks GPU requests)")
    p.add_argument("--cpus", type=int, help="CPUs of the target machine or cluster (default: this machine's)")
    p.set_defaults(func=run_validate)

    p = sub.add_parser("run", help="run a study on Ray Tune",
                       description="Run every trial of a study file on a local Ray (default) or a "
                       "cluster (--address auto under `ray job submit`); tables stream into "
                       "STORAGE/NAME/tables while it runs.")
    p.add_argument("file")
    p.add_argument("--name", help="study name (default: the file's `name` or stem)")
    p.add_argument("--storage", default=DEFAULT_STORAGE, help="folder or s3://bucket/prefix (default ./results)")
    p.add_argument("--data", help="override the file's data source")
    p.add_argument("--address", help="Ray cluster address (e.g. auto); default: start a local Ray")
    p.add_argument("--num-cpus", type=int, help="CPUs of the local Ray (default: all)")
    p.add_argument("--quiet", action="store_true", help="print only the final summary")
    p.set_defaults(func=run_run)

    p = sub.add_parser("status", help="trials of a study: state, epoch, best accuracy",
                       description="Read a study's tables and print its trials.")
    p.add_argument("name", help="study name (under --storage) or path to a study folder")
    p.add_argument("--storage", default=DEFAULT_STORAGE)
    p.set_defaults(func=run_status)

    p = sub.add_parser("resume", help="continue an interrupted study",
                       description="Tuner.restore: finished trials are kept, errored and interrupted "
                       "ones continue from their last checkpoint.")
    p.add_argument("name", help="study name (under --storage) or path to a study folder")
    p.add_argument("--storage", default=DEFAULT_STORAGE)
    p.add_argument("--address")
    p.add_argument("--num-cpus", type=int)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_resume)


def _spec(prog: str, file: str, data: str | None, gpus: int | None, cpus: int | None = None):
    from study.spec import SpecError, load_spec

    try:
        return load_spec(file, data=data, gpus_available=gpus, cpus_available=cpus)
    except SpecError as e:
        fail(prog, str(e))


def local_cpus() -> int:
    """CPUs this process may use (what a local Ray gets by default)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def run_validate(args: argparse.Namespace) -> int:
    from study.models import model_name

    spec = _spec("study validate", args.file, args.data, args.gpus,
                 args.cpus if args.cpus is not None else local_cpus())
    count = f"{len(spec.models)}" if spec.models_complete else f"at least {len(spec.models)}"
    print(f"{spec.file}: {spec.num_trials} trials ({len(spec.cells)} grid cells x {spec.num_samples} "
          f"samples), {count} distinct models:")
    shown = 50
    for m in spec.models[:shown]:
        print(f"  {model_name(m)}")
    if len(spec.models) > shown:
        print(f"  ... and {len(spec.models) - shown} more")
    return 0


def _check_storage(prog: str, storage: str) -> None:
    if "://" in storage:
        return
    p = Path(storage).resolve()
    probe = p
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        fail(prog, f"--storage: cannot write to {storage} ({probe} is not a writable folder)")


def _root(storage: str, name: str) -> str:
    from study.tuning.runner import study_root

    if "://" not in name and Path(name).is_dir() and (Path(name) / "study.json").exists():
        return str(Path(name).resolve())
    return study_root(storage, name)


def run_run(args: argparse.Namespace) -> int:
    prog = "study run"
    # a local Ray gets --num-cpus or this machine's CPUs: a trial asking for more would wait forever
    spec = _spec(prog, args.file, args.data, None,
                 None if args.address else (args.num_cpus if args.num_cpus is not None else local_cpus()))
    if args.name:
        from study.limits import MAX_NAME_LENGTH
        from study.spec import _valid_name
        from study.speccheck import short

        if not _valid_name(args.name):
            fail(prog, f"--name: must be 1 to {MAX_NAME_LENGTH} letters, digits, '-', '_' or '.', "
                       f"got {short(args.name)}")
        object.__setattr__(spec, "name", args.name)
    _check_storage(prog, args.storage)
    from study.tuning.runner import init_ray, run_study, study_root

    root = study_root(args.storage, spec.name)
    if _exists(prog, root):
        fail(prog, f"--name: study {spec.name!r} already exists in {args.storage} "
                   f"(continue it with `study resume {spec.name}` or pick another --name)")
    _check_data(prog, spec)
    init_ray(args.address, num_cpus=args.num_cpus)
    if spec.gpus_per_trial:
        import ray

        have = ray.cluster_resources().get("GPU", 0)
        if have < min(spec.gpus_per_trial, 1):
            fail(prog, f"{spec.file}: resources.gpus_per_trial: requests {spec.gpus_per_trial:g} GPU(s) "
                       f"per trial but the cluster has {have:g}")
    runs = run_study(spec, storage=args.storage, address=args.address, verbose=not args.quiet)
    if args.quiet:
        from study.tuning.runner import summary

        print(summary(runs))
    return 0


def _exists(prog: str, root: str) -> bool:
    """Whether a study is stored at ``root``; an unreachable object store is one line."""
    from study.tuning.runner import study_exists

    try:
        return study_exists(root)
    except OSError as e:
        fail(prog, f"--storage: cannot reach {root}: {' '.join(str(e).split())}")


def _check_data(prog: str, spec) -> None:
    """Load (and cache) every data source the trials will read before anything
    starts, so a broken archive is one error line, not a study of failed trials."""
    from study.data import DataError, hold_out_validation, load_splits

    configs = [spec.train_config(cell) for cell in spec.cells]
    for source, subset, validation in sorted({(c.data, c.subset, c.validation) for c in configs}, key=str):
        try:
            splits = load_splits(source, subset=subset)
        except DataError as e:
            fail(prog, f"{spec.file}: data: {e}")
        try:
            hold_out_validation(splits, validation=validation, seed=0)
        except DataError as e:
            fail(prog, f"{spec.file}: {e}")
        n = len(splits.train_labels)
        # the size of a folder or archive is known only now: one step's batch must fit it
        dist = spec.sample.get("batch_size", {})
        sampled = max((v for v in (dist.get("choice") or dist.get("int") or []) if isinstance(v, int)), default=0)
        batch = max([c.batch_size for c in configs if (c.data, c.subset) == (source, subset)] + [sampled])
        if batch * spec.workers_per_trial > n:
            workers = f" x {spec.workers_per_trial} workers" if spec.workers_per_trial > 1 else ""
            fail(prog, f"{spec.file}: batch_size: {batch}{workers} images per step is more than the {n} "
                       f"training images of {source}: no training step would run")


def run_status(args: argparse.Namespace) -> int:
    from study.tables import read_table

    root = _root(args.storage, args.name)
    if not _exists("study status", root):
        fail("study status", f"no study {args.name!r} in {args.storage}")
    runs = read_table(f"{root}/tables", "runs")
    from study.tuning.runner import read_meta

    try:
        planned = read_meta(root).get("num_trials")
    except (FileNotFoundError, OSError):
        planned = None
    print(status_table(runs, planned))
    return 0


def status_table(runs, planned: int | None) -> str:
    lines = []
    head = f"{len(runs)} trials recorded" + (f" of {planned} planned" if planned else "")
    if len(runs):
        counts = runs.status.value_counts()
        head += ": " + ", ".join(f"{n} {s}" for s, n in counts.items())
    lines.append(head)
    if len(runs):
        cols = ["trial_id", "name", "status", "epochs_done", "epochs", "best_test_acc", "device_seconds"]
        frame = runs[cols].rename(columns={"epochs_done": "epoch", "best_test_acc": "best_acc",
                                           "device_seconds": "device_s"})
        lines.append(frame.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return "\n".join(lines)


def run_resume(args: argparse.Namespace) -> int:
    root = _root(args.storage, args.name)
    if not _exists("study resume", root) or ("://" not in root and not (Path(root) / "study.json").exists()):
        fail("study resume", f"no study {args.name!r} in {args.storage}")
    from study.tuning.runner import resume_study, summary

    runs = resume_study(root, address=args.address, verbose=not args.quiet, num_cpus=args.num_cpus)
    if args.quiet:
        print(summary(runs))
    return 0


