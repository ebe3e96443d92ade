"""Memory of the benchmarked steps: CUDA's allocator peak, or on CPU the rise of
the process's peak RSS (Linux ``/proc/self``, approximate; ``resource.getrusage``'s
peak cannot be reset between variants, ``/proc/self/clear_refs`` can)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
from collections.abc import Iterator
from pathlib import Path

import torch

from study.device.paths import synchronize


@contextlib.contextmanager
def memory_probe(device: torch.device) -> Iterator[dict[str, float | None]]:
    """Memory of the steps run inside, filled in on exit: ``peak_mb`` (CUDA's absolute peak;
    ``None`` on CPU) and ``step_mb``, the rise over what was held at entry (``None`` where the
    CPU's peak RSS cannot be read)."""
    mem: dict[str, float | None] = {"peak_mb": None, "step_mb": None}
    gc.collect()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        rss0 = None
        # reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")
            rss0 = _proc_status_kb("VmRSS")
    yield mem
    synchronize(device)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        mem.update(peak_mb=peak / 2**20, step_mb=(peak - base) / 2**20)
    elif rss0 is not None and (hwm := _proc_status_kb("VmHWM")) is not None:
        mem["step_mb"] = max(hwm - rss0, 0) / 1024


def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith(key + ":")), None)
    except OSError:
        return None
