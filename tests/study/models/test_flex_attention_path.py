"""EncodedAttention's FlexAttention path (``flex``, docs/design.md §12) equals its explicit
(B, N_h, T, T) path for every encoding it serves: the relative bias as a ``score_mod`` on
its table, RoPE's rotated q·k, GPSA's content softmax mixed with its shared positional
probabilities.

float32, dim 32, 4 heads, batch 2.  torch 2.13 runs FlexAttention's forward on CPU (eager,
unfused) but refuses its backward there: the gradients are compared on CUDA (both head
layouts), CPU compares outputs.  Each new shape or ``score_mod`` retraces FlexAttention's
eager wrapper (~0.4 s CPU, the first ~2.5 s): every encoding at the paper's layout on a
4 × 4 grid filling the S × S table, and the relative bias (its table read at an offset)
at timm's layout on a 2 × 3 grid (both sides short of S, unequal); GPSA's shared product
of either layout without FlexAttention.
"""

import pytest
import torch

from study.models import ModelConfig
from study.models.encoded import EncodedAttention, shared_probs_heads
from study.models.encodings import REGISTRY, ContentEncoding
from study.models.encodings.base import AdditiveEncoding
from study.models.encodings.relative_bias import RelativeBias

#: the unfused eager FlexAttention is the path under test (torch.compile fuses it on a GPU)
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
TOL = dict(rtol=1e-5, atol=1e-6)
DIM, HEADS, GRID, BATCH = 32, 4, 4, 2
#: every form of every encoding whose layer is EncodedAttention (all of today's: GPSA, bias, RoPE)
ENCODED = [
    pytest.param(name, over, id=form)
    for name, spec in REGISTRY.items()
    if isinstance(spec, ContentEncoding)
    for form, over in spec.variants
]
OUTPUT_CASES = [
    *(pytest.param(*case.values, "paper", (4, 4), id=f"{case.id}-paper-4x4") for case in ENCODED),
    pytest.param("relative_bias", {}, "timm", (2, 3), id="relative_bias-timm-2x3"),
]
CUDA = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="torch 2.13: FlexAttention has no backward on CPU"
)
#: constant along each softmax row (q·b_k, GPSA's b_h): their gradient is zero up to rounding
ROW_CONSTANT = {"key.bias", "positional.bias"}


def make_layer(name, over, *, layout="paper", dropout=0.0, encoding=None, device="cpu"):
    """A layer whose positional parameters are far from their small initial values (the
    bias table's std 0.02 would hide a wrong look-up in the tolerance)."""
    spec = REGISTRY[name]
    cfg = ModelConfig(hidden=DIM, num_heads=HEADS, encoding=name, **over)
    timm = {"head_dim": DIM // HEADS, "value": True} if layout == "timm" else {}
    layer = EncodedAttention(
        dim=DIM,
        num_heads=HEADS,
        encoding=encoding or spec,
        grid=GRID,
        attention_dropout=dropout,
        **timm,
        **spec.options(cfg),
    )
    with torch.no_grad():
        for p in layer.positional.parameters():
            p.normal_()
    return layer.to(device)


def outputs(layer, x, *, flex):
    layer.flex = flex
    return layer(x)


@pytest.mark.parametrize("name, over, layout, grid", OUTPUT_CASES)
def test_flex_path_output_equals_explicit_path(name, over, layout, grid):
    layer = make_layer(name, over, layout=layout).eval()
    x = torch.randn(BATCH, *grid, DIM)
    with torch.no_grad():
        explicit = outputs(layer, x, flex=False)
        flex = outputs(layer, x, flex=True)
        assert layer.uses_flex() and "FlexAttention" in layer.path_name()
        torch.testing.assert_close(flex, explicit, **TOL)
        # the probabilities are asked of the explicit path
        with_probs, probs = layer(x, return_attention=True)
    assert probs.shape == (BATCH, HEADS, grid[0] * grid[1], grid[0] * grid[1])
    torch.testing.assert_close(with_probs, explicit, rtol=0, atol=0)


@pytest.mark.parametrize("value_heads", [1, HEADS], ids=["paper-one-input", "timm-per-head"])
def test_shared_positional_probabilities_apply_to_one_input_or_per_head_values(value_heads):
    """GPSA's positional half on the FlexAttention path: (N_h, T, T) probabilities shared by
    the batch times v, (B, 1, T, D) in one product or (B, N_h, T, d_h) per head."""
    probs = torch.randn(HEADS, 12, 12).softmax(-1)
    v = torch.randn(BATCH, value_heads, 12, DIM)
    expected = torch.einsum("hqk,bhkd->bhqd", probs, v.expand(BATCH, HEADS, 12, DIM))
    torch.testing.assert_close(shared_probs_heads(probs, v), expected, **TOL)


def test_dense_bias_without_a_table_is_refused():
    """An additive encoding with only a dense (N_h, T, T) bias (here the relative bias's,
    built by its ``bias``) has no ``score_mod``: refused, not served without its bias."""

    class DenseBias(AdditiveEncoding):
        name = "dense_bias"
        init_parameters = RelativeBias.init_parameters

        def sdpa_inputs(self, layer, q, k, height, width):
            return q, k, REGISTRY["relative_bias"].bias(layer, height, width)

    layer = make_layer("relative_bias", {}, encoding=DenseBias()).eval()
    layer.flex = True
    with torch.no_grad(), pytest.raises(ValueError, match="dense_bias has a dense .* no bias_table"):
        layer(torch.randn(BATCH, GRID, GRID, DIM))


def test_training_on_cpu_is_refused_by_torch():
    """When torch gains FlexAttention's CPU backward this fails: then run the gradient test on CPU too."""
    layer = make_layer("relative_bias", {}).train()
    layer.flex = True
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        layer(torch.randn(BATCH, GRID, GRID, DIM))


def test_flex_is_off_unless_forced_and_refuses_dropout_in_training():
    layer = make_layer("relative_bias", {}, dropout=0.1)
    assert layer.flex is None and not layer.uses_flex()
    assert layer.path_name() == "relative_bias: explicit (B,N_h,T,T), dropout 0.1"
    layer.flex = True
    x = torch.randn(BATCH, GRID, GRID, DIM)
    with torch.no_grad(), pytest.raises(ValueError, match="FlexAttention has no dropout"):
        layer.train()(x)
    with torch.no_grad():
        evaluated = layer.eval()(x)  # no dropout in evaluation: served
    layer.flex = False
    with torch.no_grad():
        torch.testing.assert_close(evaluated, layer(x), **TOL)


def _grads(layer, x, *, flex):
    layer.zero_grad()
    x.grad = None
    y = outputs(layer, x, flex=flex)
    (y * torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y)).sum().backward()
    return {"input": x.grad.clone(), **{n: p.grad.clone() for n, p in layer.named_parameters()}}


@CUDA
@pytest.mark.parametrize("layout", ["paper", "timm"])
@pytest.mark.parametrize("name, over", ENCODED)
def test_flex_path_gradients_equal_explicit_path(name, over, layout):
    layer = make_layer(name, over, layout=layout, device="cuda").train()
    x = torch.randn(BATCH, GRID, GRID, DIM, device="cuda", requires_grad=True)
    explicit = _grads(layer, x, flex=False)
    flex = _grads(layer, x, flex=True)
    assert set(flex) == set(explicit)
    for key in explicit:
        torch.testing.assert_close(flex[key], explicit[key], **TOL, msg=key)
        assert key in ROW_CONSTANT or explicit[key].abs().sum() > 1e-3, key
