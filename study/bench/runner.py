"""``study bench``: steady-state training throughput of the paper's models and of
one attention layer, next to a naive reference of the same equations.

What is timed (DESIGN §11): one training step = forward + backward + SGD step on a
batch resident on the device (no data loading).  Each variant first runs
``warmup`` untimed steps (compilation, allocator, kernel selection; peak memory is
read here), then ``repeats`` windows of ``steps`` steps, each window between two
``torch.cuda.synchronize`` on GPU, with no host synchronisation inside it.
``images_per_s`` is from the median window.  The attention-layer variants share a
layer, so their windows are interleaved (fast, train, ..., naive, fast, ...) and a
change of machine load hits all of them alike; whole models run one after another
so that each one's memory is its own.

Fast paths run under autocast (bf16 on CUDA by default) and optionally
``torch.compile``; the naive reference (:mod:`study.bench.naive`: dense per-image
(B, N_h, T, T) scores, generic einsum) always runs eager in float32, so
``speedup_vs_naive`` includes the precision.

FLOPs are counted by ``torch.utils.flop_counter`` (matmuls, einsums, convolutions,
fused attention; element-wise ops and softmax are not counted):
``forward_flops`` of a model is :func:`study.flops.forward_flops` (eval path, the
number ``study models`` prints); each timed record has the forward FLOPs per image
of *its* path and ``train_flops`` = 3 × that (backward ≈ 2 × forward), so achieved
TFLOP/s and MFU describe the work each path really does.  The factorised path does
fewer FLOPs than the dense one for the same result: compare paths by images/s.
"""

from __future__ import annotations

import ctypes
import gc
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from study.bench.peaks import Peak, resolve_peak
from study.bench.references import NAIVE_PATH, REFERENCES, reference_model
from study.models import PAPER_MODELS, ModelConfig, build_model, model_name
from study.models.attention import RelativeSelfAttention

ATTENTION = "attention"  # pseudo-model: the attention layer alone, every encoding
#: bench-only configurations beside the paper's: learned + content with head keys
#: (``positional_score: head``, the original's first version)
BENCH_MODELS: dict[str, ModelConfig] = {
    **PAPER_MODELS,
    "sa_learned_content_head": ModelConfig(encoding="learned_content", pos_dim=400, positional_score="head"),
}
ATTENTION_VARIANTS = ("sa_quadratic", "sa_quadratic_noniso", "sa_learned", "sa_learned_content",
                      "sa_learned_content_head")
ALL_TARGETS = (*PAPER_MODELS, ATTENTION)
REFERENCE_NAMES = tuple(REFERENCES)  # ("naive", "einsum")


def is_target(name: str) -> bool:
    """A key of PAPER_MODELS (or ``sa_learned_content_head``), ``attention`` (the
    layer, every encoding) or ``attention:KEY`` (the layer of one SA model)."""
    if name in ALL_TARGETS or name in BENCH_MODELS:
        return True
    head, _, key = name.partition(":")
    return head == ATTENTION and key in ATTENTION_VARIANTS


@dataclass
class BenchOptions:
    device: torch.device
    batch: int
    steps: int
    warmup: int = 1  # >= 1: memory is read on the warm-up steps
    repeats: int = 1
    amp_dtype: torch.dtype | None = None  # autocast dtype of the fast paths; None: float32
    compile: bool = False
    references: tuple[str, ...] = REFERENCE_NAMES  # of study.bench.references.REFERENCES
    targets: tuple[str, ...] = ALL_TARGETS
    peak_tflops: float | None = None  # override of the peak table
    seed: int = 0
    threads: int | None = None  # torch.set_num_threads on CPU (None: torch's default)
    progress: Callable[[str], None] | None = None
    peak: Peak | None = field(default=None, init=False)


def default_options(device: str | torch.device | None = None, **overrides) -> BenchOptions:
    """Defaults per device: CUDA batch 128, 50 steps after 10 warm-up, bf16 autocast;
    CPU batch 8, 3 steps after 1 warm-up, float32.  ``None`` overrides are ignored."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        base = dict(batch=128, steps=50, warmup=10, amp_dtype=torch.bfloat16)
    else:
        base = dict(batch=8, steps=3, warmup=1, amp_dtype=None)
    base.update({k: v for k, v in overrides.items() if v is not None})
    return BenchOptions(device=dev, **base)


# --------------------------------------------------------------------- utilities
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class MemoryProbe:
    """Memory of the steps run inside.

    ``peak_mb``: ``torch.cuda.max_memory_allocated`` (absolute: parameters,
    gradients, optimizer state, activations; ``None`` on CPU).  ``step_mb``: the
    peak minus what was allocated at entry; on CPU the rise of the process's peak
    RSS over its RSS at entry (Linux ``/proc/self``, after returning freed heap to
    the OS; approximate), ``None`` where that cannot be read."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak_mb: float | None = None
        self.step_mb: float | None = None

    def __enter__(self):
        gc.collect()
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            _malloc_trim()
            self._rss0 = _proc_status_kb("VmRSS")
            self._reset_ok = _reset_peak_rss()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
            self.peak_mb, self.step_mb = peak / 2**20, (peak - self._base) / 2**20
        else:
            hwm = _proc_status_kb("VmHWM")
            if self._reset_ok and hwm is not None and self._rss0 is not None:
                self.step_mb = max(hwm - self._rss0, 0) / 1024
        return False


