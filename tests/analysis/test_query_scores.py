"""The paper's learned + content model (``positional_score: query``, docs/design.md §4):
score_h = [q_h[:D/2]·r_row(δ1) + q_h[D/2:]·r_col(δ2) + q_h·k_h] / √D, checked against
a naive per-pair form of the equation in float64, with the head form (w·r + q·k/√D)
alongside; parameter counts, gradients, configuration rules."""

import math

import pytest
import torch

from study.bench.naive import naive_attention_heads, naive_relative_attention
from study.models import ConfigError, ModelConfig, build_model
from study.models.attention import RelativeSelfAttention
from study.models.positional import LearnedScores, QueryScores

TOL = dict(rtol=1e-9, atol=1e-9)
FORMS = ["query", "head"]


def make_layer(form, *, dim=8, heads=3, size=6, dropout=0.0, fused=False):
    if form == "query":
        pos = QueryScores(num_heads=heads, pos_dim=dim, max_size=size)
    else:
        pos = LearnedScores(num_heads=heads, pos_dim=5, max_size=size)
    layer = RelativeSelfAttention(
        dim=dim, num_heads=heads, positional=pos, content=True, attention_dropout=dropout
    )
    layer.fused_content = fused
    return layer.double()


def equation_scores(layer, x):
    """score_h(q, k) = [q_h[:D/2]·r_row(k_r − q_r) + q_h[D/2:]·r_col(k_c − q_c) + q_h·k_h] / √D,
    one (query, key) pair at a time."""
    b, h, w, d = x.shape
    n, s = layer.num_heads, layer.positional.max_size
    q = layer.query(x).view(b, h, w, n, d)
    k = layer.key(x).view(b, h, w, n, d)
    rows, cols = layer.positional.row_embeddings.weight, layer.positional.col_embeddings.weight
    out = torch.empty(b, n, h * w, h * w, dtype=x.dtype)
    for qr in range(h):
        for qc in range(w):
            for kr in range(h):
                for kc in range(w):
                    qq, kk = q[:, qr, qc], k[:, kr, kc]  # (B, N_h, D)
                    pos = (
                        qq[..., : d // 2] @ rows[kr - qr + s - 1] + qq[..., d // 2 :] @ cols[kc - qc + s - 1]
                    )
                    out[:, :, qr * w + qc, kr * w + kc] = (pos + (qq * kk).sum(-1)) / math.sqrt(d)
    return out


def test_query_scores_equal_the_equation_pair_by_pair():
    layer = make_layer("query", size=4)
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    torch.testing.assert_close(layer.attention_scores(x), equation_scores(layer, x), **TOL)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("grid", [(5, 6), (6, 6)])
def test_content_paths_equal_naive_float64(form, fused, grid):
    layer = make_layer(form, fused=fused)
    x = torch.randn(3, *grid, 8, dtype=torch.float64, requires_grad=True)
    out = layer(x)
    torch.testing.assert_close(out, naive_relative_attention(layer, x), **TOL)
    heads, _ = layer.head_outputs(x)
    torch.testing.assert_close(heads, naive_attention_heads(layer, x), **TOL)
    g = torch.randn_like(out)
    fast = torch.autograd.grad(out, [x, *layer.parameters()], g)
    naive = torch.autograd.grad(naive_relative_attention(layer, x), [x, *layer.parameters()], g)
    for a, b in zip(fast, naive):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("form", FORMS)
def test_returned_probabilities_are_the_softmax_of_the_equation(form):
    layer = make_layer(form, size=4)
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    _, probs = layer(x, return_attention=True)
    if form == "query":
        torch.testing.assert_close(probs, torch.softmax(equation_scores(layer, x), -1), **TOL)
    torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1], dtype=x.dtype), **TOL)


def test_no_head_keys_and_half_width_tables():
    pos = (
        build_model(ModelConfig(encoding="learned_content", hidden=16, layers=1, num_heads=3))
        .blocks[0]
        .attention.positional
    )
    assert isinstance(pos, QueryScores)
    assert {n for n, _ in pos.named_parameters()} == {"row_embeddings.weight", "col_embeddings.weight"}
    assert pos.row_embeddings.weight.shape == pos.col_embeddings.weight.shape == (31, 8)


@pytest.mark.parametrize("form,count", [("query", 29_484_282), ("head", 29_601_882)])
def test_paper_configuration_parameter_counts(form, count):
    cfg = ModelConfig(encoding="learned_content", num_heads=9, positional_score=form)
    assert cfg.pos_dim == 400
    assert sum(p.numel() for p in build_model(cfg).parameters()) == count


@pytest.mark.parametrize("form", FORMS)
def test_gradients_reach_both_tables(form):
    cfg = ModelConfig(
        encoding="learned_content", hidden=16, layers=2, intermediate=16, num_heads=3, positional_score=form
    )
    model = build_model(cfg)
    model(torch.randn(2, 3, 32, 32)).logsumexp(-1).sum().backward()
    for block in model.blocks:
        pos = block.attention.positional
        for table in (pos.row_embeddings, pos.col_embeddings):
            assert table.weight.grad is not None and table.weight.grad.abs().sum() > 0


def test_default_form_per_encoding():
    assert ModelConfig(encoding="learned_content").positional_score == "query"
    assert ModelConfig(encoding="learned", pos_dim=16).positional_score == "head"
    assert ModelConfig(encoding="quadratic").positional_score is None
    assert ModelConfig(arch="resnet18").positional_score is None


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(encoding="learned_content", pos_dim=64), "pos_dim"),  # query form: pos_dim = hidden
        (dict(encoding="learned_content", hidden=15, pos_dim=None), "hidden"),  # halves
        (dict(encoding="learned", positional_score="query"), "positional_score"),
        (dict(encoding="quadratic", positional_score="head"), "positional_score"),
        (dict(encoding="learned_content", positional_score="key"), "positional_score"),
    ],
)
def test_invalid_forms_name_the_field(kw, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**kw)
    assert e.value.field == field


def test_head_form_takes_any_pos_dim():
    cfg = ModelConfig(encoding="learned_content", pos_dim=16, positional_score="head")
    assert (cfg.pos_dim, cfg.positional_score) == (16, "head")


@pytest.mark.parametrize("form", FORMS)
def test_einsum_reference_equals_naive_content(form):
    from study.bench.einsum_ref import einsum_relative_attention

    layer = make_layer(form).eval()
    x = torch.randn(2, 5, 6, 8, dtype=torch.float64)
    torch.testing.assert_close(einsum_relative_attention(layer, x), naive_relative_attention(layer, x), **TOL)


def test_einsum_reference_equals_naive_positional(variant):
    from study.bench.einsum_ref import einsum_relative_attention

    enc, iso = variant
    cfg = ModelConfig(
        encoding=enc, isotropic=iso, hidden=8, layers=1, num_heads=3, pos_dim=6 if enc == "learned" else None
    )
    layer = build_model(cfg).double().eval().blocks[0].attention
    x = torch.randn(2, 16, 16, 8, dtype=torch.float64)
    torch.testing.assert_close(einsum_relative_attention(layer, x), naive_relative_attention(layer, x), **TOL)


@pytest.mark.slow
def test_bench_times_the_einsum_reference_beside_the_training_path():
    from study.bench.runner import default_options, run_bench

    opts = default_options("cpu", batch=1, steps=1, targets=("attention:sa_learned_content_head",))
    a = run_bench(opts)["attention"][0]
    assert a["einsum"]["path"].startswith("einsum reference")
    assert a["train_speedup_vs_einsum"] == pytest.approx(
        a["train"]["images_per_s"] / a["einsum"]["images_per_s"]
    )
