"""Timing of benchmark variants: warm-up (memory read there), interleaved timed
windows, and each variant's record (images/s, TFLOP/s, memory; MFU: the runner).

Not ``torch.utils.benchmark.Timer``: the variants' windows interleave, each window also
reads process CPU time (MFU on a shared CPU: runner.mfu), and Timer pins torch to one thread."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from study.bench.memory import memory_probe
from study.bench.options import BenchOptions
from study.bench.peaks import timed
from study.cost.flops import count_flops
from study.device.paths import DevicePaths


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One timed configuration: ``step()`` runs one training step and returns its ``value``
    (the loss, or a layer's output) to check for finiteness; ``mode``: precision and compilation."""

    name: str
    path: str
    step: Callable[[], Tensor]
    forward_flops: int
    precision: str
    value: str = "loss"
    mode: str = ""


class NonFiniteValues(RuntimeError):
    """Variants whose steps gave non-finite values, one line each (``KEY RUN: non-finite loss at step N
    (MODE)``): ``study bench`` reports them and goes on with its other targets.  The lines are the
    exception's args: a copy (pickle, Ray) rebuilds the same error."""

    @property
    def lines(self) -> list[str]:
        return list(self.args)

    def __str__(self) -> str:
        return "; ".join(self.args)


class _FirstNonFinite:
    """``step`` counting its calls, and the first call (from 1) whose value was not finite, kept on the
    device (a few scalar kernels a step, no host read) and read once by :meth:`first`."""

    def __init__(self, step: Callable[[], Tensor]):
        self.step = step
        self.count: Tensor | None = None
        self.found: Tensor | None = None

    def __call__(self) -> Tensor:
        y = self.step()
        if self.count is None:
            self.count = torch.zeros((), dtype=torch.int64, device=y.device)
            self.found = torch.zeros((), dtype=torch.int64, device=y.device)
        self.count += 1
        bad = (self.found == 0) & ~torch.isfinite(y).all()
        self.found = torch.where(bad, self.count, self.found)
        return y

    def first(self) -> int | None:
        n = 0 if self.found is None else int(self.found)
        return n or None


def sgd_variant(
    name: str,
    module: torch.nn.Module,
    fn: Callable[[Tensor], Tensor],
    x: Tensor,
    *,
    opts: BenchOptions,
    paths: DevicePaths,
    path: str,
    training: bool,
    lr: float,
    loss: Callable[[Tensor], Tensor] | None = None,
    grad: Tensor | None = None,
) -> Variant:
    """A training step: ``fn(x)`` on ``paths`` (autocast, compile), backward of ``loss`` of it (or
    of it against ``grad``), SGD with momentum on ``module``, set to ``training`` each step: the
    layer bench's variants share one layer."""
    fwd_flops = count_flops(lambda: fn(x), opts.batch)
    opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=0.9)
    run = paths.compiled(fn)

    def step() -> Tensor:
        module.train(training)
        with paths.autocast(opts.device):
            y = run(x) if loss is None else loss(run(x))
        y.backward(None if grad is None else grad.to(y.dtype))
        opt.step()
        opt.zero_grad(set_to_none=True)
        x.grad = None
        return y.detach()

    compiled = f"torch.compile {paths.compile_backend}" if paths.compile else "eager"
    return Variant(
        name=name,
        path=path,
        step=step,
        forward_flops=fwd_flops,
        precision=paths.precision_name(),
        value="loss" if loss is not None else "output",
        mode=f"{paths.precision_name()}, {compiled}",
    )


def measure(variants: list[Variant], opts: BenchOptions, *, label: str = "") -> dict[str, dict]:
    """Warm up each variant (reading its memory), then time ``repeats`` windows of ``steps`` steps
    per variant, interleaved across variants; ``label`` prefixes their names in messages.  Raises
    :class:`NonFiniteValues` after timing when a step (warm-up included) of any variant gave one."""
    warm, memory, windows = {}, {}, {v.name: [] for v in variants}
    watched = {v.name: _FirstNonFinite(v.step) for v in variants}
    for v in variants:
        opts.progress(f"warm-up {label}{v.name} ({v.path})")
        with memory_probe(opts.device) as memory[v.name]:
            warm[v.name], _, _ = timed(opts.device, watched[v.name], max(opts.warmup, 1))
    for _ in range(opts.repeats):
        for v in variants:
            wall, cpu, _ = timed(opts.device, watched[v.name], opts.steps)
            windows[v.name].append((wall, cpu))
    bad = [
        f"{label}{v.name}: non-finite {v.value} at step {n} ({v.mode or v.precision})"
        for v in variants
        for n in [watched[v.name].first()]
        if n is not None
    ]
    if bad:
        raise NonFiniteValues(*bad)
    records = {}
    for v in variants:
        walls, cpus = (list(x) for x in zip(*windows[v.name]))
        images_per_s = opts.batch * opts.steps / statistics.median(walls)
        records[v.name] = {
            "path": v.path,
            "precision": v.precision,
            "images_per_s": images_per_s,
            "images_per_s_best": opts.batch * opts.steps / min(walls),
            "step_ms": 1e3 * opts.batch / images_per_s,
            "windows_s": walls,
            # process CPU seconds (all threads): other jobs' load does not inflate it
            "cpu_s_per_step": statistics.median(cpus) / opts.steps,
            "warmup_s": warm[v.name],
            "forward_flops": v.forward_flops,
            "train_flops": 3 * v.forward_flops,
            "tflops": 3 * v.forward_flops * images_per_s / 1e12,
            "peak_memory_mb": memory[v.name]["peak_mb"],
            "step_memory_mb": memory[v.name]["step_mb"],
        }
    return records


def speedups(out: dict, name: str, fast: str, ref: str, *, best: bool = False) -> dict[str, float | None]:
    """``name``: images/s of run ``fast`` over run ``ref`` (``name_best``: of their best windows);
    ``name_cpu_time``: ``ref``'s CPU seconds per step over ``fast``'s (> 1: fast uses less CPU
    time); None without either run."""
    a, b = out.get(fast), out.get(ref)
    keys = [name, f"{name}_cpu_time", *([f"{name}_best"] if best else [])]
    if not a or not b:
        return dict.fromkeys(keys)
    cpu = b["cpu_s_per_step"] / a["cpu_s_per_step"] if a["cpu_s_per_step"] and b["cpu_s_per_step"] else None
    return dict(
        zip(
            keys,
            (a["images_per_s"] / b["images_per_s"], cpu, a["images_per_s_best"] / b["images_per_s_best"]),
        )
    )
