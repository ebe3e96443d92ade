"""``study bench``'s whole models: each paper model's training step (fast paths)
against the same model with reference attention layers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from study.bench.layer_bench import attention_path
from study.bench.options import BENCH_MODELS, REFERENCE_NAMES, BenchOptions, progress
from study.bench.references import REFERENCES, reference_model
from study.bench.timing import Variant, _cpu_ratio, _ratio, count_forward_flops, measure
from study.devicepaths import DevicePaths
from study.flops import count_parameters, forward_flops
from study.models import build_model, model_name


def _model_variant(name: str, model: nn.Module, opts: BenchOptions, *, paths: DevicePaths, path: str) -> Variant:
    """One training step of ``model`` on a fixed device-resident batch, taking the
    device branches ``paths`` (autocast, compile, channels-last)."""
    dev = opts.device
    gen = torch.Generator(device="cpu").manual_seed(opts.seed)
    images = torch.randn(opts.batch, 3, 32, 32, generator=gen).to(dev)
    labels = torch.randint(0, 10, (opts.batch,), generator=gen).to(dev)
    model, images = paths.memory_format(model, images)
    model.train()  # the paper's training mode: dropout 0.1 (attention probabilities too)
    fwd_flops = count_forward_flops(lambda: model(images), opts.batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run = paths.compiled(model)

    def step() -> Tensor:
        with paths.autocast(dev):
            loss = F.cross_entropy(run(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return Variant(name, path, step, fwd_flops, paths.precision_name())


def bench_model(key: str, opts: BenchOptions) -> dict:
    """Training throughput of ``BENCH_MODELS[key]`` (fast paths) and of its references
    (attention layers replaced by the naive and/or the einsum formulation, per
    ``opts.references``): each warmed up alone (so that its memory is its own), then
    their timed windows interleaved, so a change of machine load hits all alike."""
    torch.manual_seed(opts.seed)
    model = build_model(opts.model_config(key)).to(opts.device)
    out = _model_header(key, model, opts)
    fast = _fast_model_variant(key, model, opts)
    refs = {name: _reference_model_variant(key, model, name, opts) for name in REFERENCE_NAMES}
    progress(opts, f"{key}")
    records = measure([fast, *(v for v in refs.values() if v is not None)], opts)
    out["fast"] = records[fast.name]
    for name, variant in refs.items():
        out[name] = records[variant.name] if variant is not None else None
    del model
    return {**out, **_model_ratios(out)}


def _model_header(key: str, model: nn.Module, opts: BenchOptions) -> dict:
    return {"key": key, "name": model_name(opts.model_config(key)), "n_params": count_parameters(model),
            "forward_flops": forward_flops(model), "batch": opts.batch, "steps": opts.steps}


def _fast_model_variant(key: str, model: nn.Module, opts: BenchOptions) -> Variant:
    paths = opts.paths()
    if hasattr(model, "blocks"):  # channels-last is for convolutional models only
        model.train()
        path, paths = attention_path(model.blocks[0].attention), paths.replace(channels_last=False)
    else:
        path = "convolutions" + (", channels_last" if paths.channels_last else "")
    return _model_variant(f"{key} fast", model, opts, paths=paths, path=path)


def _reference_model_variant(key: str, model: nn.Module, name: str, opts: BenchOptions) -> Variant | None:
    """The model with reference ``name`` in every attention layer (float32, eager);
    ``None`` without attention (ResNet18) or when ``name`` is not in ``opts.references``."""
    ref = reference_model(model, name) if name in opts.references else None
    if ref is None:
        return None
    return _model_variant(f"{key} {name}", ref, opts, paths=DevicePaths(), path=REFERENCES[name][2])


def _model_ratios(out: dict) -> dict:
    ratios = {
        "speedup_vs_naive": _ratio(out["fast"], out["naive"]),
        "speedup_vs_naive_best": _ratio(out["fast"], out["naive"], "images_per_s_best"),
        "speedup_vs_naive_cpu_time": _cpu_ratio(out["fast"], out["naive"]),
    }
    ratios["speedup_vs_einsum"] = _ratio(out["fast"], out["einsum"])
    ratios["speedup_vs_einsum_cpu_time"] = _cpu_ratio(out["fast"], out["einsum"])
    return ratios

