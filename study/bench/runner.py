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
from study.bench.options import ALL_TARGETS, ATTENTION, ATTENTION_VARIANTS, BenchOptions, default_options, is_target
from study.bench.peaks import resolve_peak
from study.bench.timing import mfu

__all__ = ["ALL_TARGETS", "default_options", "device_name", "is_target", "run_bench"]


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    return f"{cpu}, {torch.get_num_threads()} threads"


def run_bench(opts: BenchOptions) -> dict:
    """Benchmark ``opts.targets`` (checked by the caller): a JSON-serialisable report (``study bench --help``)."""
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    opts.peak = resolve_peak(opts.device, opts.amp_dtype, opts.peak_tflops)
    report = {
        "device": str(opts.device), "device_name": device_name(opts.device), "torch": torch.__version__,
        "precision": opts.paths().precision_name(), "compile": opts.compile,
        "compile_backend": opts.compile_backend if opts.compile else None, "channels_last": opts.channels_last,
        "model_overrides": dict(opts.model_overrides), "batch": opts.batch, "steps": opts.steps,
        "warmup": opts.warmup, "repeats": opts.repeats, "peak_tflops": opts.peak.tflops,
        "peak_source": opts.peak.source, "peak_cpu_tflops": opts.peak.cpu_tflops, "models": [], "attention": [],
    }
    for target in opts.targets:
        if target == ATTENTION or target.startswith(ATTENTION + ":"):
            keys = ATTENTION_VARIANTS if target == ATTENTION else (target.split(":", 1)[1],)
            report["attention"] += [bench_attention(key, opts) for key in keys]
        else:
            report["models"].append(bench_model(target, opts))
    if opts.peak.source.startswith("measured"):
        # a measured ceiling is only as good as the quietest moment it saw: measure
        # again at the end and keep the larger, so MFU is not inflated by a busy start
        again = resolve_peak(opts.device, opts.amp_dtype, None)
        opts.peak = replace(
            opts.peak, tflops=max(opts.peak.tflops, again.tflops),
            source=opts.peak.source + " (best of start and end of the run; MFU per CPU-second)",
            cpu_tflops=max(opts.peak.cpu_tflops or 0.0, again.cpu_tflops or 0.0) or None)
        report.update(peak_tflops=opts.peak.tflops, peak_cpu_tflops=opts.peak.cpu_tflops,
                      peak_source=opts.peak.source)
        for row in report["models"] + report["attention"]:
            for rec in (v for v in row.values() if isinstance(v, dict)):  # the runs' records
                rec["mfu"] = mfu(opts.peak, rec["tflops"], rec["train_flops"] * opts.batch, rec["cpu_s_per_step"])
    return report
