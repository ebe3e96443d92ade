"""Today's encodings equal well-kept public implementations of the same equations.

Each layer (``study.models.encoded.EncodedAttention`` at timm's head layout: heads of
width D/N_h and a value projection) is compared in float64 with timm's layer on
ported weights — ConViT's ``GPSA``, Swin's ``WindowAttention`` (one window = the
whole grid), EVA's rotary attention with ``RotaryEmbeddingCat`` (axial) and
``RotaryEmbeddingMixed`` — forward and gradients (of the input and of every ported
parameter), with parameter counts equal to theirs.  Each comparison has a negative
control, a plausible porting mistake (swapped axes, a table not flipped), that must
make the outputs differ, so the check can fail.
"""

from __future__ import annotations

import pytest
import torch

from study.models.encoded import EncodedAttention
from study.models.encodings import REGISTRY

timm = pytest.importorskip("timm")
from timm.layers import RotaryEmbeddingCat, RotaryEmbeddingMixed  # noqa: E402
from timm.models.convit import GPSA  # noqa: E402
from timm.models.eva import EvaAttention  # noqa: E402
from timm.models.swin_transformer import WindowAttention  # noqa: E402

DIM, HEADS, SIDE, BATCH = 32, 4, 4, 3
TOL = 1e-10  # float64: the two implementations differ in the order of operations only


def ours(encoding: str, *, qkv_bias: bool, **options) -> EncodedAttention:
    torch.manual_seed(1)
    layer = EncodedAttention(dim=DIM, num_heads=HEADS, encoding=REGISTRY[encoding], grid=SIDE,
                             head_dim=DIM // HEADS, value=True, qkv_bias=qkv_bias, **options)
    return layer.double().eval()


def randomise(module: torch.nn.Module) -> None:
    """Every parameter drawn anew (timm zero-initialises some: a port of zeros tests little)."""
    torch.manual_seed(2)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3)


