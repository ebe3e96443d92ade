"""Which Ray a study runs on, and what a cluster asks of the storage (why each: docs/clusters.md):
a local Ray of this driver's own on a loopback node address, without dashboard, and only with
token authentication; ``--address auto`` is ``$RAY_ADDRESS`` only; a cluster's storage is one
every node reaches (``s3://…``, or a folder said to be mounted everywhere: ``--shared-storage``)."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from study.cpus import local_cpus

#: node address of a local Ray: loopback.  Ray rewrites 127.0.0.1 to the host's
#: network address (``services.resolve_ip_for_localhost``), 127.0.0.2 it keeps
#: (Linux routes all of 127/8 to the loopback interface).
LOCAL_NODE_IP = "127.0.0.2" if sys.platform.startswith("linux") else "127.0.0.1"
#: Environment variables naming an S3-compatible endpoint (read by pyarrow, and so by
#: Ray's storage and the tables); passed on to the workers of a cluster.
ENDPOINT_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


class ClusterError(Exception):
    """A cluster set-up the study cannot run on; one line for the user."""


def resolve_address(address: str | None) -> str | None:
    """The cluster to connect to, or None for a new local Ray."""
    if address in (None, "local"):
        return None
    if address == "auto":
        env = os.environ.get("RAY_ADDRESS")
        if not env:
            raise ClusterError("--address auto: RAY_ADDRESS is not set (it is under `ray job submit`); "
                               "give the cluster's address, e.g. --address HEAD_IP:6379")
        return env
    return address


def check_local_auth(address: str | None) -> None:
    """Refuse a local Ray without token authentication (Ray 2.60's gRPC servers listen on every
    interface whatever the node address); a cluster's owner decides for the cluster."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if resolve_address(address) is None and mode is not None and mode.lower() != "token":
        raise ClusterError(f"RAY_AUTH_MODE={mode}: the local Ray's gRPC servers listen on every network "
                           "interface (Ray 2.60 cannot bind them to loopback), so token authentication must "
                           "stay on: unset RAY_AUTH_MODE or set it to token")


def ray_init_kwargs(address: str | None, *, num_cpus: int | None = None) -> dict[str, Any]:
    """Keyword arguments of ``ray.init`` for ``study run/resume --address ADDRESS``."""
    # Ray's driver-side log lines go to the study's log file (study.tuning.raylog routes the
    # `ray` logger before this ray.init; a LoggingConfig would put a console handler back);
    # its workers' lines stay in Ray's session folder (log_to_driver=False)
    kwargs: dict[str, Any] = dict(configure_logging=True, logging_level=logging.INFO, log_to_driver=False)
    resolved = resolve_address(address)
    if resolved is not None:  # a cluster's workers do not inherit this process's environment
        endpoint = {k: os.environ[k] for k in ENDPOINT_VARS if os.environ.get(k)}
        return {**kwargs, "address": resolved, **({"runtime_env": {"env_vars": endpoint}} if endpoint else {})}
    check_local_auth(address)
    # the CPUs this process may use (study.cpus, as the preflight counted them), not Ray's own count
    return {**kwargs, "address": "local", "num_cpus": num_cpus if num_cpus is not None else local_cpus(),
            "_node_ip_address": LOCAL_NODE_IP, "include_dashboard": False}


def check_storage(storage: str, *, address: str | None, shared: bool) -> None:
    if address is None or "://" in storage or shared:
        return
    raise ClusterError(f"--storage: {storage} is a local folder but --address runs trials on other nodes, "
                       "which would write to their own disks: use s3://… or a folder every node mounts "
                       "and say so with --shared-storage")
