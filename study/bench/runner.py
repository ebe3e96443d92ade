"""``study bench`` (docs/performance.md, "`study bench`").

The references always run eager in float32, so ``speedup_vs_naive`` includes the precision.
FLOPs are counted on each record's own path: the factorised path does fewer FLOPs than the
dense one for the same result, so compare paths by images/s.
"""

from __future__ import annotations

import contextlib
import platform
from dataclasses import replace

import torch

from study.bench.layer_bench import bench_attention
from study.bench.model_bench import bench_model
from study.bench.options import BenchOptions, default_options
from study.bench.peaks import Peak, resolve_peak
from study.bench.targets import ALL_TARGETS, ATTENTION, ATTENTION_VARIANTS, is_target
from study.bench.timing import NonFiniteValues
from study.device.paths import compile_model

__all__ = ["ALL_TARGETS", "default_options", "device_name", "is_target", "run_bench"]


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    return f"{cpu}, {torch.get_num_threads()} threads"


def run_bench(opts: BenchOptions) -> dict:
    """Benchmark ``opts.targets`` (checked by the caller): a JSON-serialisable report
    (``study bench --help``).
    A compiled configuration not in ``VERIFIED_COMPILES`` is refused first (``UnverifiedCompile``) unless
    ``opts.unverified_compile``; a run whose steps give non-finite values is one line of ``non_finite``."""
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    targets = [t for given in opts.targets for t in _expand(given)]
    for target in targets:  # every target's compiled configuration verified, before any is timed
        opts.paths().check_compile(
            opts.device,
            model=compile_model(opts.target_config(target)),
            flag="--compile",
            instead="use --compile-backend aot_eager, or leave out --compile",
        )
    peak = resolve_peak(opts.device, opts.amp_dtype, opts.peak_tflops)
    models, attention, non_finite = [], [], []
    for target in targets:
        try:
            if target.startswith(f"{ATTENTION}:"):
                attention.append(bench_attention(target.partition(":")[2], opts))
            else:
                models.append(bench_model(target, opts))
        except NonFiniteValues as e:  # one line per run in the report; the other targets go on
            non_finite += e.lines
            opts.progress(f"{e}")
    if peak.source.startswith("measured"):
        # a measured ceiling is only as good as the quietest moment it saw: measure
        # again at the end and keep the larger, so MFU is not inflated by a busy start
        again = resolve_peak(opts.device, opts.amp_dtype, None)
        peak = replace(
            peak,
            tflops=max(peak.tflops, again.tflops),
            source=peak.source + " (best of start and end of the run; MFU per CPU-second)",
            cpu_tflops=max(peak.cpu_tflops or 0.0, again.cpu_tflops or 0.0) or None,
        )
    for row in models + attention:
        for rec in (v for v in row.values() if isinstance(v, dict)):  # the runs' records
            rec["mfu"] = mfu(peak, rec["tflops"], rec["train_flops"] * opts.batch, rec["cpu_s_per_step"])
    return {
        "device": str(opts.device),
        "device_name": device_name(opts.device),
        "torch": torch.__version__,
        "precision": opts.paths().precision_name(),
        "compile": opts.compile,
        "compile_backend": opts.compile_backend if opts.compile else None,
        "channels_last": opts.channels_last,
        "model_overrides": dict(opts.model_overrides),
        "batch": opts.batch,
        "steps": opts.steps,
        "warmup": opts.warmup,
        "repeats": opts.repeats,
        "peak_tflops": peak.tflops,
        "peak_source": peak.source,
        "peak_cpu_tflops": peak.cpu_tflops,
        "models": models,
        "attention": attention,
        "non_finite": non_finite,
    }


def _expand(target: str) -> tuple[str, ...]:
    """``attention`` is every SA model's layer (``attention:KEY``); other targets are themselves."""
    return tuple(f"{ATTENTION}:{k}" for k in ATTENTION_VARIANTS) if target == ATTENTION else (target,)


def mfu(peak: Peak, tflops: float, flops_per_step: float, cpu_s_per_step: float) -> float | None:
    """Achieved / peak; against a measured CPU peak both per second of process CPU time."""
    if not peak.tflops:
        return None
    if peak.cpu_tflops and cpu_s_per_step > 0:
        return flops_per_step / cpu_s_per_step / 1e12 / peak.cpu_tflops
    return tflops / peak.tflops
