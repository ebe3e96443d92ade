"""Today's encodings equal well-kept public implementations of the same equations.

Each layer (``study.models.encoded.EncodedAttention`` at timm's head layout: heads of
width D/N_h and a value projection) is compared in float64 with timm's layer on
ported weights — ConViT's ``GPSA``, Swin's ``WindowAttention`` (one window = the
whole grid), EVA's rotary attention with ``RotaryEmbeddingCat`` (axial) and
``RotaryEmbeddingMixed`` — forward and gradients (of the input and of every ported
parameter), with parameter counts equal to theirs.  Each comparison has a negative
control, a plausible porting mistake (swapped axes, a table not flipped, the
sub-table taken at the wrong offset), that must make the outputs differ, so the check
can fail.

Where: head width 12 (D = 48, N_h = 4: axial RoPE's float32 frequencies differ from a
float64 computation from this width on), on the paper's 16×16 grid and a non-square
12×16 grid (Swin: smaller than our 31×31 table, so its sub-table's offset is
compared), on both of our paths: the explicit (B, N_h, T, T) probabilities and
``scaled_dot_product_attention`` (``EncodedAttention.fused``, for the encodings that
have ``sdpa_inputs``).  Not compared: GPSA on a non-square grid (timm's ``GPSA``
builds its shifts for √N × √N tokens only) and GPSA's SDPA path (it has none: its
gated mix of two softmaxes is not one softmax of scores).
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

DIM, HEADS, SIDE, BATCH = 48, 4, 16, 2  # head width 12; SIDE: our layers' grid (tables sized by it)
TOL = 1e-10  # float64: the two implementations differ in the order of operations only
GRIDS = [(16, 16), (12, 16)]  # (rows, columns) of the compared token grid
GRID_IDS = ["16x16", "12x16"]
PATHS = [False, True]  # EncodedAttention.fused: explicit probabilities, scaled_dot_product_attention
PATH_IDS = ["explicit", "sdpa"]


def ours(encoding: str, *, qkv_bias: bool, fused: bool = False, **options) -> EncodedAttention:
    torch.manual_seed(1)
    layer = EncodedAttention(
        dim=DIM,
        num_heads=HEADS,
        encoding=REGISTRY[encoding],
        grid=SIDE,
        head_dim=DIM // HEADS,
        value=True,
        qkv_bias=qkv_bias,
        **options,
    )
    layer.fused = fused
    assert layer.uses_fused(torch.device("cpu")) == fused  # the path the test names is the path taken
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


def compare(
    layer: EncodedAttention,
    reference,
    ported: dict[str, torch.Tensor],
    *,
    grid=(SIDE, SIDE),
    errors: dict | None = None,
) -> float:
    """Max |ours − theirs| over the output, the input's gradient and the gradients of every
    parameter of ours against its ported source (``ported``: our name → their tensor, or a
    callable mapping their gradient to ours), on a ``grid`` (rows, columns) of tokens
    (row-major for both); ``errors`` gets each one by name."""
    h, w_ = grid
    t = h * w_
    torch.manual_seed(3)
    x = torch.randn(BATCH, t, DIM, dtype=torch.float64)
    w = torch.randn(BATCH, t, DIM, dtype=torch.float64)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya = layer(xa.view(BATCH, h, w_, DIM)).reshape(BATCH, t, DIM)
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
        "query.weight": lambda: theirs.qk.weight.grad[:DIM],
        "key.weight": lambda: theirs.qk.weight.grad[DIM:],
        "value.weight": theirs.v.weight,
        "out_proj.weight": theirs.proj.weight,
        "out_proj.bias": theirs.proj.bias,
        "positional.weight": theirs.pos_proj.weight,
        "positional.bias": theirs.pos_proj.bias,
        "positional.gate": theirs.gating_param,
    }
    return layer, theirs, ported


def test_gpsa_equals_convit_gpsa_forward_and_gradients():
    """16×16, explicit path only (see the module docstring)."""
    layer, theirs, ported = gpsa_pair()
    assert not layer.uses_fused(torch.device("cpu")) and not hasattr(layer.encoding, "sdpa_inputs")
    assert n_params(layer) == n_params(theirs)
    assert compare(layer, theirs, ported) < TOL


def test_gpsa_negative_control_swapped_axes_differs():
    layer, theirs, ported = gpsa_pair(swap_axes=True)
    assert compare(layer, theirs, ported) > 1e-3


# ----------------------------------------------------------------- Swin bias
def swin_pair(*, flip: bool = True, grid=(SIDE, SIDE), fused: bool = False, offset: bool = True):
    """Swin's window of ``grid`` (its ((2h−1)(2w−1), N_h) table) against our layer of the
    S×S grid, whose (N_h, 2S−1, 2S−1) table holds the window's shifts at offset
    (S − h, S − w): Swin's table is ported there (``offset=False``, the mistake: at the
    corner), our table's other entries are random and must get no gradient."""
    h, w_ = grid
    theirs = WindowAttention(dim=DIM, num_heads=HEADS, window_size=grid, qkv_bias=True).double().eval()
    randomise(theirs)
    layer = ours("relative_bias", qkv_bias=True, fused=fused)
    w, b = theirs.qkv.weight, theirs.qkv.bias
    copy_linear(layer.query, w[:DIM], b[:DIM])
    copy_linear(layer.key, w[DIM : 2 * DIM], b[DIM : 2 * DIM])
    copy_linear(layer.value, w[2 * DIM :], b[2 * DIM :])
    copy_linear(layer.out_proj, theirs.proj.weight, theirs.proj.bias)
    rows, cols = (
        (slice(SIDE - h, SIDE + h - 1), slice(SIDE - w_, SIDE + w_ - 1))
        if offset
        else (slice(0, 2 * h - 1), slice(0, 2 * w_ - 1))
    )
    with torch.no_grad():
        layer.positional.table.normal_(0.0, 0.3)  # what the window does not reach: random, unused

    def window(t):  # Swin's ((2h−1)(2w−1), N_h), indexed by query − key → (N_h, 2h−1, 2w−1) by key − query
        t = t.t().reshape(HEADS, 2 * h - 1, 2 * w_ - 1)
        return t.flip(1, 2) if flip else t

    def table(t):  # their table's gradient where ours holds it, zero elsewhere
        out = torch.zeros_like(layer.positional.table)
        out[:, rows, cols] = window(t)
        return out

    with torch.no_grad():
        layer.positional.table[:, rows, cols] = window(theirs.relative_position_bias_table)
    ported = {
        "query.weight": lambda: theirs.qkv.weight.grad[:DIM],
        "query.bias": lambda: theirs.qkv.bias.grad[:DIM],
        "key.weight": lambda: theirs.qkv.weight.grad[DIM : 2 * DIM],
        "key.bias": lambda: theirs.qkv.bias.grad[DIM : 2 * DIM],
        "value.weight": lambda: theirs.qkv.weight.grad[2 * DIM :],
        "value.bias": lambda: theirs.qkv.bias.grad[2 * DIM :],
        "out_proj.weight": theirs.proj.weight,
        "out_proj.bias": theirs.proj.bias,
        "positional.table": lambda: table(theirs.relative_position_bias_table.grad),
    }
    return layer, theirs, ported


