"""Fast paths of RelativeSelfAttention (docs/design.md §12) equal the naive reference.

Every encoding/isotropic variant, float64, tolerances 1e-9: the separable
P_row ⊗ P_col path, the shared dense (N_h, T, T) path, scaled_dot_product_attention
for content attention; outputs, returned probabilities and gradients.
"""

import pytest
import torch

from study.bench.naive import naive_attention_heads, naive_relative_attention
from study.models.attention import RelativeSelfAttention, kron_probs
from study.models.dropout import probability_dropout
from study.models.positional import GaussianScores, LearnedScores

TOL = dict(rtol=1e-9, atol=1e-9)
SEPARABLE = {("quadratic", True), ("learned", None)}


def make_layer(encoding, isotropic, *, dim=8, heads=3, size=6, dropout=0.1, out_dim=None):
    if encoding == "quadratic":
        pos = GaussianScores(num_heads=heads, isotropic=isotropic)
    else:
        pos = LearnedScores(num_heads=heads, pos_dim=5, max_size=size)
    layer = RelativeSelfAttention(
        dim=dim,
        num_heads=heads,
        positional=pos,
        content=encoding == "learned_content",
        attention_dropout=dropout,
        out_dim=out_dim,
    )
    layer.fused_content = True  # exercise the CUDA default (SDPA) here; explicit has its own tests
    return layer.double()


def inputs(b=3, h=5, w=6, d=8, grad=False):
    return torch.randn(b, h, w, d, dtype=torch.float64, requires_grad=grad)


class CountCalls:
    """Counts calls of the positional module's dense (N_h, T, T) forward."""

    def __init__(self, module):
        self.n = 0
        self._forward = module.forward
        module.forward = self

    def __call__(self, *a, **k):
        self.n += 1
        return self._forward(*a, **k)


@pytest.mark.parametrize("mode", ["eval", "train_p0"])
@pytest.mark.parametrize("grid", [(5, 6), (6, 6)])
def test_fast_path_equals_naive(variant, mode, grid):
    layer = make_layer(*variant, dropout=0.1 if mode == "eval" else 0.0)
    layer.train(mode != "eval")
    x = inputs(h=grid[0], w=grid[1])
    calls = CountCalls(layer.positional)
    out = layer(x)
    separable = variant in SEPARABLE
    assert layer.uses_factorised_path() == separable
    # the separable path never builds the dense (N_h, T, T) scores
    assert (calls.n == 0) == separable
    torch.testing.assert_close(out, naive_relative_attention(layer, x), **TOL)


def test_paths_selected(variant):
    layer = make_layer(*variant, dropout=0.1)
    assert layer.separable == (variant in SEPARABLE)
    layer.train()
    assert not layer.uses_factorised_path()  # dropout on T×T: dense exact path
    layer.eval()
    assert layer.uses_factorised_path() == (variant in SEPARABLE)
    layer.factorise = False
    assert not layer.uses_factorised_path()


def test_separable_equals_dense_shared_path(variant):
    if variant not in SEPARABLE:
        pytest.skip("not separable")
    layer = make_layer(*variant).eval()
    x = inputs()
    fast = layer(x)
    layer.factorise = False
    torch.testing.assert_close(fast, layer(x), **TOL)


def test_return_attention_gives_full_probabilities(variant):
    layer = make_layer(*variant).eval()
    x = inputs()
    out, probs = layer(x, return_attention=True)
    t = 5 * 6
    assert probs.shape == ((3 if variant[0] == "learned_content" else 1), 3, t, t)
    torch.testing.assert_close(out, layer(x), **TOL)
    torch.testing.assert_close(out, naive_relative_attention(layer, x), **TOL)
    dense = torch.softmax(layer.attention_scores(x), dim=-1)
    torch.testing.assert_close(probs, dense if layer.content else dense[None], rtol=1e-12, atol=1e-12)


def test_kron_probs_is_softmax_of_sum():
    rows, cols = torch.randn(2, 4, 4, dtype=torch.float64), torch.randn(2, 3, 3, dtype=torch.float64)
    dense = (rows[:, :, None, :, None] + cols[:, None, :, None, :]).reshape(2, 12, 12)
    torch.testing.assert_close(
        kron_probs(rows.softmax(-1), cols.softmax(-1)), dense.softmax(-1), rtol=1e-14, atol=1e-14
    )


def test_head_outputs_equal_naive_heads(variant):
    layer = make_layer(*variant).eval()
    x = inputs()
    heads, probs = layer.head_outputs(x)
    assert probs is None or not layer.uses_factorised_path()
    torch.testing.assert_close(heads, naive_attention_heads(layer, x), **TOL)


