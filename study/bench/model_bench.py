"""``study bench``'s whole models: each paper model's training step (fast paths)
against the same model with reference attention layers."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from study.bench.layer_bench import attention_path
from study.bench.options import BenchOptions
from study.bench.references import REFERENCES, reference_model
from study.bench.timing import Variant, measure, sgd_variant, speedups
from study.cost.flops import count_parameters, forward_flops
from study.device.paths import DevicePaths
from study.models import build_model, model_name


def _model_variant(
    name: str, model: nn.Module, opts: BenchOptions, *, paths: DevicePaths, path: str
) -> Variant:
    """One training step of ``model`` on a fixed device-resident batch, on ``paths``."""
    gen = torch.Generator(device="cpu").manual_seed(opts.seed)
    images = torch.randn(opts.batch, 3, 32, 32, generator=gen).to(opts.device)
    labels = torch.randint(0, 10, (opts.batch,), generator=gen).to(opts.device)
    model, images = paths.memory_format(model, images)
    # the paper's training mode: dropout 0.1 (attention probabilities too)
    return sgd_variant(
        name,
        model,
        model,
        images,
        opts=opts,
        paths=paths,
        path=path,
        training=True,
        lr=opts.lr,
        loss=lambda out: F.cross_entropy(out, labels),
    )


def bench_model(key: str, opts: BenchOptions) -> dict:
    """Training throughput of ``BENCH_MODELS[key]`` (fast paths) and of it with the attention layers
    of ``opts.references`` (float32, eager; none for ResNet18), timed by
    :func:`~study.bench.timing.measure`."""
    torch.manual_seed(opts.seed)
    model = build_model(opts.model_config(key)).to(opts.device)
    out = {
        "key": key,
        "name": model_name(opts.model_config(key)),
        "n_params": count_parameters(model),
        "forward_flops": forward_flops(model),
        "batch": opts.batch,
        "steps": opts.steps,
    }
    paths = opts.paths()
    if hasattr(model, "blocks"):  # channels-last is for convolutional models only
        path, paths = attention_path(model.blocks[0].attention.train()), replace(paths, channels_last=False)
    else:
        path = "convolutions" + (", channels_last" if paths.channels_last else "")
    variants = [_model_variant("fast", model, opts, paths=paths, path=path)] + [
        _model_variant(
            name, reference_model(model, name), opts, paths=DevicePaths(), path=REFERENCES[name][2]
        )
        for name in REFERENCES
        if name in opts.references and hasattr(model, "blocks")
    ]  # none for ResNet18
    opts.progress(f"{key}")
    out.update({"fast": None, **dict.fromkeys(REFERENCES), **measure(variants, opts, label=f"{key} ")})
    del model, variants
    return {
        **out,
        **speedups(out, "speedup_vs_naive", "fast", "naive", best=True),
        **speedups(out, "speedup_vs_einsum", "fast", "einsum"),
    }
