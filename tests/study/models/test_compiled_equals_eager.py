"""``torch.compile`` of the paper-size model against eager (issue 43: inductor's CUDA code
trained SA quadratic to NaN at the paper's size while the tiny models of the other compile
tests matched eager).

One training step's loss and every parameter's gradient at the paper's width (D 400, N_h 9,
16×16 tokens; one layer, batch 2), every encoding, within bf16 tolerance.  The backend:
``STUDY_COMPILE_BACKEND`` (default ``aot_eager``: Dynamo's and AOT Autograd's graphs run by
eager kernels, 3-11 s an encoding on 2 shared cores; ``inductor`` generates C++ code, about 8
minutes for all encodings from a cold cache, so it is run on demand: docs/performance.md).  On
CUDA the test always runs inductor, with ``unverified_compile`` (``benchmarks/gpu_check.py``
runs it to verify a configuration for ``study.device.paths.VERIFIED_COMPILES``).  The
positional-only encodings' probabilities never enter a compiled graph (tested with a
recording backend: the graphs Dynamo hands over)."""

import os

import pytest
import torch
import torch.nn.functional as F

from study.device.paths import DevicePaths
from study.models import ModelConfig, build_model
from study.models.encodings import REGISTRY

BACKEND = os.environ.get("STUDY_COMPILE_BACKEND", "aot_eager")
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
#: the paper's width and grid (Table 2; 32×32 images, 2×2 space-to-depth), one layer, no dropout
PAPER_WIDTH = {
    "hidden": 400,
    "num_heads": 9,
    "intermediate": 512,
    "layers": 1,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}
#: bf16 carries 8 bits (2^-8 ≈ 0.4 %): compiled and eager agree within a few roundings of it
BF16_RTOL = 1e-2
#: a gradient that is 0 in exact arithmetic (the key bias: q·b is the same for every key) is
#: compared against this share of the whole gradient's norm, not its own round-off
ZERO_GRADIENT = 1e-6


def paper_width(variant: dict) -> ModelConfig:
    return ModelConfig(**PAPER_WIDTH, **variant)


def loss_and_gradients(model, net, x, y) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(net(x).float(), y)
    loss.backward()
    return loss.item(), {n: p.grad.detach().double().cpu() for n, p in model.named_parameters()}


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_compiled_step_equals_eager_at_the_paper_width(encoding_variant, device):
    cfg = paper_width(encoding_variant)
    torch.manual_seed(0)
    model = build_model(cfg).to(device).train()
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 3, 32, 32, generator=gen).to(device), torch.tensor([3, 7], device=device)
    backend = "inductor" if device == "cuda" else BACKEND
    paths = DevicePaths(compile=True, compile_backend=backend, unverified_compile=device == "cuda")
    traced = []  # the first layer's forward as Dynamo traced it (True) or eager ran it (False)
    model.blocks[0].register_forward_hook(lambda *args: traced.append(torch.compiler.is_compiling()))
    eager_loss, eager = loss_and_gradients(model, model, x, y)
    compiled_loss, compiled = loss_and_gradients(model, paths.compiled(model), x, y)
    assert traced == [False, True]  # the second step really went through torch.compile
    assert abs(compiled_loss - eager_loss) <= BF16_RTOL * abs(eager_loss)
    whole = sum(float(g.pow(2).sum()) for g in eager.values()) ** 0.5
    errors = {
        n: float((compiled[n] - g).norm()) / max(float(g.norm()), ZERO_GRADIENT * whole)
        for n, g in eager.items()
    }
    assert max(errors.values()) <= BF16_RTOL, {n: f"{e:.1e}" for n, e in errors.items() if e > BF16_RTOL}
    assert all(torch.isfinite(g).all() for g in compiled.values())


def softmax_nodes(graphs) -> int:
    return sum(
        1
        for gm in graphs
        for node in gm.graph.nodes
        if node.op in ("call_function", "call_method") and "softmax" in str(node.target)
    )


@pytest.fixture
def fresh_dynamo():
    """Dynamo's cache emptied before and after (``torch.compiler.reset``): it is the process's, and
    past ``recompile_limit`` (8) variants of one code object (the blocks' ``forward``, compiled for
    every encoding by the tests run before in this process) Dynamo runs that code eagerly and hands
    the backend no graph of it."""
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def test_positional_probabilities_stay_outside_the_compiled_graphs(encoding_variant, fresh_dynamo):
    """A positional-only encoding's softmax (quadratic, learned) runs eagerly, outside every
    graph Dynamo hands to the backend (``torch.compiler.disable``); a content encoding's softmax
    depends on the image and stays inside."""
    cfg = ModelConfig(**{**PAPER_WIDTH, "hidden": 16, "intermediate": 16, "num_heads": 4}, **encoding_variant)
    torch.manual_seed(0)
    model = build_model(cfg).train()
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.randn(2, 3, 32, 32)
    torch.compile(model, backend=recording_backend)(x).sum().backward()
    assert graphs, "Dynamo handed no graph to the backend"
    positional_only = not REGISTRY[cfg.encoding].content
    assert (softmax_nodes(graphs) == 0) == positional_only, [str(gm.graph) for gm in graphs]
