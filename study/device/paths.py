"""Which device-dependent code paths a run takes (bf16 ``autocast``, ``torch.compile``,
channels-last, pinned transfers, the CUDA RNG in checkpoints), chosen in one place so
that each can be selected on any device and tested on CPU against its reference path
(docs/performance.md, "Device-dependent code paths").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from study.device.compilers import COMPILE_BACKENDS
from study.errors import UsageError

#: ``torch.compile`` configurations known to train right, (device type, backend, model) → the
#: evidence; model: an encoding (``ModelConfig.encoding``), ``resnet18``, or ``*`` for every model.
#: Anything else is refused (:func:`compile_refusal`).  A GPU session adds a CUDA entry after
#: ``benchmarks/gpu_check.py`` has run the unverified configuration (``unverified_compile=True``)
#: against eager and recorded device, backend and encoding (docs/performance.md).
VERIFIED_COMPILES: dict[tuple[str, str, str], str] = {
    ("cpu", "inductor", "*"): "STUDY_COMPILE_BACKEND=inductor pytest "
    "tests/study/models/test_compiled_equals_eager.py: loss and gradients at the "
    "paper's width equal eager's, every encoding",
    ("cpu", "aot_eager", "*"): "tests/study/models/test_compiled_equals_eager.py (its default backend), "
    "every encoding",
    ("cpu", "eager", "*"): "Dynamo's graphs run by eager's kernels: no generated code",
    # no generated code: eager's CUDA kernels on the Dynamo / AOT Autograd graphs the CPU tests check;
    # finite at the paper's size on the GPU of issue 43 (study bench, bf16, SA quadratic)
    ("cuda", "aot_eager", "*"): "eager's CUDA kernels on the graphs the CPU tests check (issue 43: finite)",
    ("cuda", "eager", "*"): "Dynamo's graphs run by eager's kernels: no generated code",
}


def compile_model(cfg: Any) -> str:
    """The model key of :data:`VERIFIED_COMPILES` for a ``ModelConfig``: its encoding, or its arch."""
    return cfg.encoding if cfg.arch == "sa" else cfg.arch


def compile_refusal(
    *,
    device_type: str,
    backend: str,
    model: str,
    instead: str,
    verified: dict[tuple[str, str, str], str] = VERIFIED_COMPILES,
) -> str | None:
    """None when ``torch.compile(backend=backend)`` of ``model`` on ``device_type`` is in ``verified``
    (:data:`VERIFIED_COMPILES`), else one line saying so, what to use ``instead``, and how a GPU
    session verifies it (CUDA + inductor trained SA quadratic to NaN at the paper's size, issue 43)."""
    if (device_type, backend, model) in verified or (device_type, backend, "*") in verified:
        return None
    return (
        f"torch.compile with {backend} on {device_type} is not verified for {model} (it trained SA "
        f"quadratic to NaN on CUDA); {instead}; benchmarks/gpu_check.py verifies it on a GPU and records "
        f"device, backend and encoding for study.device.paths.VERIFIED_COMPILES"
    )


class UnverifiedCompile(UsageError):
    """A ``torch.compile`` configuration not in :data:`VERIFIED_COMPILES`: refused before training."""


@dataclass(frozen=True, kw_only=True)
class DevicePaths:
    """The device-dependent branches a run takes (module doc)."""

    autocast_dtype: torch.dtype | None = None  # None: float32, no autocast
    compile: bool = False
    compile_backend: str = "inductor"
    channels_last: bool = False
    pinned_transfer: bool = False
    cuda_rng: bool = False
    #: run a compiled configuration not in VERIFIED_COMPILES (benchmarks/gpu_check.py, to verify it)
    unverified_compile: bool = False

    def __post_init__(self) -> None:
        if self.compile_backend not in COMPILE_BACKENDS:
            raise ValueError(
                f"compile_backend must be one of {', '.join(COMPILE_BACKENDS)}, got {self.compile_backend!r}"
            )
        if self.autocast_dtype not in (None, torch.bfloat16, torch.float16):
            raise ValueError(
                f"autocast_dtype must be None, torch.bfloat16 or torch.float16, got {self.autocast_dtype!r}"
            )

    @classmethod
    def for_device(
        cls, device: torch.device | str, *, amp: bool = True, compile: bool = False, **overrides: Any
    ) -> DevicePaths:
        """On CUDA every branch (bf16 if ``amp``); on CPU none (CPU bf16 is slower on most CPUs)."""
        cuda = torch.device(device).type == "cuda"
        branches = dict(channels_last=cuda, pinned_transfer=cuda, cuda_rng=cuda)
        dtype = torch.bfloat16 if (amp and cuda) else None
        return cls(**{"autocast_dtype": dtype, "compile": compile, **branches, **overrides})

    def autocast(self, device: torch.device | str) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(torch.device(device).type, dtype=self.autocast_dtype)

    def autocast_factory(self, device: torch.device | str) -> Callable[[], contextlib.AbstractContextManager]:
        return lambda: self.autocast(device)

    def check_compile(self, device: torch.device | str, *, model: str, flag: str, instead: str) -> None:
        """Raise :class:`UnverifiedCompile`, ``flag: why`` (:func:`compile_refusal`), when ``compile`` is
        selected for a configuration not in :data:`VERIFIED_COMPILES`, unless ``unverified_compile``."""
        if not self.compile or self.unverified_compile:
            return
        why = compile_refusal(
            device_type=torch.device(device).type, backend=self.compile_backend, model=model, instead=instead
        )
        if why is not None:
            raise UnverifiedCompile(f"{flag}: {why}")

    def compiled(self, module: nn.Module | Callable) -> nn.Module | Callable:
        """``torch.compile(module)`` when selected (checked first by the caller: :meth:`check_compile`),
        from an empty Dynamo cache (``torch.compiler.reset``): Dynamo keeps each code object's compiled
        variants for the whole process and, past ``recompile_limit`` (8) of them, runs that code eagerly
        with one warning, so the ninth model compiled in one process (a reused Ray actor's trials, the
        bench's variants, a test run) would train uncompiled.  Earlier compiled modules stay usable:
        they compile again on their next call."""
        if not self.compile:
            return module
        torch.compiler.reset()
        return torch.compile(module, backend=self.compile_backend)

    def memory_format(self, model: nn.Module, x: torch.Tensor):
        """``(model, x)``, in channels-last if selected."""
        if not self.channels_last:
            return model, x
        return model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)

    def precision_name(self) -> str:
        if self.autocast_dtype is None:
            return "float32"
        return f"{str(self.autocast_dtype).removeprefix('torch.')} autocast"