@pytest.mark.parametrize("fused", PATHS, ids=PATH_IDS)
@pytest.mark.parametrize("grid", GRIDS, ids=GRID_IDS)
def test_relative_bias_equals_swin_window_attention_forward_and_gradients(grid, fused):
    layer, theirs, ported = swin_pair(grid=grid, fused=fused)
    h, w = grid
    assert n_params(layer) - n_params(theirs) == HEADS * ((2 * SIDE - 1) ** 2 - (2 * h - 1) * (2 * w - 1))
    assert layer.positional.table.numel() == (2 * SIDE - 1) ** 2 * HEADS
    assert compare(layer, theirs, ported, grid=grid) < TOL


@pytest.mark.parametrize("fused", PATHS, ids=PATH_IDS)
def test_relative_bias_negative_control_unflipped_table_differs(fused):
    layer, theirs, ported = swin_pair(flip=False, fused=fused)
    assert compare(layer, theirs, ported) > 1e-3


@pytest.mark.parametrize("fused", PATHS, ids=PATH_IDS)
def test_relative_bias_negative_control_sub_table_at_the_wrong_offset_differs(fused):
    """A 12×16 grid uses the central (23, 31) part of the 31×31 table: ported at the
    corner instead, the shifts read the wrong entries."""
    layer, theirs, ported = swin_pair(grid=(12, 16), fused=fused, offset=False)
    assert compare(layer, theirs, ported, grid=(12, 16)) > 1e-3


