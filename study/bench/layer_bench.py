"""``study bench``'s attention layer alone: one layer of each self-attention
model at paper dims, its fast paths against the references."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import torch
from torch import Tensor

from study.bench.options import BenchOptions
from study.bench.references import REFERENCES
from study.bench.targets import ATTENTION, BENCH_MODELS
from study.bench.timing import Variant, measure, sgd_variant, speedups
from study.device.paths import DevicePaths
from study.models import build_model, model_name
from study.models.attention import RelativeSelfAttention
from study.models.encoded import EncodedAttention


def attention_path(layer) -> str:
    """Which exact path ``layer.forward`` takes in its current mode."""
    if isinstance(layer, EncodedAttention):
        return layer.path_name()
    p = layer.attention_dropout.p if layer.training else 0.0
    if layer.content:
        device = next(layer.parameters()).device
        kind = (
            "SDPA + positional bias" if layer.uses_fused_content(device) else "explicit (B,N_h,T,T) content"
        )
        return kind + (f", dropout {p:g}" if p else "")
    if layer.uses_factorised_path():
        return "factorised P_row⊗P_col"
    return "shared dense (N_h,T,T)" + (f" + one dropout mask {p:g}" if p else "")


def _layer_variant(
    name: str,
    layer: RelativeSelfAttention,
    fn: Callable[[Tensor], Tensor],
    opts: BenchOptions,
    *,
    training: bool,
    paths: DevicePaths,
    path: str,
) -> Variant:
    grid = BENCH_MODELS["sa_quadratic"].grid
    gen = torch.Generator(device="cpu").manual_seed(opts.seed)
    x = torch.randn(opts.batch, grid, grid, layer.dim, generator=gen).to(opts.device).requires_grad_()
    layer.train(training)
    with torch.no_grad():
        # the gradient of a mean-like loss: small enough that the variants' SGD steps
        # on the shared layer never push its scores out of range
        y0 = fn(x).float()
        grad_out = torch.randn_like(y0) / y0.numel() ** 0.5
    return sgd_variant(
        name, layer, fn, x, opts=opts, paths=paths, path=path, training=training, lr=1e-3, grad=grad_out
    )


def bench_attention(key: str, opts: BenchOptions) -> dict:
    """The first attention layer of ``BENCH_MODELS[key]`` at paper dims (D 400, N_h 9, 16×16); a step is
    forward + backward (the input requires grad, as inside the network) + SGD on the layer.  Runs,
    interleaved: ``fast`` (eval, no probability dropout), ``train`` (dropout 0.1), each reference, and
    ``core_*``: the heads before ``out_proj`` (docs/performance.md, "`study bench`")."""
    torch.manual_seed(opts.seed)
    layer = build_model(BENCH_MODELS[key]).blocks[0].attention.to(opts.device)
    out = {"key": key, "name": model_name(BENCH_MODELS[key]), "batch": opts.batch, "steps": opts.steps}
    opts.progress(f"attention layer {key}")
    fast_path, train_path = attention_path(layer.eval()), attention_path(layer.train())
    fast = replace(opts.paths(), channels_last=False)
    # (name, function of the input, training mode, device paths, path): the references float32, eager
    runs = [
        ("fast", layer, False, fast, fast_path),
        ("train", layer, True, fast, train_path),
        ("core_fast", lambda x: layer.head_outputs(x)[0], False, fast, "core: " + fast_path),
    ]
    for name, (fn, heads_fn, path, dropout) in REFERENCES.items():
        if name in opts.references:
            runs += [
                (name, partial(fn, layer), dropout, DevicePaths(), path),
                (f"core_{name}", partial(heads_fn, layer), dropout, DevicePaths(), f"core: {name}"),
            ]
    variants = [
        _layer_variant(name, layer, fn, opts, training=training, paths=paths, path=path)
        for name, fn, training, paths, path in runs
    ]
    out.update(dict.fromkeys(("fast", "train", "core_fast", *REFERENCES, *(f"core_{r}" for r in REFERENCES))))
    out.update(measure(variants, opts, label=f"{ATTENTION}:{key} "))
    return {
        **out,
        **speedups(out, "speedup_vs_naive", "fast", "naive", best=True),
        **speedups(out, "train_speedup_vs_naive", "train", "naive"),
        **speedups(out, "core_speedup_vs_naive", "core_fast", "core_naive"),
        # the project's training path against the einsum formulation, both with dropout
        **speedups(out, "train_speedup_vs_einsum", "train", "einsum"),
    }