def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        with open(f"/proc/{os.getpid()}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _malloc_trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


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
        _progress(opts, f"warm-up {v.name} ({v.path})")
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


def _precision_name(dtype: torch.dtype | None) -> str:
    return "float32" if dtype is None else str(dtype).removeprefix("torch.") + " autocast"


def _autocast(device: torch.device, amp_dtype: torch.dtype | None):
    return torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None)


def attention_path(layer: RelativeSelfAttention) -> str:
    """Which exact path ``layer.forward`` takes in its current mode."""
    p = layer.attention_dropout.p if layer.training else 0.0
    if layer.content:
        device = next(layer.parameters()).device
        kind = "SDPA + positional bias" if layer.uses_fused_content(device) else "explicit (B,N_h,T,T) content"
        return kind + (f", dropout {p:g}" if p else "")
    if layer.uses_factorised_path():
        return "factorised P_row⊗P_col"
    return "shared dense (N_h,T,T)" + (f" + one dropout mask {p:g}" if p else "")


# ------------------------------------------------------------------------ models
def _model_variant(name: str, model: nn.Module, opts: BenchOptions, *, amp_dtype, compile: bool,
                   path: str, channels_last: bool = False) -> Variant:
    dev = opts.device
    gen = torch.Generator(device="cpu").manual_seed(opts.seed)
    images = torch.randn(opts.batch, 3, 32, 32, generator=gen).to(dev)
    labels = torch.randint(0, 10, (opts.batch,), generator=gen).to(dev)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)
    model.train()  # the paper's training mode: dropout 0.1 (attention probabilities too)
    fwd_flops = count_forward_flops(lambda: model(images), opts.batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run = torch.compile(model) if compile else model

    def step() -> Tensor:
        with _autocast(dev, amp_dtype):
            loss = F.cross_entropy(run(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return Variant(name, path, step, fwd_flops, _precision_name(amp_dtype))


def bench_model(key: str, opts: BenchOptions) -> dict:
    """Training throughput of ``BENCH_MODELS[key]`` (fast paths) and of its references
    (attention layers replaced by the naive and/or the einsum formulation, per
    ``opts.references``): each warmed up alone (so that its memory is its own), then
    their timed windows interleaved, so a change of machine load hits all alike."""
    torch.manual_seed(opts.seed)
    model = build_model(BENCH_MODELS[key]).to(opts.device)
    out = _model_header(key, model, opts)
    fast = _fast_model_variant(key, model, opts)
    refs = {name: _reference_model_variant(key, model, name, opts) for name in REFERENCE_NAMES}
    _progress(opts, f"{key}")
    records = measure([fast, *(v for v in refs.values() if v is not None)], opts)
    out["fast"] = records[fast.name]
    for name, variant in refs.items():
        out[name] = records[variant.name] if variant is not None else None
    del model
    return {**out, **_model_ratios(out)}


def _model_header(key: str, model: nn.Module, opts: BenchOptions) -> dict:
    from study.flops import count_parameters, forward_flops

    return {"key": key, "name": model_name(BENCH_MODELS[key]), "n_params": count_parameters(model),
            "forward_flops": forward_flops(model), "batch": opts.batch, "steps": opts.steps}


def _fast_model_variant(key: str, model: nn.Module, opts: BenchOptions) -> Variant:
    attention = hasattr(model, "blocks")
    if attention:
        model.train()
        path = attention_path(model.blocks[0].attention)
    else:
        path = "convolutions" + (", channels_last" if opts.device.type == "cuda" else "")
    return _model_variant(f"{key} fast", model, opts, amp_dtype=opts.amp_dtype, compile=opts.compile,
                          path=path, channels_last=opts.device.type == "cuda" and not attention)


def _reference_model_variant(key: str, model: nn.Module, name: str, opts: BenchOptions) -> Variant | None:
    """The model with reference ``name`` in every attention layer (float32, eager);
    ``None`` without attention (ResNet18) or when ``name`` is not in ``opts.references``."""
    ref = reference_model(model, name) if name in opts.references else None
    if ref is None:
        return None
    return _model_variant(f"{key} {name}", ref, opts, amp_dtype=None, compile=False, path=REFERENCES[name][2])


def _model_ratios(out: dict) -> dict:
    ratios = {
        "speedup_vs_naive": _ratio(out["fast"], out["naive"]),
        "speedup_vs_naive_best": _ratio(out["fast"], out["naive"], "images_per_s_best"),
        "speedup_vs_naive_cpu_time": _cpu_ratio(out["fast"], out["naive"]),
    }
    ratios["speedup_vs_einsum"] = _ratio(out["fast"], out["einsum"])
    ratios["speedup_vs_einsum_cpu_time"] = _cpu_ratio(out["fast"], out["einsum"])
    return ratios


# ----------------------------------------------------------------- attention layer
def paper_attention_layer(key: str) -> RelativeSelfAttention:
    """One attention layer of ``BENCH_MODELS[key]`` at paper dims (D 400, N_h 9, 16×16)."""
    from study.models.sa_net import positional_scores

    cfg = BENCH_MODELS[key]
    return RelativeSelfAttention(
        dim=cfg.hidden, num_heads=cfg.num_heads, positional=positional_scores(cfg),
        content=cfg.encoding == "learned_content", attention_dropout=cfg.attention_dropout,
    )


def _layer_variant(name: str, layer: RelativeSelfAttention, fn: Callable[[Tensor], Tensor],
                   opts: BenchOptions, *, training: bool, fast: bool, path: str) -> Variant:
    dev = opts.device
    amp_dtype = opts.amp_dtype if fast else None
    grid = BENCH_MODELS["sa_quadratic"].grid
    gen = torch.Generator(device="cpu").manual_seed(opts.seed)
    x = torch.randn(opts.batch, grid, grid, layer.dim, generator=gen).to(dev).requires_grad_()
    layer.train(training)
    with torch.no_grad():
        # the gradient of a mean-like loss: small enough that the variants' SGD steps
        # on the shared layer never push its scores out of range
        y0 = fn(x).float()
        grad_out = torch.randn_like(y0) / y0.numel() ** 0.5
    fwd_flops = count_forward_flops(lambda: fn(x), opts.batch)
    opt = torch.optim.SGD(layer.parameters(), lr=1e-3, momentum=0.9)
    run = torch.compile(fn) if (opts.compile and fast) else fn

    def step() -> Tensor:
        layer.train(training)
        with _autocast(dev, amp_dtype):
            y = run(x)
        y.backward(grad_out.to(y.dtype))
        opt.step()
        opt.zero_grad(set_to_none=True)
        x.grad = None
        return y.detach()

    return Variant(name, path, step, fwd_flops, _precision_name(amp_dtype))


LAYER_RUNS = ("fast", "train", "core_fast", "naive", "core_naive", "einsum", "core_einsum")


def bench_attention(key: str, opts: BenchOptions) -> dict:
    """One layer of ``key`` at paper dims; a step is forward + backward (the input
    requires grad, as inside the network) + SGD on the layer.  Runs (interleaved):

    * ``fast``: eval mode, no probability dropout: the factorised path for separable
      encodings, the explicit content path on CPU (SDPA on CUDA), the shared dense
      matrix otherwise;
    * ``train``: the paper's training setting, dropout 0.1 on the probabilities;
    * ``naive``: :func:`~study.bench.naive.naive_relative_attention`, float32, eval;
    * ``einsum``: :func:`~study.bench.einsum_ref.einsum_relative_attention` in
      training mode (dropout 0.1, as ``train``), float32: compare with ``train``;
    * ``core_*``: the heads before ``out_proj`` only, which shows how much of the
      layer the (N_h·D → D) projection takes."""
    torch.manual_seed(opts.seed)
    layer = paper_attention_layer(key).to(opts.device)
    out = {"key": key, "name": model_name(BENCH_MODELS[key]), "batch": opts.batch, "steps": opts.steps}
    _progress(opts, f"attention layer {key}")
    records = measure(_fast_layer_variants(layer, opts) + _reference_layer_variants(layer, opts), opts)
    out.update({name: records.get(name) for name in LAYER_RUNS})
    return {**out, **_layer_ratios(out)}


def _fast_layer_variants(layer: RelativeSelfAttention, opts: BenchOptions) -> list[Variant]:
    layer.eval()
    fast_path = attention_path(layer)
    layer.train()
    train_path = attention_path(layer)
    return [
        _layer_variant("fast", layer, layer, opts, training=False, fast=True, path=fast_path),
        _layer_variant("train", layer, layer, opts, training=True, fast=True, path=train_path),
        _layer_variant("core_fast", layer, lambda x: layer.head_outputs(x)[0], opts, training=False,
                       fast=True, path="core: " + fast_path),
    ]


def _reference_layer_variants(layer: RelativeSelfAttention, opts: BenchOptions) -> list[Variant]:
    """naive (eval: it has no dropout) and einsum (training mode, with dropout)."""
    variants = []
    for name, (fn, heads_fn, path, dropout) in REFERENCES.items():
        if name not in opts.references:
            continue
        variants += [
            _layer_variant(name, layer, lambda x, fn=fn: fn(layer, x), opts, training=dropout, fast=False,
                           path=path),
            _layer_variant(f"core_{name}", layer, lambda x, fn=heads_fn: fn(layer, x), opts, training=dropout,
                           fast=False, path=f"core: {name}"),
        ]
    return variants


def _layer_ratios(out: dict) -> dict:
    return {
        "speedup_vs_naive": _ratio(out["fast"], out["naive"]),
        "train_speedup_vs_naive": _ratio(out["train"], out["naive"]),
        "core_speedup_vs_naive": _ratio(out["core_fast"], out["core_naive"]),
        "train_speedup_vs_naive_cpu_time": _cpu_ratio(out["train"], out["naive"]),
        "core_speedup_vs_naive_cpu_time": _cpu_ratio(out["core_fast"], out["core_naive"]),
        "speedup_vs_naive_best": _ratio(out["fast"], out["naive"], "images_per_s_best"),
        "speedup_vs_naive_cpu_time": _cpu_ratio(out["fast"], out["naive"]),
        # the project's training path against the einsum formulation, both with dropout
        "train_speedup_vs_einsum": _ratio(out["train"], out["einsum"]),
        "train_speedup_vs_einsum_cpu_time": _cpu_ratio(out["train"], out["einsum"]),
    }


# -------------------------------------------------------------------------- driver
def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {torch.get_num_threads()} threads"


def run_bench(opts: BenchOptions) -> dict:
    """Benchmark ``opts.targets`` (keys of PAPER_MODELS and/or ``"attention"``) and
    return a JSON-serialisable report (see ``study bench --help``)."""
    unknown = [t for t in opts.targets if not is_target(t)]
    if unknown:
        raise ValueError(f"unknown bench target {unknown[0]!r}; choose from {', '.join(ALL_TARGETS)} "
                         f"or attention:KEY with KEY in {', '.join(ATTENTION_VARIANTS)}")
    for name in ("batch", "steps", "warmup", "repeats"):
        if getattr(opts, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(opts, name)}")
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    opts.peak = resolve_peak(opts.device, opts.amp_dtype, opts.peak_tflops)
    report = {
        "device": str(opts.device),
        "device_name": device_name(opts.device),
        "torch": torch.__version__,
        "precision": _precision_name(opts.amp_dtype),
        "compile": opts.compile,
        "batch": opts.batch,
        "steps": opts.steps,
        "warmup": opts.warmup,
        "repeats": opts.repeats,
        "peak_tflops": opts.peak.tflops,
        "peak_source": opts.peak.source,
        "peak_cpu_tflops": opts.peak.cpu_tflops,
        "models": [],
        "attention": [],
    }
    for target in opts.targets:
        if target == ATTENTION or target.startswith(ATTENTION + ":"):
            keys = ATTENTION_VARIANTS if target == ATTENTION else (target.split(":", 1)[1],)
            for key in keys:
                report["attention"].append(bench_attention(key, opts))
        else:
            report["models"].append(bench_model(target, opts))
    if opts.peak.source.startswith("measured"):
        # a measured ceiling is only as good as the quietest moment it saw: measure
        # again at the end and keep the larger, so MFU is not inflated by a busy start
        again = resolve_peak(opts.device, opts.amp_dtype, None)
        opts.peak = Peak(
            max(opts.peak.tflops, again.tflops),
            opts.peak.source + " (best of start and end of the run; MFU per CPU-second)",
            cpu_tflops=max(opts.peak.cpu_tflops or 0.0, again.cpu_tflops or 0.0) or None,
        )
        report["peak_tflops"] = opts.peak.tflops
        report["peak_cpu_tflops"] = opts.peak.cpu_tflops
        report["peak_source"] = opts.peak.source
        for rec in _records(report):
            rec["mfu"] = _mfu(opts.peak, rec["tflops"], rec["train_flops"] * opts.batch, rec["cpu_s_per_step"])
    return report


def _records(report: dict):
    for m in report["models"]:
        yield from (r for r in (m["fast"], *(m.get(n) for n in REFERENCE_NAMES)) if r)
    for a in report["attention"]:
        yield from (a[k] for k in LAYER_RUNS if a.get(k))


def _progress(opts: BenchOptions, message: str) -> None:
    if opts.progress:
        opts.progress(message)