def to_device(t: torch.Tensor, device: torch.device, *, pinned: bool) -> torch.Tensor:
    """``pinned``: through page-locked memory, without blocking the host."""
    return t.pin_memory().to(device, non_blocking=True) if pinned else t.to(device)


def ddp_device_ids(device: torch.device) -> list[int] | None:
    """DDP's ``device_ids``: this rank's CUDA device; ``None`` on CPU (DDP refuses them there)."""
    return [device.index or 0] if device.type == "cuda" else None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def select_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.set_device(device)


def capture_rng(
    device: torch.device, *, cuda: bool, get_cuda: Callable[[torch.device], torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """The RNG states a checkpoint carries: ``rng_cpu``, and ``rng_cuda`` when ``cuda``."""
    state = {"rng_cpu": torch.get_rng_state()}
    if cuda:
        state["rng_cuda"] = (get_cuda or torch.cuda.get_rng_state)(device)
    return state


def restore_rng(
    state: dict[str, Any],
    device: torch.device,
    *,
    cuda: bool,
    set_cuda: Callable[[torch.Tensor, torch.device], None] | None = None,
) -> bool:
    """Restore the states :func:`capture_rng` saved (a CUDA state resumed on CPU is left
    alone); whether the CUDA state was restored."""
    torch.set_rng_state(state["rng_cpu"])
    if cuda and "rng_cuda" in state:
        (set_cuda or torch.cuda.set_rng_state)(state["rng_cuda"], device)
        return True
    return False
