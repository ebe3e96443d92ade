"""``study validate | run | status | resume | list``: studies on Ray Tune (what stays torch- and Ray-free:
docs/study-files.md).  Refusals and failures raise study.errors' types: `study.run` lets them through,
study.cli.main prints each as one line with its exit status."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from study.cliutil import BoundedInt, checked_splits, refused
from study.cpus import local_cpus
from study.errors import RayStartError, StorageError, StudyError, StudyFileError, UsageError
from study.limits import MAX_CLUSTER_CPUS, MAX_CLUSTER_GPUS, MAX_NAME_LENGTH
from study.metafile import MetaFileError
from study.speccheck import short
from study.storage import (
    STORAGE_ENV,
    NoBucket,
    StorageUnreachable,
    check_reachable,
    list_studies,
    read_meta,
    resolve_storage,
    study_exists,
    study_root,
)


def resolved_storage(storage: str | None, flag: str = "--storage") -> str:
    """``--storage`` (or a study's URI, ``flag``) or ``$STUDY_STORAGE`` (or ./results), an
    object store reached within a bounded wait: :class:`UsageError` if malformed or bucketless."""
    try:
        value = resolve_storage(storage)
    except ValueError as e:
        raise UsageError(str(e).replace("--storage: ", f"{flag}: ", 1)) from None
    with refused(NoBucket, "--storage: "):
        check_reachable(value)
    return value


#: ``--num-cpus`` (and ``study.run``'s ``num_cpus``): the CPUs of a local Ray
NUM_CPUS = BoundedInt(1, MAX_CLUSTER_CPUS, "MAX_CLUSTER_CPUS")


def _storage(parser, *, study: bool = False) -> None:
    if study:
        parser.add_argument("name", help="study name (under --storage) or path to a study folder")
    parser.add_argument(
        "--storage",
        default=None,
        help=f"folder or s3://bucket/prefix (default: ${STORAGE_ENV}, else ./results)",
    )


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
    """FILE, its ``KEY=VALUE`` overrides (:mod:`study.overrides`; they may also follow the
    options: ``study.cli.main`` collects them) and ``--data``."""
    parser.add_argument("file", help="study file (search_spaces/*.yaml)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=OVERRIDES_HELP)
    parser.add_argument("--data", help="override the file's data source")


def load_checked(
    file: str, *, data: str | None = None, gpus: int | None = None, cpus: int | None = None, overrides=()
):
    """The study file with its overrides, checked: :class:`study.errors.StudyFileError` if not."""
    from study.spec import load_spec

    spec = load_spec(file, data=data, gpus_available=gpus, cpus_available=cpus, overrides=tuple(overrides))
    check_loggers_of(spec.file, spec.study.loggers)
    return spec


def check_loggers_of(file: str, loggers) -> None:
    """A logger whose package is missing: :class:`StudyFileError` naming the extra."""
    from study.tuning.loggers import check_loggers

    if missing := check_loggers(loggers):
        raise StudyFileError(f"{file}: loggers.{missing[0]}: {missing[1]}")


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


def check_writable(path, option: str = "--storage", *, file: bool = False) -> None:
    """A local folder (``file``: a file) that can be created or written: :class:`UsageError` if not."""
    if "://" in str(path):
        return
    full = Path(path).resolve()
    probe = next(p for p in (full.parents if file else (full, *full.parents)) if p.exists())
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{option}: cannot write to {path} ({probe} is not a writable folder)")


def cluster_checks(*, address: str | None, storage: str, shared_storage: bool) -> None:
    """--address and --storage agree, a local Ray keeps token authentication
    (study.tuning.cluster): :class:`UsageError` before Ray starts."""
    from study.tuning.cluster import ClusterError, check_local_auth, check_storage, resolve_address

    with refused(ClusterError):
        resolve_address(address)
        check_local_auth(address)
        check_storage(storage, address=address, shared=shared_storage)


def run_run(args: argparse.Namespace) -> int:
    runs = run_file(
        args.file,
        overrides=args.overrides,
        storage=args.storage,
        data=args.data,
        name=args.name,
        address=args.address,
        shared_storage=args.shared_storage,
        num_cpus=args.num_cpus,
        quiet=args.quiet,
        verbose=args.verbose,
    )
    return _finish(runs, args.quiet)


def _finish(runs, quiet: bool) -> int:
    """The exit status of a run or resume (from the runs), after the summary if ``--quiet``."""
    if quiet:
        from study.tuning.runner import summary

        print(summary(runs))
    return runs.attrs.get("exit_code", 0)


def run_file(
    file: str,
    *,
    overrides=(),
    storage: str | None = None,
    data: str | None = None,
    name: str | None = None,
    address: str | None = None,
    shared_storage: bool = False,
    num_cpus: int | None = None,
    quiet: bool = False,
    verbose: bool = False,
    prog: str = "study run",
):
    """The one code path of ``study run`` and ``study.run``: check everything, then run
    every trial.  Returns the ``runs`` table (``attrs["exit_code"]``, ``attrs["root"]``)."""
    storage = resolved_storage(storage)
    # a local Ray gets --num-cpus or this machine's CPUs: a trial asking for more would wait forever
    spec = load_checked(
        file,
        data=data,
        overrides=overrides,
        cpus=None if address else (num_cpus if num_cpus is not None else local_cpus()),
    )
    if name is not None:  # an explicit --name '' is refused, not replaced by the file's name
        spec = replace(spec, study=spec.study.model_copy(update={"name": checked_name(name)}))
    check_writable(storage)
    cluster_checks(address=address, storage=storage, shared_storage=shared_storage)
    root, name = study_root(storage, spec.study.name), spec.study.name
    with new_study_lock(
        root, name, storage
    ) as lock:  # before Ray, torch or the data: a second driver costs < 1 s
        from study.tuning.runner import launch_plan, run_study

        preflight(spec.file, address, num_cpus, spec.study.resources.model_dump())
        # one plan: the line below and the launch order
        plan = launch_plan(spec, sizes=check_data(spec, quiet=quiet))
        if (
            not quiet and plan
        ):  # the study's compute in one line (no throughput: `study plan` predicts the time)
            from study.plan import Plan, total_line

            print(
                f"{total_line(Plan(trials=plan))} (device-hours: `study plan FILE --bench REPORT`)",
                file=sys.stderr,
                flush=True,
            )
        runs = _storage_errors(
            lambda: run_study(
                spec,
                storage=storage,
                address=address,
                num_cpus=num_cpus,
                plan=plan,
                verbose=not quiet,
                show_tracebacks=verbose,
                prog=prog,
                lock=lock,
            )
        )
    runs.attrs["root"] = root
    return runs


def new_study_lock(root: str, name: str, storage: str):
    """The lock of the study ``name`` to be created at ``root`` (a :class:`study.tuning.lock.StudyLock` to enter),
    checked before anything heavy is imported: one held by another driver is a :class:`LockError` naming it (the
    folder of a study starting holds only its lock); a study stored there, a :class:`UsageError` (a lock file
    alone, left by a driver killed before it wrote anything, is no study)."""
    from study.tuning.lock import StudyLock

    lock = StudyLock(root=root, name=name)
    if study_exists(root):
        lock.check_free()
        if (
            lock.stores_only_the_lock()
        ):  # a driver killed before it wrote its study: no study, the name is free
            return lock
        raise UsageError(
            f"--name: study {name!r} already exists in {storage} "
            f"(continue it with `study resume {name}` or pick another --name)"
        )
    return lock


def checked_name(name) -> str:
    """A study name as ``--name`` must give it: :class:`UsageError` if not."""
    from study.spec import valid_name

    if not isinstance(name, str) or not valid_name(name):
        raise UsageError(
            f"--name: must be 1 to {MAX_NAME_LENGTH} letters, digits, '-', '_' or '.', got {short(name)}"
        )
    return name


def _storage_errors(start):
    """``start()``, an ``OSError`` from it as a :class:`StorageError` naming the file."""
    try:
        return start()
    except StudyError:
        raise
    except OSError as e:
        where = getattr(e, "filename", None)
        raise (
            StorageError(str(where), e.strerror or str(e)) if where else StorageUnreachable(str(e))
        ) from None


def preflight(file: str, address: str | None, num_cpus: int | None, resources: dict) -> None:
    """Refuse (:class:`UsageError`) a trial's ``resources`` (:class:`study.spec.Resources`' fields) that a local
    Ray cannot give before it starts, or that no node of the cluster at ``address`` can hold once joined."""
    from study.tuning import preflight as checks

    if not address:
        if why := checks.check_local_resources(**resources, num_cpus=num_cpus):
            raise UsageError(f"{file}: {why}")
        return
    if why := checks.check_address(address):
        raise UsageError(why)
    from study.tuning.runner import init_ray

    try:
        init_ray(address, num_cpus=num_cpus)
    except (ConnectionError, RuntimeError, ValueError, RayStartError) as e:
        raise UsageError(f"--address: cannot start or join Ray ({' '.join(str(e).split())[:200]})") from None
    import ray

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if why := checks.check_cluster_resources(nodes, **resources):
        ray.shutdown()
        raise UsageError(f"{file}: {why}")


def check_data(spec, *, quiet: bool = False) -> dict[str, tuple[int, int]]:
    """Every data source the trials will read, loaded (and cached) before anything starts: a broken archive is
    one line, not a study of failed trials; an archive's first decode (minutes) prints progress on stderr.
    Returns the source's listed (train, test) sizes as :func:`study.plan.plan_trials` takes them."""
    from study.data.errors import DataError
    from study.data.sources import check_source

    study = (
        spec.study
    )  # its data, subset and validation are every trial's (no grid, sample or models entry sets them)
    with refused(
        DataError, f"{spec.file}: data: "
    ):  # layout and headers first, without torch: well under 1 s
        counted = check_source(study.data)
    # the size of a folder or archive is known only once loaded: one step of the largest batch must fit it
    dist = spec.sample.get("batch_size", {})
    sampled = max((v for v in (dist.get("choice") or dist.get("int") or []) if isinstance(v, int)), default=0)
    checked_splits(
        study.data,
        subset=study.subset,
        validation=study.validation,
        seed=0,
        batch=max([spec.train_config(c).batch_size for c in spec.cells] + [sampled]),
        workers=study.resources.workers_per_trial,
        where=lambda field: f"{spec.file}: {field}",
        sizes=counted,
        progress=None if quiet else (lambda line: print(line, file=sys.stderr, flush=True)),
    )
    return {} if counted is None else {study.data: counted}


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
    from study.bookkeeping import status_table
    from study.tables import read_table

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

    from study.bookkeeping import study_line
    from study.tables import read_table

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
    root = _study_root(args)
    meta = read_meta(root)
    if meta is None:
        raise UsageError(f"{root} is not a study (no study.json)")
    from study.tuning.lock import StudyLock

    # the lock before the study file is validated, Ray joined or torch imported: a second driver costs < 1 s
    with StudyLock(root=root, name=str(meta.get("name") or Path(root).name)) as lock:
        return _resume(args, root, meta, lock)


