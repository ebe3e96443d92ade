"""Running a study, the library under ``study run``, ``study resume`` and :func:`study.run`: the study file,
storage, cluster and data checked before anything starts, then every trial run on Ray Tune
(:mod:`study.tuning`).  The commands only parse flags and print; :func:`study.run` only checks its
arguments' types.  Refusals and failures raise :mod:`study.errors`' types.  Ray, torch and the
tuning code are imported where a study starts: a refusal costs well under a second."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from study.cliutil import BoundedInt
from study.datachecks import checked_splits
from study.device.cpus import local_cpus
from study.errors import RayStartError, StorageError, StudyError, StudyFileError, UsageError, refused, short
from study.limits import MAX_CLUSTER_CPUS, MAX_NAME_LENGTH
from study.results.storage import (
    NoBucket,
    StorageUnreachable,
    check_reachable,
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


def load_checked(
    file: str, *, data: str | None = None, gpus: int | None = None, cpus: int | None = None, overrides=()
):
    """The study file with its overrides, checked: :class:`study.errors.StudyFileError` if not."""
    from study.spec.studyfile import load_spec

    spec = load_spec(file, data=data, gpus_available=gpus, cpus_available=cpus, overrides=tuple(overrides))
    check_loggers_of(spec.file, spec.study.loggers)
    return spec


def check_loggers_of(file: str, loggers) -> None:
    """A logger whose package is missing: :class:`StudyFileError` naming the extra."""
    from study.tuning.loggers import check_loggers

    if missing := check_loggers(loggers):
        raise StudyFileError(f"{file}: loggers.{missing[0]}: {missing[1]}")


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


def run(
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
    """The one code path of ``study run`` and ``study.run``: check everything, then run every trial.
    Returns the ``runs`` table (``attrs["exit_code"]``, ``attrs["root"]``: the study's folder)."""
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
        preflight(spec.file, address, num_cpus, spec.study.resources.model_dump())
        sizes = check_data(spec, quiet=quiet)  # a bad source is refused before pandas and Ray load
        from study.tuning.runner import launch_plan, run_study

        # one plan: the line below and the launch order
        plan = launch_plan(spec, sizes=sizes)
        if (
            not quiet and plan
        ):  # the study's compute in one line (no throughput: `study plan` predicts the time)
            from study.cost.plan import Plan, total_line

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
    """The lock of the study ``name`` to be created at ``root`` (a :class:`study.tuning.lock.StudyLock`
    to enter), checked before anything heavy is imported: one held by another driver is a
    :class:`LockError` naming it (the folder of a study starting holds only its lock); a study stored
    there, a :class:`UsageError` (a lock file alone, left by a driver killed before it wrote anything,
    is no study)."""
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
    from study.spec.studyfile import valid_name

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
    """Refuse (:class:`UsageError`) a trial's ``resources`` (:class:`study.spec.studyfile.Resources`'
    fields) that a local Ray cannot give before it starts, or that no node of the cluster at ``address``
    can hold once joined."""
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
    Returns the source's listed (train, test) sizes as :func:`study.cost.plan.plan_trials` takes them."""
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


def resume(
    root: str,
    *,
    address: str | None = None,
    shared_storage: bool = False,
    num_cpus: int | None = None,
    quiet: bool = False,
    verbose: bool = False,
    prog: str = "study resume",
):
    """The one code path of ``study resume``: continue the study stored at ``root`` from what it stored
    (study.json, the tables, each trial's checkpoints, the Optuna journal).  Returns the ``runs`` table
    (``attrs["exit_code"]``, ``attrs["root"]``)."""
    meta = read_meta(root)
    if meta is None:
        raise UsageError(f"{root} is not a study (no study.json)")
    from study.tuning.lock import StudyLock

    # the lock before the study file is validated, Ray joined or torch imported: a second driver costs < 1 s
    with StudyLock(root=root, name=str(meta.get("name") or Path(root).name)) as lock:
        cluster_checks(address=address, storage=root, shared_storage=shared_storage)
        from study.spec.studyfile import Resources, validate

        fields = ("name", "raw", "num_trials", *Resources.model_fields)
        if missing := [k for k in fields if meta.get(k) is None]:
            raise UsageError(
                f"{root}/study.json: {missing[0]}: missing (a study.json `study run` did not write)"
            )
        # the study file it stored (overrides applied), validated once; a study run with --name keeps that
        # name
        spec = validate(
            meta["raw"],
            file=f"{root}/study.json",
            default_name=meta["name"],
            overrides=tuple(meta.get("overrides") or ()),
        )
        check_loggers_of(meta.get("file", root), spec.study.loggers)
        spec = replace(spec, study=spec.study.model_copy(update={"name": meta["name"]}))
        if address:  # a local Ray was checked when the study ran; the trials request study.json's resources
            preflight(meta.get("file", root), address, num_cpus, {k: meta[k] for k in Resources.model_fields})
        from study.tuning.runner import resume_study

        runs = _storage_errors(
            lambda: resume_study(
                root,
                spec,
                address=address,
                num_cpus=num_cpus,
                verbose=not quiet,
                show_tracebacks=verbose,
                prog=prog,
                lock=lock,
            )
        )
    runs.attrs["root"] = root
    return runs
