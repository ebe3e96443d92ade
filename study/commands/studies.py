"""``study validate | run | status | resume | list``: the flags of the study commands and what they print.
Running and resuming is :mod:`study.driver`'s (the library under ``study.run`` too); its refusals and
failures raise study.errors' types, which study.cli.main prints as one line with its exit status."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from study import driver
from study.cliutil import BoundedInt
from study.device.cpus import local_cpus
from study.driver import NUM_CPUS, load_checked, resolved_storage
from study.errors import UsageError
from study.limits import MAX_CLUSTER_CPUS, MAX_CLUSTER_GPUS
from study.results.metafile import MetaFileError
from study.results.storage import STORAGE_ENV, list_studies, read_meta, study_exists, study_root


def _storage(parser, *, study: bool = False) -> None:
    if study:
        parser.add_argument("name", help="study name (under --storage) or path to a study folder")
    parser.add_argument(
        "--storage",
        help=f"folder or s3://bucket/prefix (default: ${STORAGE_ENV}, else ./results)",
    )


#: the flags of :func:`_cluster_flags`: keywords of the same names of driver.run and driver.resume
CLUSTER_FLAGS = ("address", "shared_storage", "num_cpus", "quiet", "verbose")


def _cluster_flags(parser) -> None:
    parser.add_argument(
        "--address",
        help="Ray cluster: HOST:PORT, ray://..., or auto = $RAY_ADDRESS "
        "(set by `ray job submit`); default: start a local Ray on loopback",
    )
    parser.add_argument(
        "--shared-storage",
        action="store_true",
        help="--storage is a folder every node of the cluster mounts at the same path "
        "(required for a local folder with --address)",
    )
    parser.add_argument("--num-cpus", type=NUM_CPUS, help="CPUs of the local Ray (default: all)")
    parser.add_argument("--quiet", action="store_true", help="print only the final summary")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print Ray's own log lines and the tracebacks of failed trials "
        "(by default Ray's log lines go to the study's logs/ray.log only)",
    )


EXIT_CODES = (
    "exit status: 0 every trial ended (finished, diverged or stopped by ASHA); 1 a trial ended in "
    "error (runs.error has the cause); 2 bad input, nothing started; 3 storage failed; 4 Ray did not start "
    "or could not be reached; 130 SIGINT, 143 SIGTERM (state saved: `study resume NAME` continues)"
)
OVERRIDES_HELP = (
    "override a field of the study file, in Hydra's syntax: key.sub=VALUE, 'models[0].num_heads=16', "
    "seeds=[0,1,2] (VALUE is YAML), +key=VALUE adds a field the file lacks, ~key deletes one; "
    "checked like the file and recorded in study.json"
)


def register(sub) -> None:
    p = sub.add_parser(
        "validate",
        help="check a study file and count its trials",
        description="Validate a study file without running it: print the number of "
        "trials and the distinct models. Errors: 'FILE: path.to.field: message', exit 2.",
    )
    add_study_file(p)
    p.add_argument(
        "--gpus",
        type=BoundedInt(0, MAX_CLUSTER_GPUS, "MAX_CLUSTER_GPUS"),
        help="GPUs of the target cluster (checks GPU requests)",
    )
    p.add_argument(
        "--cpus",
        type=BoundedInt(0, MAX_CLUSTER_CPUS, "MAX_CLUSTER_CPUS"),
        help="CPUs of the target machine or cluster (default: this machine's)",
    )
    p.set_defaults(func=run_validate)

    p = sub.add_parser(
        "run",
        help="run a study on Ray Tune",
        description="Run every trial of a study file on a local Ray (default) or a "
        "cluster (--address auto under `ray job submit`); tables stream into "
        "STORAGE/NAME/tables while it runs.",
        epilog=EXIT_CODES,
    )
    add_study_file(p)
    p.add_argument("--name", help="study name (default: the file's `name` or stem)")
    _storage(p)
    _cluster_flags(p)
    p.set_defaults(func=run_run)

    p = sub.add_parser(
        "status",
        help="trials of a study: state, epoch, best accuracy",
        description="Read a study's tables and print its trials. A trial still "
        "'running' with no update for over 3x its epoch time (at least 300 s) is "
        "shown as 'stale': its driver or node died (`study resume` continues it).",
    )
    _storage(p, study=True)
    p.set_defaults(func=run_status)

    p = sub.add_parser(
        "list",
        help="the studies under a storage",
        description="One line per study under --storage: name, trials recorded/planned, "
        "trial statuses (with 'stale' as in `study status`), last update.",
    )
    _storage(p)
    p.set_defaults(func=run_list)

    p = sub.add_parser(
        "resume",
        help="continue an interrupted study",
        description="Continue a study from what it stored (study.json, the tables, each "
        "trial's own checkpoints, the Optuna journal): finished, diverged and stopped trials "
        "are kept, every other one continues from its last checkpoint (attempts counted, "
        "device-seconds accumulated). Works on a moved or copied study folder.",
        epilog=EXIT_CODES,
    )
    _storage(p, study=True)
    _cluster_flags(p)
    p.set_defaults(func=run_resume)


def add_study_file(parser) -> None:
    """FILE, its ``KEY=VALUE`` overrides (:mod:`study.spec.overrides`; they may also follow the
    options: ``study.cli.main`` collects them) and ``--data``."""
    parser.add_argument("file", help="study file (search_spaces/*.yaml)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=OVERRIDES_HELP)
    parser.add_argument("--data", help="override the file's data source")


def run_validate(args: argparse.Namespace) -> int:
    from study.models import model_name

    spec = load_checked(
        args.file,
        data=args.data,
        gpus=args.gpus,
        overrides=args.overrides,
        cpus=args.cpus if args.cpus is not None else local_cpus(),
    )
    count = f"{len(spec.models)}" if spec.models_complete else f"at least {len(spec.models)}"
    print(
        f"{spec.file}: {spec.num_trials} trials ({len(spec.cells)} grid cells x {spec.study.num_samples} "
        f"samples), {count} distinct models:"
    )
    shown = 50
    for m in spec.models[:shown]:
        print(f"  {model_name(m)}")
    if len(spec.models) > shown:
        print(f"  ... and {len(spec.models) - shown} more")
    print(f"loggers: {', '.join(spec.study.loggers) or 'none'}")
    if spec.overrides:
        print(f"overrides: {shlex.join(map(str, spec.overrides))}")  # as a shell takes them back
    return 0


def run_run(args: argparse.Namespace) -> int:
    file_flags = dict(overrides=args.overrides, storage=args.storage, data=args.data, name=args.name)
    return _drive(driver.run, args, args.file, **file_flags)


def _drive(start, args: argparse.Namespace, *where, **flags) -> int:
    """``start`` (driver.run or driver.resume) with the cluster flags: the exit status of its runs, after
    the summary if ``--quiet``."""
    runs = start(*where, **flags, **{k: getattr(args, k) for k in CLUSTER_FLAGS})
    if args.quiet:
        from study.tuning.runner import summary

        print(summary(runs))
    return runs.attrs.get("exit_code", 0)


def _study_root(args: argparse.Namespace) -> str:
    """The folder of the study NAME names (a study under --storage, a local study folder, or a study's URI
    checked like --storage); :class:`UsageError` if nothing is stored there."""
    args.storage, name = resolved_storage(args.storage), args.name
    root = study_root(args.storage, name)
    if "://" in name:
        root = resolved_storage(name, "NAME")
    elif Path(name).is_dir() and (
        os.path.lexists(Path(name) / "study.json")
        or (Path(name) / "trial.json").is_file()
        # a study name never holds a '/' or starts with '.': such a NAME is a path
        or "/" in name
        or name.startswith(".")
        or ("://" not in args.storage and not os.path.lexists(root))
    ):
        root = str(Path(name).resolve())
    if not study_exists(root):
        raise UsageError(f"no study {args.name!r} in {args.storage}")
    return root


def run_status(args: argparse.Namespace) -> int:
    from study.results.tables import read_table
    from study.status.bookkeeping import status_table

    root = _study_root(args)  # a local one is a folder (study_exists listed it)
    planned, overrides = None, None
    # a `study train --out` folder has its ledger and tables, no study.json
    if "://" in root or not ((Path(root) / "trial.json").is_file() and (Path(root) / "tables").is_dir()):
        meta = read_meta(root)
        if meta is None:
            raise UsageError(
                f"{root} is not a study (no study.json: neither `study run` nor `study train` wrote it)"
            )
        planned, overrides = meta.get("num_trials"), meta.get("overrides")
    print(status_table(read_table(f"{root}/tables", "runs"), planned))
    if overrides:  # the study that ran is its file with these (study.yaml holds the result)
        print(f"overrides: {shlex.join(map(str, overrides))}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    """Every study under --storage; a study whose study.json cannot be read is one line
    on stderr naming the file (the others are still listed) and makes the exit status 2."""
    import pandas as pd

    from study.results.tables import read_table
    from study.status.bookkeeping import study_line

    storage = resolved_storage(args.storage)
    if "://" not in storage and not Path(storage).is_dir():
        raise UsageError(f"--storage: no folder {storage}")
    rows, broken = [], []
    for name in list_studies(storage):
        root = study_root(storage, name)
        try:
            meta = read_meta(root)
        except MetaFileError as e:
            broken.append(str(e))
            rows.append(
                {
                    "name": name,
                    "trials": "-",
                    "statuses": f"broken: study.json {e.reason[:60]}",
                    "last_update": "-",
                }
            )
            continue
        rows.append(study_line(name, read_table(f"{root}/tables", "runs"), (meta or {}).get("num_trials")))
    if not rows:
        print(f"no studies in {storage}")
        return 0
    print(pd.DataFrame(rows).to_string(index=False))
    for line in broken:
        print(f"study list: error: {line}", file=sys.stderr)
    return 2 if broken else 0


def run_resume(args: argparse.Namespace) -> int:
    return _drive(driver.resume, args, _study_root(args))
