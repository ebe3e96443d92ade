"""Which device-dependent code paths a run takes, chosen in one place.

Every branch that used to be taken only when ``device.type == "cuda"`` is a field
here, so that each can be selected on any device and so run on CPU in tests
against its reference path (docs/performance.md, "Device-dependent code paths"):

* ``autocast_dtype``: mixed precision, ``torch.autocast(device.type, dtype)``
  (bf16 on CUDA by default; ``torch.autocast("cpu", dtype=torch.bfloat16)`` runs the
  same branch on CPU);
* ``compile`` / ``compile_backend``: ``torch.compile`` of the model as trained
  (``inductor`` by default; ``aot_eager`` traces the same graphs without code
  generation);
* ``channels_last``: NHWC memory format of convolutional models and their input;
* ``pinned_transfer``: host→device copies through page-locked memory,
  ``non_blocking`` (needs a CUDA driver: ``pin_memory`` raises without one);
* ``cuda_rng``: checkpoints carry and restore ``torch.cuda``'s RNG state.

The defaults of a device are :meth:`DevicePaths.for_device`; CUDA-only calls that
have no CPU counterpart (``torch.cuda.set_device``, ``synchronize``, DDP's
``device_ids``) are small functions here whose decision is tested on CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from study.bench import COMPILE_BACKENDS  # torch-free, shared with the CLI


@dataclass(frozen=True, kw_only=True)
class DevicePaths:
    """The device-dependent branches a run takes (module doc); each independent of
    the device it runs on."""

    autocast_dtype: torch.dtype | None = None  # None: float32, no autocast
    compile: bool = False
    compile_backend: str = "inductor"
    channels_last: bool = False
    pinned_transfer: bool = False
    cuda_rng: bool = False

    def __post_init__(self) -> None:
        if self.compile_backend not in COMPILE_BACKENDS:
            raise ValueError(f"compile_backend must be one of {', '.join(COMPILE_BACKENDS)}, "
                             f"got {self.compile_backend!r}")
        if self.autocast_dtype not in (None, torch.bfloat16, torch.float16):
            raise ValueError(f"autocast_dtype must be None, torch.bfloat16 or torch.float16, "
                             f"got {self.autocast_dtype!r}")

    @classmethod
    def for_device(cls, device: torch.device | str, *, amp: bool = True, compile: bool = False,
                   **overrides: Any) -> "DevicePaths":
        """A device's defaults: on CUDA bf16 autocast (if ``amp``), channels-last
        convolutions, pinned transfers and the CUDA RNG in checkpoints; on CPU none of
        them (float32: CPU bf16 is slower on most CPUs and changes results).
        ``overrides`` select any branch regardless of the device."""
        cuda = torch.device(device).type == "cuda"
        base = dict(autocast_dtype=torch.bfloat16 if (amp and cuda) else None, compile=compile,
                    channels_last=cuda, pinned_transfer=cuda, cuda_rng=cuda)
        return cls(**{**base, **overrides})

    def replace(self, **changes: Any) -> "DevicePaths":
        return dataclasses.replace(self, **changes)

    def autocast(self, device: torch.device | str) -> contextlib.AbstractContextManager:
        """The mixed-precision context of ``device``'s type (a no-op in float32)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(torch.device(device).type, dtype=self.autocast_dtype)

    def autocast_factory(self, device: torch.device | str) -> Callable[[], contextlib.AbstractContextManager]:
        """A zero-argument callable returning :meth:`autocast` (what loops call per batch)."""
        return lambda: self.autocast(device)

    def compiled(self, module: nn.Module | Callable) -> nn.Module | Callable:
        """``torch.compile(module, backend=compile_backend)`` if ``compile``, else ``module``."""
        return torch.compile(module, backend=self.compile_backend) if self.compile else module

    def memory_format(self, model: nn.Module, x: torch.Tensor | None = None):
        """``model`` (and ``x``) in channels-last if selected, else unchanged: ``(model, x)``."""
        if not self.channels_last:
            return model, x
        model = model.to(memory_format=torch.channels_last)
        return model, (None if x is None else x.contiguous(memory_format=torch.channels_last))

    def precision_name(self) -> str:
        return "float32" if self.autocast_dtype is None else f"{_dtype_name(self.autocast_dtype)} autocast"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def to_device(t: torch.Tensor, device: torch.device, *, pinned: bool) -> torch.Tensor:
    """``t`` on ``device``; ``pinned``: through page-locked host memory, without
    blocking the host (the CUDA branch of the device-resident pipeline)."""
    if pinned:
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def ddp_device_ids(device: torch.device) -> list[int] | None:
    """DDP's ``device_ids``: the one CUDA device of this rank; ``None`` for CPU
    modules (DDP refuses ``device_ids`` there)."""
    if device.type == "cuda":
        return [device.index if device.index is not None else 0]
    return None


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA); CPU work is already done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def select_device(device: torch.device) -> None:
    """Make ``device`` this process's current CUDA device (no-op elsewhere)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


def capture_rng(device: torch.device, *, cuda: bool,
                get_cuda: Callable[[torch.device], torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The RNG states a checkpoint carries: ``rng_cpu`` always, ``rng_cuda`` when
    ``cuda`` (``get_cuda(device)``, by default ``torch.cuda.get_rng_state``)."""
    state = {"rng_cpu": torch.get_rng_state()}
    if cuda:
        state["rng_cuda"] = (get_cuda or torch.cuda.get_rng_state)(device)
    return state


def restore_rng(state: dict[str, Any], device: torch.device, *, cuda: bool,
                set_cuda: Callable[[torch.Tensor, torch.device], None] | None = None) -> bool:
    """Restore ``rng_cpu``, and ``rng_cuda`` when ``cuda`` and the checkpoint has it
    (``set_cuda(state, device)``, by default ``torch.cuda.set_rng_state``).  A CUDA
    state in a checkpoint resumed on CPU is left alone.  Returns whether the CUDA
    state was restored."""
    torch.set_rng_state(state["rng_cpu"])
    if cuda and "rng_cuda" in state:
        (set_cuda or torch.cuda.set_rng_state)(state["rng_cuda"], device)
        return True
    return False