def _grads(layer, x, fn):
    layer.zero_grad()
    x.grad = None
    y = fn(x)
    (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
    grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    grads["input"] = x.grad.clone()
    return grads


@pytest.mark.parametrize("mode", ["eval", "train_p0"])
def test_fast_path_gradients_equal_dense_and_naive(variant, mode):
    layer = make_layer(*variant, dropout=0.1 if mode == "eval" else 0.0)
    layer.train(mode != "eval")
    x = inputs(grad=True)
    fast = _grads(layer, x, layer)
    layer.factorise = False  # the shared dense path (separable variants)
    dense = _grads(layer, x, lambda v: layer(v, return_attention=True)[0])  # explicit path for content
    naive = _grads(layer, x, lambda v: naive_relative_attention(layer, v))
    assert set(fast) == set(naive)
    for name in fast:
        torch.testing.assert_close(fast[name], dense[name], **TOL, msg=name)
        torch.testing.assert_close(fast[name], naive[name], **TOL, msg=name)
        assert fast[name].abs().sum() > 0, name


def test_positional_dropout_is_one_exact_shared_mask(variant):
    """Training with p > 0: the dense path with one mask per step on (N_h, T, T),
    shared by every image; reproduced exactly from the same RNG state."""
    if variant[0] == "learned_content":
        pytest.skip("content attention draws a mask per image (see next test)")
    layer = make_layer(*variant, dropout=0.5).train()
    x = inputs(b=1).expand(3, -1, -1, -1).contiguous()
    torch.manual_seed(7)
    calls = CountCalls(layer.positional)
    out = layer(x)
    assert calls.n == 1  # dense scores once per forward, for the whole batch
    assert torch.equal(out[0], out[1]) and torch.equal(out[1], out[2])
    torch.manual_seed(7)
    probs = probability_dropout(torch.softmax(layer.positional(5, 6), -1), 0.5, training=True)
    tokens = x.reshape(3, 30, 8)
    heads = torch.einsum("hqk,bkd->bqhd", probs, tokens).reshape(3, 30, -1)
    torch.testing.assert_close(out, layer.out_proj(heads).view(3, 5, 6, -1), **TOL)
    layer.eval()
    assert not torch.allclose(out, layer(x)), "the mask must change the output"


def test_content_dropout_differs_per_image():
    layer = make_layer("learned_content", None, dropout=0.5).train()
    x = inputs(b=1).expand(3, -1, -1, -1).contiguous()
    out = layer(x)
    assert not torch.allclose(out[0], out[1])
    assert torch.isfinite(out).all()


def test_out_dim_and_single_head(variant):
    layer = make_layer(*variant, heads=1, out_dim=5).eval()
    x = inputs()
    out = layer(x)
    assert out.shape == (3, 5, 6, 5)
    torch.testing.assert_close(out, naive_relative_attention(layer, x), **TOL)


def test_float32_fast_path_close_to_naive(variant):
    layer = make_layer(*variant, size=16).float().eval()
    x = torch.randn(2, 16, 16, 8)
    torch.testing.assert_close(layer(x), naive_relative_attention(layer, x), rtol=1e-4, atol=1e-5)


class HostSyncs(torch.utils._python_dispatch.TorchDispatchMode):
    """Records ops that copy a device value to the host (``.item()``, ``bool(t)``,
    data-dependent shapes): on a GPU each would stall the stream every step."""

    SYNCING = {
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::masked_select",
        "aten::unique_dim",
        "aten::_unique2",
    }

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in self.SYNCING:
            self.seen.append(func._schema.name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("training", [False, True])
def test_no_host_synchronisation_in_forward_and_backward(variant, training):
    layer = make_layer(*variant, dropout=0.1).train(training)
    x = inputs(grad=True)
    with HostSyncs() as mode:
        layer(x).sum().backward()
    assert mode.seen == []


@pytest.mark.parametrize("fused", [True, False, None])
@pytest.mark.parametrize("mode", ["eval", "train_p0"])
def test_content_sdpa_and_explicit_paths_equal_naive(fused, mode):
    layer = make_layer("learned_content", None, dropout=0.1 if mode == "eval" else 0.0)
    layer.fused_content = fused
    layer.train(mode != "eval")
    assert layer.uses_fused_content(torch.device("cpu")) == bool(fused)  # None: CUDA only
    assert layer.uses_fused_content(torch.device("cuda")) == (fused is not False)
    x = inputs(grad=True)
    fast = _grads(layer, x, layer)
    naive = _grads(layer, x, lambda v: naive_relative_attention(layer, v))
    for name in fast:
        torch.testing.assert_close(fast[name], naive[name], **TOL, msg=name)
    torch.testing.assert_close(layer(x), naive_relative_attention(layer, x), **TOL)