def test_relative_bias_table_has_961_entries_per_head_at_the_paper_grid():
    from study.models import ModelConfig, build_model

    model = build_model(
        ModelConfig(encoding="relative_bias", hidden=16, layers=1, intermediate=16, num_heads=2)
    )
    assert model.blocks[0].attention.positional.table.shape == (2, 31, 31)


# --------------------------------------------------------------------- RoPE
def eva_attention():
    """EVA's rotary attention as EVA builds it: query and value biases, none on the key."""
    theirs = (
        EvaAttention(
            dim=DIM, num_heads=HEADS, qkv_bias=True, qkv_fused=False, num_prefix_tokens=0, scale_norm=False
        )
        .double()
        .eval()
    )
    randomise(theirs)  # the biases too (timm zero-initialises them)
    assert theirs.k_proj.bias is None and theirs.q_proj.bias is not None and theirs.v_proj.bias is not None
    return theirs


def eva_layer(fused: bool, **options) -> EncodedAttention:
    """Ours with EVA's biases: query and value, no key bias."""
    return ours("rope2d", qkv_bias=True, key_bias=False, fused=fused, **options)


def port_eva(layer: EncodedAttention, theirs) -> dict:
    copy_linear(layer.query, theirs.q_proj.weight, theirs.q_proj.bias)
    copy_linear(layer.key, theirs.k_proj.weight, None)
    copy_linear(layer.value, theirs.v_proj.weight, theirs.v_proj.bias)
    copy_linear(layer.out_proj, theirs.proj.weight, theirs.proj.bias)
    return {
        "query.weight": theirs.q_proj.weight,
        "query.bias": theirs.q_proj.bias,
        "key.weight": theirs.k_proj.weight,
        "value.weight": theirs.v_proj.weight,
        "value.bias": theirs.v_proj.bias,
        "out_proj.weight": theirs.proj.weight,
        "out_proj.bias": theirs.proj.bias,
    }


