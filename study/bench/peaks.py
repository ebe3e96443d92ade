"""Peak throughput the benchmark divides by (MFU = achieved / peak): a GPU's *stated* dense
(no 2:4 sparsity) tensor-core figure from its data sheet; on CPU, which has no meaningful
data-sheet number for PyTorch's kernels, a *measured* sustained-matmul ceiling.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from study.device.paths import synchronize

#: (substring of torch.cuda.get_device_name(), must not contain) -> precision -> dense TFLOP/s
GPU_PEAKS: tuple[tuple[str, tuple[str, ...], str, dict[str, float]], ...] = (
    ("H200", (), "NVIDIA H200 (SXM)", {"bf16": 989.0, "fp16": 989.0, "tf32": 495.0, "fp32": 67.0}),
    ("H100", ("PCIe", "NVL"), "NVIDIA H100 SXM", {"bf16": 989.0, "fp16": 989.0, "tf32": 495.0, "fp32": 67.0}),
    ("H100 PCIe", (), "NVIDIA H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("A100", (), "NVIDIA A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
)


@dataclass(frozen=True)
class Peak:
    tflops: float | None  # None: unknown ("n/a")
    source: str  # where the number comes from, printed next to MFU
    #: measured CPU peak only: per second of process CPU time (docs/performance.md, "`study bench`")
    cpu_tflops: float | None = None


def stated_gpu_peak(device_name: str, precision: str) -> Peak:
    for needle, excluded, label, table in GPU_PEAKS:
        if needle in device_name and not any(e in device_name for e in excluded):
            return Peak(table[precision], f"stated: {label} {precision} dense")
    return Peak(None, f"n/a: no stated peak for {device_name!r} (use --peak-tflops)")


def timed(device: torch.device, fn: Callable[[], object], steps: int = 1) -> tuple[float, float, object]:
    """Wall and process CPU seconds of ``steps`` calls of ``fn``, synchronised on ``device``, and its
    last result."""
    synchronize(device)
    t, c = time.perf_counter(), time.process_time()
    for _ in range(steps):
        out = fn()
    synchronize(device)
    return time.perf_counter() - t, time.process_time() - c, out


def measured_matmul_peak(
    device: torch.device, dtype: torch.dtype, *, size: int = 1024, repeats: int = 10
) -> Peak:
    """Best TFLOP/s of ``repeats`` (size×size)·(size×size) matmuls on ``device``."""
    a, b = torch.randn(2, size, size, device=device, dtype=dtype)
    a @ b  # warm-up (allocations, kernel selection)
    walls, cpus, _ = zip(*(timed(device, lambda: a @ b) for _ in range(repeats)))
    flops, name = 2 * size**3, str(dtype).removeprefix("torch.")
    return Peak(
        flops / min(walls) / 1e12,
        f"measured: best {size}x{size} {name} matmul on this machine",
        cpu_tflops=flops / min(cpus) / 1e12 if min(cpus) > 0 else None,
    )


def resolve_peak(device: torch.device, amp_dtype: torch.dtype | None, override: float | None) -> Peak:
    """``override`` (from ``--peak-tflops``) if given, else the stated GPU table, else
    a measured matmul ceiling on CPU."""
    fp32 = "tf32" if device.type == "cuda" and torch.get_float32_matmul_precision() != "highest" else "fp32"
    # what the matmuls run in
    precision = {torch.bfloat16: "bf16", torch.float16: "fp16", None: fp32}[amp_dtype]
    if override is not None:
        return Peak(float(override), f"given: --peak-tflops ({precision})")
    if device.type == "cuda":
        return stated_gpu_peak(torch.cuda.get_device_name(device), precision)
    if device.type == "cpu":
        return measured_matmul_peak(device, amp_dtype or torch.float32)
    return Peak(None, f"n/a: no peak known for device type {device.type!r}")
