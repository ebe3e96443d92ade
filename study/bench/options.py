"""How ``study bench`` measures: its options (:class:`BenchOptions`, defaults per device); what it
measures: :mod:`study.bench.targets`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from study.bench.references import REFERENCES
from study.bench.targets import ALL_TARGETS, ATTENTION, BENCH_MODELS
from study.device.paths import DevicePaths
from study.models import ModelConfig


@dataclass(kw_only=True)
class BenchOptions:
    device: torch.device
    batch: int
    steps: int
    warmup: int = 1  # >= 1: memory is read on the warm-up steps
    repeats: int = 1
    amp_dtype: torch.dtype | None = None  # autocast dtype of the fast paths; None: float32
    compile: bool = False
    compile_backend: str = "inductor"
    #: time a compiled configuration not in study.device.paths.VERIFIED_COMPILES (refused otherwise):
    #: benchmarks/gpu_check.py, to verify it on a GPU
    unverified_compile: bool = False
    #: SGD step size of a whole model's timed steps (its references' too)
    lr: float = 0.01
    channels_last: bool = False  # convolutional models (ResNet) in NHWC
    references: tuple[str, ...] = tuple(REFERENCES)
    targets: tuple[str, ...] = ALL_TARGETS
    peak_tflops: float | None = None  # override of the peak table
    seed: int = 0
    threads: int | None = None  # torch.set_num_threads on CPU (None: torch's default)
    progress: Callable[[str], None] = lambda message: None
    #: model fields replaced in every benchmarked model (a smoke run's small models,
    #: e.g. benchmarks/gpu_check.py --device cpu); empty: the paper's sizes
    model_overrides: dict = field(default_factory=dict)

    def model_config(self, key: str) -> ModelConfig:
        """``BENCH_MODELS[key]`` with ``model_overrides`` (self-attention models only: a
        ResNet has no ``num_heads``)."""
        cfg = BENCH_MODELS[key]
        if not self.model_overrides or cfg.arch != "sa":
            return cfg
        changes = dict(self.model_overrides)
        if cfg.encoding == "learned_content" and cfg.positional_score != "head":
            changes["pos_dim"] = None  # the query form: pos_dim = hidden
        return cfg.replace(**changes)

    def paths(self) -> DevicePaths:
        """The device branches of the fast paths (the references: float32, eager)."""
        return DevicePaths(
            autocast_dtype=self.amp_dtype,
            compile=self.compile,
            compile_backend=self.compile_backend,
            channels_last=self.channels_last,
            unverified_compile=self.unverified_compile,
        )

    def target_config(self, target: str) -> ModelConfig:
        """The model configuration a target times (``attention:KEY``: the model KEY's layer)."""
        head, _, key = target.partition(":")
        return self.model_config(key if head == ATTENTION else target)


def default_options(device: str | torch.device | None = None, **overrides) -> BenchOptions:
    """Defaults per device (:meth:`DevicePaths.for_device`): CUDA batch 128, 50 steps
    after 10 warm-up, bf16 autocast, channels-last convolutions; CPU batch 8, 3 steps
    after 1 warm-up, float32, contiguous.  ``None`` overrides are ignored."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    paths = DevicePaths.for_device(dev)
    sizes = dict(batch=128, steps=50, warmup=10) if dev.type == "cuda" else dict(batch=8, steps=3, warmup=1)
    base = dict(amp_dtype=paths.autocast_dtype, channels_last=paths.channels_last, **sizes)
    return BenchOptions(device=dev, **(base | {k: v for k, v in overrides.items() if v is not None}))