def copy_linear(dst: torch.nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    with torch.no_grad():
        dst.weight.copy_(weight)
        if bias is not None:
            dst.bias.copy_(bias)


def compare(layer: EncodedAttention, reference, ported: dict[str, torch.Tensor], *,
            errors: dict | None = None) -> float:
    """Max |ours − theirs| over the output, the input's gradient and the gradients of every
    parameter of ours against its ported source (``ported``: our name → their tensor, or a
    callable mapping their gradient to ours); ``errors`` gets each one by name."""
    torch.manual_seed(3)
    x = torch.randn(BATCH, SIDE * SIDE, DIM, dtype=torch.float64)
    w = torch.randn(BATCH, SIDE * SIDE, DIM, dtype=torch.float64)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya = layer(xa.view(BATCH, SIDE, SIDE, DIM)).reshape(BATCH, SIDE * SIDE, DIM)
    yb = reference(xb)
    (ya * w).sum().backward()
    (yb * w).sum().backward()
    errs = {"output": (ya - yb).abs().max().item(), "input.grad": (xa.grad - xb.grad).abs().max().item()}
    params = dict(layer.named_parameters())
    assert set(params) == set(ported), "every parameter of ours is ported"
    for name, theirs in ported.items():
        grad = theirs() if callable(theirs) else theirs.grad
        errs[f"{name}.grad"] = (params[name].grad - grad).abs().max().item()
    if errors is not None:
        errors.update(errs)
    return max(errs.values())


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ------------------------------------------------------------------------ GPSA
def gpsa_pair(*, swap_axes: bool = False):
    theirs = GPSA(dim=DIM, num_heads=HEADS, qkv_bias=False, locality_strength=1.0).double().eval()
    theirs.local_init()
    randomise(theirs)
    layer = ours("gpsa", qkv_bias=False)
    copy_linear(layer.query, theirs.qk.weight[:DIM], None)
    copy_linear(layer.key, theirs.qk.weight[DIM:], None)
    copy_linear(layer.value, theirs.v.weight, None)
    copy_linear(layer.out_proj, theirs.proj.weight, theirs.proj.bias)
    with torch.no_grad():
        weight = theirs.pos_proj.weight.clone()
        if swap_axes:  # the mistake: δy's coefficient on δx
            weight = weight[:, [1, 0, 2]]
        layer.positional.weight.copy_(weight)
        layer.positional.bias.copy_(theirs.pos_proj.bias)
        layer.positional.gate.copy_(theirs.gating_param)
    ported = {
        "query.weight": lambda: theirs.qk.weight.grad[:DIM], "key.weight": lambda: theirs.qk.weight.grad[DIM:],
        "value.weight": theirs.v.weight, "out_proj.weight": theirs.proj.weight, "out_proj.bias": theirs.proj.bias,
        "positional.weight": theirs.pos_proj.weight, "positional.bias": theirs.pos_proj.bias,
        "positional.gate": theirs.gating_param,
    }
    return layer, theirs, ported


def test_gpsa_equals_convit_gpsa_forward_and_gradients():
    layer, theirs, ported = gpsa_pair()
    assert n_params(layer) == n_params(theirs)
    assert compare(layer, theirs, ported) < TOL


def test_gpsa_negative_control_swapped_axes_differs():
    layer, theirs, ported = gpsa_pair(swap_axes=True)
    assert compare(layer, theirs, ported) > 1e-3


# ----------------------------------------------------------------- Swin bias
def swin_pair(*, flip: bool = True):
    theirs = WindowAttention(dim=DIM, num_heads=HEADS, window_size=SIDE, qkv_bias=True).double().eval()
    randomise(theirs)
    layer = ours("relative_bias", qkv_bias=True)
    w, b = theirs.qkv.weight, theirs.qkv.bias
    copy_linear(layer.query, w[:DIM], b[:DIM])
    copy_linear(layer.key, w[DIM:2 * DIM], b[DIM:2 * DIM])
    copy_linear(layer.value, w[2 * DIM:], b[2 * DIM:])
    copy_linear(layer.out_proj, theirs.proj.weight, theirs.proj.bias)
    s = 2 * SIDE - 1

    def table(t):  # Swin's ((2S−1)², N_h), indexed by query − key → ours (N_h, 2S−1, 2S−1) by key − query
        t = t.t().reshape(HEADS, s, s)
        return t.flip(1, 2) if flip else t

    with torch.no_grad():
        layer.positional.table.copy_(table(theirs.relative_position_bias_table))
    ported = {
        "query.weight": lambda: theirs.qkv.weight.grad[:DIM], "query.bias": lambda: theirs.qkv.bias.grad[:DIM],
        "key.weight": lambda: theirs.qkv.weight.grad[DIM:2 * DIM],
        "key.bias": lambda: theirs.qkv.bias.grad[DIM:2 * DIM],
        "value.weight": lambda: theirs.qkv.weight.grad[2 * DIM:],
        "value.bias": lambda: theirs.qkv.bias.grad[2 * DIM:],
        "out_proj.weight": theirs.proj.weight, "out_proj.bias": theirs.proj.bias,
        "positional.table": lambda: table(theirs.relative_position_bias_table.grad),
    }
    return layer, theirs, ported


def test_relative_bias_equals_swin_window_attention_forward_and_gradients():
    layer, theirs, ported = swin_pair()
    assert n_params(layer) == n_params(theirs)
    assert layer.positional.table.numel() == (2 * SIDE - 1) ** 2 * HEADS
    assert compare(layer, theirs, ported) < TOL


def test_relative_bias_negative_control_unflipped_table_differs():
    layer, theirs, ported = swin_pair(flip=False)
    assert compare(layer, theirs, ported) > 1e-3


def test_relative_bias_table_has_961_entries_per_head_at_the_paper_grid():
    from study.models import ModelConfig, build_model

    model = build_model(ModelConfig(encoding="relative_bias", hidden=16, layers=1, intermediate=16, num_heads=2))
    assert model.blocks[0].attention.positional.table.shape == (2, 31, 31)


# --------------------------------------------------------------------- RoPE
def eva_attention():
    theirs = EvaAttention(dim=DIM, num_heads=HEADS, qkv_bias=False, qkv_fused=False, num_prefix_tokens=0,
                          scale_norm=False).double().eval()
    randomise(theirs)
    return theirs


def port_eva(layer: EncodedAttention, theirs) -> dict:
    copy_linear(layer.query, theirs.q_proj.weight, None)
    copy_linear(layer.key, theirs.k_proj.weight, None)
    copy_linear(layer.value, theirs.v_proj.weight, None)
    copy_linear(layer.out_proj, theirs.proj.weight, theirs.proj.bias)
    return {"query.weight": theirs.q_proj.weight, "key.weight": theirs.k_proj.weight,
            "value.weight": theirs.v_proj.weight, "out_proj.weight": theirs.proj.weight,
            "out_proj.bias": theirs.proj.bias}


@pytest.mark.parametrize("swap", [False, True], ids=["ported", "negative-control-axes-swapped"])
def test_rope_axial_equals_timm_rotary_cat(swap):
    theta = 100.0
    theirs = eva_attention()
    # Heo et al.'s axial layout: the first d/4 pairs rotate by x, the last by y ('xy' grid);
    # the negative control feeds timm's 'ij' grid (y first) to a port that expects x first
    # (no cached table: timm computes a cached one's sin/cos in float32)
    rope = RotaryEmbeddingCat(dim=DIM // HEADS, in_pixels=False, temperature=theta,
                              grid_indexing="ij" if swap else "xy").double()
    layer = ours("rope2d", qkv_bias=False, mode="axial", theta=theta)
    ported = port_eva(layer, theirs)
    assert torch.allclose(layer.positional.freqs, rope.bands, rtol=1e-7)  # the same f_i = θ^(−4i/d)
    layer.positional.freqs.copy_(rope.bands)  # ported too: both are float32-rounded, possibly 1 ulp apart
    emb = rope.get_embed([SIDE, SIDE], dtype=torch.float64)
    err = compare(layer, lambda x: theirs(x, rope=emb), ported)
    assert (err > 1e-3) if swap else (err < TOL)
    assert n_params(layer) == n_params(theirs)  # axial RoPE has no parameters


@pytest.mark.parametrize("swap", [False, True], ids=["ported", "negative-control-axes-swapped"])
def test_rope_mixed_equals_timm_rotary_mixed(swap):
    theirs = eva_attention()
    torch.manual_seed(4)
    rope = RotaryEmbeddingMixed(dim=DIM, depth=1, num_heads=HEADS, temperature=10.0, feat_shape=[SIDE, SIDE],
                                grid_indexing="xy").double()
    layer = ours("rope2d", qkv_bias=False, mode="mixed", theta=10.0)
    ported = port_eva(layer, theirs)
    with torch.no_grad():
        f = rope.freqs[:, 0]  # (2, N_h, d/2): f_x, f_y of the one block
        layer.positional.freqs.copy_(f.flip(0) if swap else f)
    ported["positional.freqs"] = lambda: rope.freqs.grad[:, 0].flip(0) if swap else rope.freqs.grad[:, 0]
    errors: dict = {}
    err = compare(layer, lambda x: theirs(x, rope=rope.get_embed()[0]), ported, errors=errors)
    if swap:
        assert err > 1e-3
    else:
        # both compute the mixed angles and their sin/cos in float32 (timm's get_mixed_freqs): the
        # forward pass agrees to float64 round-off, the frequencies' gradient (back through those
        # float32 sin/cos, summed in another order) to float32's
        freq_grad = errors.pop("positional.freqs.grad")
        assert max(errors.values()) < TOL, errors
        assert freq_grad < 1e-5 * rope.freqs.grad.abs().max().item()
    # parameters: the layer's projections and one (2, N_h, d/2) frequency table per layer
    assert n_params(layer) == n_params(theirs) + n_params(rope)


# -------------------------------------------------- GPSA's local initialisation
def test_gpsa_local_init_matches_convit_local_init():
    """The lattice and v_h = α(2Δx, 2Δy, −1) of ConViT's ``local_init``, head order aside."""
    theirs = GPSA(dim=36, num_heads=9, locality_strength=2.0).double()
    theirs.local_init()
    torch.manual_seed(0)
    layer = EncodedAttention(dim=36, num_heads=9, encoding=REGISTRY["gpsa"], grid=5, head_dim=4, value=True,
                             qkv_bias=False, locality_strength=2.0).double()
    rows = lambda w: sorted(map(tuple, w.detach().tolist()))  # noqa: E731
    assert rows(layer.positional.weight) == rows(theirs.pos_proj.weight)
    assert torch.equal(layer.positional.gate.detach(), theirs.gating_param.detach())