def timm_axial_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    """timm's ``freq_bands(d/4, temperature=θ, step=1)`` written out here: exponents i/(d/4)
    and 1/θ^exp in float32 (Heo et al.'s code: 1/θ^(4i/d), the same float32 values)."""
    exp = torch.arange(0, head_dim // 4, dtype=torch.int64).to(torch.float32) / (head_dim // 4)
    return 1.0 / (theta**exp)


@pytest.mark.parametrize("head_dim", [8, 12, 16, 24, 32, 64])
@pytest.mark.parametrize("theta", [100.0, 10000.0])
def test_rope_axial_frequencies_are_timms_bit_for_bit(head_dim, theta):
    """Computed as the reference computes them (float32), not rounded from float64:
    that differed by up to 2.2e-7 relative from width 12 on (equal at width 8)."""
    layer = EncodedAttention(
        dim=4 * head_dim,
        num_heads=4,
        encoding=REGISTRY["rope2d"],
        grid=4,
        head_dim=head_dim,
        value=True,
        mode="axial",
        theta=theta,
    )
    want = timm_axial_frequencies(head_dim, theta)
    assert torch.equal(layer.positional.freqs, want)
    assert torch.equal(RotaryEmbeddingCat(dim=head_dim, in_pixels=False, temperature=theta).bands, want)
    rounded = (theta ** (-torch.arange(0, head_dim, 4, dtype=torch.float64) / head_dim)).float()
    if (head_dim, theta) == (12, 10000.0):
        assert not torch.equal(rounded, want)  # the old computation: the difference this test guards


def axial_embed(grid, *, swap: bool, theta: float = 100.0) -> torch.Tensor:
    """timm's (T, ·) sin/cos table of RotaryEmbeddingCat for a (rows, columns) ``grid``:
    'xy' indexing gives row-major tokens with the x (column) bands first, Heo et al.'s
    axial layout; ``swap`` (the negative control) 'ij', the row's bands first (no cached
    table: timm computes a cached one's sin/cos in float32)."""
    rope = RotaryEmbeddingCat(
        dim=DIM // HEADS, in_pixels=False, temperature=theta, grid_indexing="ij" if swap else "xy"
    ).double()
    return rope.get_embed(list(grid), dtype=torch.float64)


@pytest.mark.parametrize("fused", PATHS, ids=PATH_IDS)
@pytest.mark.parametrize("grid", GRIDS, ids=GRID_IDS)
@pytest.mark.parametrize("swap", [False, True], ids=["ported", "negative-control-axes-swapped"])
def test_rope_axial_equals_timm_rotary_cat(swap, grid, fused):
    theta = 100.0
    theirs = eva_attention()
    # Heo et al.'s axial layout: the first d/4 pairs rotate by x, the last by y; the
    # negative control feeds timm's row-first table to a port that expects x first.  The
    # frequencies are our own (equal to timm's bit for bit, above), not copied from timm's buffer.
    layer = eva_layer(fused, mode="axial", theta=theta)
    ported = port_eva(layer, theirs)
    emb = axial_embed(grid, swap=swap, theta=theta)
    err = compare(layer, lambda x: theirs(x, rope=emb), ported, grid=grid)
    assert (err > 1e-3) if swap else (err < TOL)
    assert n_params(layer) == n_params(theirs)  # axial RoPE has no parameters; no key bias on either side


@pytest.mark.parametrize("fused", PATHS, ids=PATH_IDS)
def test_rope_negative_control_a_key_bias_eva_does_not_have_differs(fused):
    """With a key bias (our ``qkv_bias`` default) the rotated keys differ from EVA's: the
    comparison above can fail on the biases."""
    theirs = eva_attention()
    layer = ours("rope2d", qkv_bias=True, fused=fused, mode="axial", theta=100.0)
    ported = port_eva(layer, theirs)
    with torch.no_grad():
        layer.key.bias.normal_(0.0, 0.3)
    ported["key.bias"] = lambda: torch.zeros_like(layer.key.bias)
    assert compare(layer, lambda x: theirs(x, rope=axial_embed((SIDE, SIDE), swap=False)), ported) > 1e-3


@pytest.mark.parametrize("fused", PATHS, ids=PATH_IDS)
@pytest.mark.parametrize("grid", GRIDS, ids=GRID_IDS)
@pytest.mark.parametrize("swap", [False, True], ids=["ported", "negative-control-axes-swapped"])
def test_rope_mixed_equals_timm_rotary_mixed(swap, grid, fused):
    theirs = eva_attention()
    torch.manual_seed(4)
    h, w = grid
    # 'xy' on [rows, columns]: timm's t_x, t_y are each token's column and row, row-major
    rope = RotaryEmbeddingMixed(
        dim=DIM, depth=1, num_heads=HEADS, temperature=10.0, feat_shape=[h, w], grid_indexing="xy"
    ).double()
    layer = eva_layer(fused, mode="mixed", theta=10.0)
    ported = port_eva(layer, theirs)
    with torch.no_grad():
        f = rope.freqs[:, 0]  # (2, N_h, d/2): f_x, f_y of the one block
        layer.positional.freqs.copy_(f.flip(0) if swap else f)
    ported["positional.freqs"] = lambda: rope.freqs.grad[:, 0].flip(0) if swap else rope.freqs.grad[:, 0]
    errors: dict = {}
    err = compare(layer, lambda x: theirs(x, rope=rope.get_embed()[0]), ported, grid=grid, errors=errors)
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
    layer = EncodedAttention(
        dim=36,
        num_heads=9,
        encoding=REGISTRY["gpsa"],
        grid=5,
        head_dim=4,
        value=True,
        qkv_bias=False,
        locality_strength=2.0,
    ).double()
    rows = lambda w: sorted(map(tuple, w.detach().tolist()))  # noqa: E731
    assert rows(layer.positional.weight) == rows(theirs.pos_proj.weight)
    assert torch.equal(layer.positional.gate.detach(), theirs.gating_param.detach())