def _resume(args: argparse.Namespace, root: str, meta: dict, lock) -> int:
    cluster_checks(address=args.address, storage=root, shared_storage=args.shared_storage)
    from study.spec import Resources, validate

    if missing := [k for k in ("name", "raw", "num_trials", *Resources.model_fields) if meta.get(k) is None]:
        raise UsageError(f"{root}/study.json: {missing[0]}: missing (a study.json `study run` did not write)")
    # the study file it stored (overrides applied), validated once; a study run with --name keeps that name
    spec = validate(
        meta["raw"],
        file=f"{root}/study.json",
        default_name=meta["name"],
        overrides=tuple(meta.get("overrides") or ()),
    )
    check_loggers_of(meta.get("file", root), spec.study.loggers)
    spec = replace(spec, study=spec.study.model_copy(update={"name": meta["name"]}))
    if args.address:  # a local Ray was checked when the study ran; the trials request study.json's resources
        preflight(
            meta.get("file", root), args.address, args.num_cpus, {k: meta[k] for k in Resources.model_fields}
        )
    from study.tuning.runner import resume_study

    runs = _storage_errors(
        lambda: resume_study(
            root,
            spec,
            address=args.address,
            num_cpus=args.num_cpus,
            verbose=not args.quiet,
            show_tracebacks=args.verbose,
            prog="study resume",
            lock=lock,
        )
    )
    return _finish(runs, args.quiet)
