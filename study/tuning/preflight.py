"""Checks before a Ray is started or joined: one line in well under a second
instead of a hang (an unreachable ``--address``, a request no node can satisfy)
or orphan Ray processes.  No torch, no ray import."""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path

from study.device.cpus import local_cpus


def local_gpus() -> int:
    """GPUs a local Ray would see: ``CUDA_VISIBLE_DEVICES`` if set, else the NVIDIA
    driver's device list (what ``nvidia-smi -L`` lists), without importing torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    gpus = Path("/proc/driver/nvidia/gpus")
    return len(list(gpus.iterdir())) if gpus.is_dir() else 0


def check_local_resources(
    *, cpus_per_trial: float, workers_per_trial: int, gpus_per_trial: float, num_cpus: int | None
) -> str | None:
    """What a local Ray cannot satisfy (None if it can)."""
    cpus = num_cpus if num_cpus is not None else local_cpus()
    need = cpus_per_trial + (0.01 if workers_per_trial > 1 else 0)  # + the DDP trial's coordinator
    if need > cpus:
        return (
            f"resources.cpus_per_trial: a trial needs {need:g} CPUs but the local Ray has {cpus} "
            f"({'--num-cpus' if num_cpus is not None else 'this machine'})"
        )
    if (
        gpus_per_trial and (have := local_gpus()) < gpus_per_trial
    ):  # a fraction needs one GPU, more need as many
        return (
            f"resources.gpus_per_trial: requests {gpus_per_trial:g} GPU(s) per trial "
            f"but this machine has {have}"
        )
    return None


def check_cluster_resources(
    nodes: list[dict], *, cpus_per_trial: float, gpus_per_trial: float, workers_per_trial: int = 1
) -> str | None:
    """What no node of the joined cluster can hold now (``nodes``: the ``Resources`` of
    every alive node, ``ray.nodes()``).  A trial's process runs on one node (a DDP worker: an
    even share, one node each), so a 4-CPU trial on two 2-CPU nodes would wait forever."""
    if os.environ.get("STUDY_SKIP_RESOURCE_CHECK") == "1":
        return None
    workers = max(1, int(workers_per_trial))
    cpu, gpu = cpus_per_trial / workers, gpus_per_trial / workers
    what = "a trial" if workers == 1 else f"each of a trial's {workers} workers"
    largest = {k: f"{max((n.get(k, 0) for n in nodes), default=0):g}" for k in ("CPU", "GPU")}
    summary = (
        f"{len(nodes)} node(s), largest {largest['CPU']} CPUs / {largest['GPU']} GPUs, "
        f"{sum(n.get('CPU', 0) for n in nodes):g} CPUs in all"
    )
    if not any(n.get("CPU", 0) >= cpu for n in nodes):
        return f"resources.cpus_per_trial: {what} needs {cpu:g} CPUs on one node; the cluster has {summary}"
    if gpu and not any(n.get("CPU", 0) >= cpu and n.get("GPU", 0) >= gpu for n in nodes):
        return (
            f"resources.gpus_per_trial: {what} needs {gpu:g} GPU(s) and {cpu:g} CPUs on one node; the "
            f"cluster has {summary}"
        )
    if workers > 1:
        fit = sum(
            min(
                math.floor(n.get("CPU", 0) / cpu) if cpu else workers,
                math.floor(n.get("GPU", 0) / gpu) if gpu else workers,
            )
            for n in nodes
        )
        if fit < workers:
            return (
                f"resources.workers_per_trial: the cluster's nodes hold {fit} of a trial's {workers} workers "
                f"({cpu:g} CPUs{f', {gpu:g} GPU(s)' if gpu else ''} each); the cluster has {summary}"
            )
    return None


def check_address(address: str, *, timeout: float = 3.0) -> str | None:
    """Whether ``host:port`` / ``ray://host:port`` accepts a TCP connection (``auto`` without
    ``RAY_ADDRESS`` was refused by :func:`study.tuning.cluster.resolve_address` before)."""
    if address in ("auto", "local"):
        return None
    target = address.split("://", 1)[-1].rstrip("/")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return f"--address: expected HOST:PORT, ray://HOST:PORT or auto, got {address!r}"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        return f"--address: cannot reach the Ray cluster at {address} ({e.strerror or e})"
    return None
