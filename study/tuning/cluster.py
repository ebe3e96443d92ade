"""Which Ray a study runs on, and what a cluster asks of the storage (why each: docs/clusters.md):
a local Ray of this driver's own whose servers listen on loopback only (Ray imported in its
single-machine mode), without dashboard, and only with token authentication; ``--address auto``
is ``$RAY_ADDRESS`` only; a cluster's storage is one every node reaches (``s3://…``, or a folder
said to be mounted everywhere: ``--shared-storage``)."""

from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Any

from study.device.cpus import local_cpus

#: Ray's documented settings it reads when imported, in this process's environment while the
#: study imports Ray (and only then: Ray's processes need it not, a later ``ray start`` must not
#: inherit it), unless the environment sets them: Ray's single-machine mode (its default on
#: macOS and Windows; Linux's default is a node of a cluster), in which a node started here has
#: the loopback address and every Ray server and agent listens on loopback only.  A driver that
#: joins a cluster takes the address of the node it joins (Ray reads no address of its own then).
IMPORT_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
#: Ray's documented settings it reads when it starts, kept in this process's environment (Ray's
#: processes inherit them) unless it sets them: a task without GPUs keeps the visible devices
#: (Ray 2.60's default; Ray 2.50 warns on every ``ray.init`` that this default will change, a
#: FutureWarning on the console, unless it is set).
RAY_ENV = {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
#: Environment variables naming an S3-compatible endpoint (read by pyarrow, and so by
#: Ray's storage and the tables); passed on to the workers of a cluster.
ENDPOINT_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def import_ray() -> ModuleType:
    """``ray``, imported with :data:`IMPORT_ENV` and :data:`RAY_ENV` set.  Ray reads
    :data:`IMPORT_ENV` once per process, when first imported: a process that imported Ray
    before (a notebook) keeps Ray's own default (docs/clusters.md)."""
    for name, value in RAY_ENV.items():
        os.environ.setdefault(name, value)
    added = [name for name in IMPORT_ENV if name not in os.environ]
    os.environ.update({name: IMPORT_ENV[name] for name in added})
    try:
        import ray
    finally:
        for name in added:
            del os.environ[name]
    return ray


class ClusterError(Exception):
    """A cluster set-up the study cannot run on; one line for the user."""


def resolve_address(address: str | None) -> str | None:
    """The cluster to connect to, or None for a new local Ray."""
    if address in (None, "local"):
        return None
    if address == "auto":
        env = os.environ.get("RAY_ADDRESS")
        if not env:
            raise ClusterError(
                "--address auto: RAY_ADDRESS is not set (it is under `ray job submit`); "
                "give the cluster's address, e.g. --address HEAD_IP:6379"
            )
        return env
    return address


def check_local_auth(address: str | None) -> None:
    """Refuse a local Ray without token authentication: its servers run the code of whoever
    reaches their ports (on loopback: every user of this host; in a process that imported Ray
    before the study did, its gRPC servers listen on every interface); a cluster's owner decides
    for the cluster."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if resolve_address(address) is None and mode is not None and mode.lower() != "token":
        raise ClusterError(
            f"RAY_AUTH_MODE={mode}: the local Ray's servers run the code of any process that "
            "reaches their ports (every user of this host), so token authentication must "
            "stay on: unset RAY_AUTH_MODE or set it to token"
        )


def ray_init_kwargs(address: str | None, *, num_cpus: int | None = None) -> dict[str, Any]:
    """Keyword arguments of ``ray.init`` for ``study run/resume --address ADDRESS``."""
    # Ray's driver-side log lines go to the study's log file (study.tuning.raylog routes the
    # `ray` logger before this ray.init; a LoggingConfig would put a console handler back);
    # its workers' lines stay in Ray's session folder (log_to_driver=False)
    kwargs: dict[str, Any] = dict(configure_logging=True, logging_level=logging.INFO, log_to_driver=False)
    resolved = resolve_address(address)
    if resolved is not None:  # a cluster's workers do not inherit this process's environment
        endpoint = {k: os.environ[k] for k in ENDPOINT_VARS if os.environ.get(k)}
        return {
            **kwargs,
            "address": resolved,
            **({"runtime_env": {"env_vars": endpoint}} if endpoint else {}),
        }
    check_local_auth(address)
    # the CPUs this process may use (study.device.cpus, as the preflight counted them), not Ray's own count;
    # its node address is Ray's choice: loopback once Ray is imported by import_ray
    return {
        **kwargs,
        "address": "local",
        "num_cpus": num_cpus if num_cpus is not None else local_cpus(),
        "include_dashboard": False,
    }


def check_storage(storage: str, *, address: str | None, shared: bool) -> None:
    if address is None or "://" in storage or shared:
        return
    raise ClusterError(
        f"--storage: {storage} is a local folder but --address runs trials on other nodes, "
        "which would write to their own disks: use s3://… or a folder every node mounts "
        "and say so with --shared-storage"
    )
