"""The local CPU count, one function for the whole project."""

from __future__ import annotations

import os


def local_cpus() -> int:
    """CPUs this process may use: its CPU affinity on Linux, else every CPU of the machine; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
