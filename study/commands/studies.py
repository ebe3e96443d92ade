"""``study validate | run | status | resume | list``: studies on Ray Tune.

``validate``, ``status``, ``list`` and every ``--help`` import neither torch nor Ray
(they read YAML and Parquet only), so they answer in about a second.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from study.cliutil import fail
from study.storage import STORAGE_ENV, default_storage

STORAGE_HELP = f"folder or s3://bucket/prefix (default: ${STORAGE_ENV}, else ./results)"


def _storage(parser) -> None:
    parser.add_argument("--storage", default=None, help=STORAGE_HELP)


def _cluster_flags(parser) -> None:
    parser.add_argument("--address", help="Ray cluster: HOST:PORT, ray://..., or auto = $RAY_ADDRESS "
                        "(set by `ray job submit`); default: start a local Ray on loopback")
    parser.add_argument("--shared-storage", action="store_true",
                        help="--storage is a folder every node of the cluster mounts at the same path "
                        "(required for a local folder with --address)")
    parser.add_argument("--num-cpus", type=int, help="CPUs of the local Ray (default: all)")
    parser.add_argument("--quiet", action="store_true", help="print only the final summary")


def register(sub) -> None:
    p = sub.add_parser("validate", help="check a study file and count its trials",
                       description="Validate a study file without running it: print the number of "
                       "trials and the distinct models. Errors: 'FILE: path.to.field: message', exit 2.")
    p.add_argument("file")
    p.add_argument("--data", help="override the file's data source")
    p.add_argument("--gpus", type=int, help="GPUs of the target cluster (checks GPU requests)")
    p.set_defaults(func=run_validate)

    p = sub.add_parser("run", help="run a study on Ray Tune",
                       description="Run every trial of a study file on a local Ray (default) or a "
                       "cluster (--address auto under `ray job submit`); tables stream into "
                       "STORAGE/NAME/tables while it runs.")
    p.add_argument("file")
    p.add_argument("--name", help="study name (default: the file's `name` or stem)")
    _storage(p)
    p.add_argument("--data", help="override the file's data source")
    _cluster_flags(p)
    p.set_defaults(func=run_run)

    p = sub.add_parser("status", help="trials of a study: state, epoch, best accuracy",
                       description="Read a study's tables and print its trials. A trial still "
                       "'running' with no update for over 3x its epoch time (at least 300 s) is "
                       "shown as 'stale': its driver or node died (`study resume` continues it).")
    p.add_argument("name", help="study name (under --storage) or path to a study folder")
    _storage(p)
    p.set_defaults(func=run_status)

    p = sub.add_parser("list", help="the studies under a storage",
                       description="One line per study under --storage: name, trials recorded/planned, "
                       "trial statuses (with 'stale' as in `study status`), last update.")
    _storage(p)
    p.set_defaults(func=run_list)

    p = sub.add_parser("resume", help="continue an interrupted study",
                       description="Tuner.restore: finished trials are kept, errored and interrupted "
                       "ones continue from their last checkpoint.")
    p.add_argument("name", help="study name (under --storage) or path to a study folder")
    _storage(p)
    _cluster_flags(p)
    p.set_defaults(func=run_resume)


def _spec(prog: str, file: str, data: str | None, gpus: int | None):
    from study.spec import SpecError, load_spec

    try:
        return load_spec(file, data=data, gpus_available=gpus)
    except SpecError as e:
        fail(prog, str(e))


def run_validate(args: argparse.Namespace) -> int:
    from study.models import model_name

    spec = _spec("study validate", args.file, args.data, args.gpus)
    print(f"{spec.file}: {spec.num_trials} trials ({len(spec.cells)} grid cells x {spec.num_samples} "
          f"samples), {len(spec.models)} distinct models:")
    for m in spec.models:
        print(f"  {model_name(m)}")
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
    from study.storage import study_root

    if "://" not in name and Path(name).is_dir() and (Path(name) / "study.json").exists():
        return str(Path(name).resolve())
    return study_root(storage, name)


def _cluster_checks(prog: str, args: argparse.Namespace) -> None:
    """--address and --storage agree (study.tuning.cluster): one line, exit 2, before Ray starts."""
    from study.tuning.cluster import ClusterError, check_storage, resolve_address

    try:
        resolve_address(args.address)
        check_storage(args.storage, address=args.address, shared=args.shared_storage)
    except ClusterError as e:
        fail(prog, str(e))


def run_run(args: argparse.Namespace) -> int:
    prog = "study run"
    args.storage = args.storage or default_storage()
    spec = _spec(prog, args.file, args.data, None)
    if args.name:
        from study.spec import _valid_name

        if not _valid_name(args.name):
            fail(prog, f"--name: must be letters, digits, '-', '_' or '.', got {args.name!r}")
        object.__setattr__(spec, "name", args.name)
    _check_storage(prog, args.storage)
    _cluster_checks(prog, args)
    from study.tuning.runner import init_ray, run_study, study_root

    root = study_root(args.storage, spec.name)
    if "://" not in root and Path(root).exists() and any(Path(root).iterdir()):
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


def _check_data(prog: str, spec) -> None:
    """Load (and cache) every data source the trials will read before anything
    starts, so a broken archive is one error line, not a study of failed trials."""
    from study.data import DataError, load_splits

    for source, subset in sorted({(c.data, c.subset) for c in (spec.train_config(cell) for cell in spec.cells)},
                                 key=str):
        try:
            load_splits(source, subset=subset)
        except DataError as e:
            fail(prog, f"{spec.file}: data: {e}")


def run_status(args: argparse.Namespace) -> int:
    from study.bookkeeping import status_table
    from study.storage import read_meta
    from study.tables import read_table

    args.storage = args.storage or default_storage()
    root = _root(args.storage, args.name)
    if "://" not in root and not Path(root).is_dir():
        fail("study status", f"no study {args.name!r} in {args.storage}")
    runs = read_table(f"{root}/tables", "runs")
    try:
        planned = read_meta(root).get("num_trials")
    except (FileNotFoundError, OSError):
        planned = None
    print(status_table(runs, planned))
    return 0


def run_list(args: argparse.Namespace) -> int:
    import pandas as pd

    from study.bookkeeping import study_line
    from study.storage import list_studies, read_meta, study_root
    from study.tables import read_table

    storage = args.storage or default_storage()
    if "://" not in storage and not Path(storage).is_dir():
        fail("study list", f"--storage: no folder {storage}")
    rows = []
    for name in list_studies(storage):
        root = study_root(storage, name)
        try:
            planned = read_meta(root).get("num_trials")
        except (OSError, ValueError):
            planned = None
        rows.append(study_line(name, read_table(f"{root}/tables", "runs"), planned))
    if not rows:
        print(f"no studies in {storage}")
        return 0
    print(pd.DataFrame(rows).to_string(index=False))
    return 0


def run_resume(args: argparse.Namespace) -> int:
    args.storage = args.storage or default_storage()
    root = _root(args.storage, args.name)
    if "://" not in root and not (Path(root) / "study.json").exists():
        fail("study resume", f"no study {args.name!r} in {args.storage}")
    _cluster_checks("study resume", argparse.Namespace(**{**vars(args), "storage": root}))
    from study.tuning.runner import resume_study, summary

    runs = resume_study(root, address=args.address, verbose=not args.quiet, num_cpus=args.num_cpus)
    if args.quiet:
        print(summary(runs))
    return 0


