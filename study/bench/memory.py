"""Memory of the benchmarked steps: CUDA's allocator peak, or on CPU the rise of
the process's peak RSS (Linux ``/proc/self``, approximate; ``resource.getrusage``'s
peak cannot be reset between variants, ``/proc/self/clear_refs`` can)."""

from __future__ import annotations

import ctypes
import gc

import torch

from study.devicepaths import synchronize


class MemoryProbe:
    """Memory of the steps run inside: ``peak_mb`` (CUDA's absolute peak; ``None`` on
    CPU) and ``step_mb``, the rise over what was held at entry (``None`` where the CPU's
    peak RSS cannot be read)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak_mb: float | None = None
        self.step_mb: float | None = None

    def __enter__(self):
        gc.collect()
        synchronize(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            try:
                ctypes.CDLL("libc.so.6").malloc_trim(0)
            except (OSError, AttributeError):
                pass
            self._rss0 = _proc_status_kb("VmRSS") if _reset_peak_rss() else None
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device)
            self.peak_mb, self.step_mb = peak / 2**20, (peak - self._base) / 2**20
        elif self._rss0 is not None and (hwm := _proc_status_kb("VmHWM")) is not None:
            self.step_mb = max(hwm - self._rss0, 0) / 1024
        return False


def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith(key + ":")), None)
    except OSError:
        return None


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
