"""Timing of benchmark variants: warm-up (memory read there), interleaved timed
windows, and each variant's record (images/s, TFLOP/s, MFU, memory)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from study.bench.memory import MemoryProbe
from study.bench.options import BenchOptions, progress
from study.bench.peaks import Peak
from study.devicepaths import synchronize


def count_forward_flops(fn: Callable[[], object], batch: int) -> int:
    """FLOPs of ``fn()`` (one forward, no grad) divided by ``batch``."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        fn()
    return counter.get_total_flops() // batch


@dataclass
class Variant:
    """One timed setting: ``step()`` runs a training step and returns a tensor to
    check for finiteness after timing."""

    name: str
    path: str
    step: Callable[[], Tensor]
    forward_flops: int
    precision: str


def measure(variants: list[Variant], opts: BenchOptions) -> dict[str, dict]:
    """Warm up each variant (reading its memory), then time ``repeats`` windows of
    ``steps`` steps per variant, interleaved across variants."""
    dev = opts.device
    warm, memory, last = {}, {}, {}
    for v in variants:
        progress(opts, f"warm-up {v.name} ({v.path})")
        with MemoryProbe(dev) as mem:
            t = time.perf_counter()
            for _ in range(max(opts.warmup, 1)):
                last[v.name] = v.step()
            synchronize(dev)
        warm[v.name], memory[v.name] = time.perf_counter() - t, mem
    windows: dict[str, list[float]] = {v.name: [] for v in variants}
    cpu: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(opts.repeats):
        for v in variants:
            synchronize(dev)
            t, c = time.perf_counter(), time.process_time()
            for _ in range(opts.steps):
                last[v.name] = v.step()
            synchronize(dev)
            windows[v.name].append(time.perf_counter() - t)
            cpu[v.name].append(time.process_time() - c)
    records = {}
    for v in variants:
        if not bool(torch.isfinite(last[v.name]).all()):
            raise RuntimeError(f"non-finite values while timing {v.name} ({v.path})")
        records[v.name] = _record(v, windows[v.name], cpu[v.name], warm[v.name], memory[v.name], opts)
    return records


def _record(v: Variant, windows: list[float], cpu: list[float], warmup_s: float, mem: MemoryProbe,
            opts: BenchOptions) -> dict:
    seconds = statistics.median(windows)
    images_per_s = opts.batch * opts.steps / seconds
    train_flops = 3 * v.forward_flops
    tflops = train_flops * images_per_s / 1e12
    cpu_s = statistics.median(cpu) / opts.steps
    return {
        "path": v.path,
        "precision": v.precision,
        "images_per_s": images_per_s,
        "images_per_s_best": opts.batch * opts.steps / min(windows),
        "step_ms": 1e3 * seconds / opts.steps,
        "windows_s": windows,
        # process CPU seconds per step (all threads): on a CPU shared with other jobs
        # this, unlike wall time, does not grow with their load; it is what a quiet
        # machine's step would take times the threads kept busy
        "cpu_s_per_step": cpu_s,
        "warmup_s": warmup_s,
        "forward_flops": v.forward_flops,
        "train_flops": train_flops,
        "tflops": tflops,
        "mfu": _mfu(opts.peak, tflops, train_flops * opts.batch, cpu_s),
        "peak_memory_mb": mem.peak_mb,
        "step_memory_mb": mem.step_mb,
    }


def _ratio(a: dict | None, b: dict | None, key: str = "images_per_s") -> float | None:
    if not a or not b:
        return None
    return a[key] / b[key]


def _mfu(peak: Peak | None, tflops: float, flops_per_step: float, cpu_s_per_step: float) -> float | None:
    """Achieved / peak; against a measured CPU peak both sides are taken per second
    of process CPU time, so that a busy machine does not distort the ratio."""
    if peak is None or not peak.tflops:
        return None
    if peak.cpu_tflops and cpu_s_per_step > 0:
        return flops_per_step / cpu_s_per_step / 1e12 / peak.cpu_tflops
    return tflops / peak.tflops


def _cpu_ratio(a: dict | None, b: dict | None) -> float | None:
    """Naive CPU seconds per step over fast ones (> 1: fast uses less CPU time)."""
    if not a or not b or not a["cpu_s_per_step"] or not b["cpu_s_per_step"]:
        return None
    return b["cpu_s_per_step"] / a["cpu_s_per_step"]


def precision_name(dtype: torch.dtype | None) -> str:
    return "float32" if dtype is None else str(dtype).removeprefix("torch.") + " autocast"


