"""Models of docs/design.md §3-5: shapes, probabilities, equivalences, gradients, counts."""

import pytest
import torch

from study.bench.naive import naive_relative_attention
from study.models import ModelConfig, build_model
from study.models.attention import RelativeSelfAttention
from study.models.positional import GaussianScores, LearnedScores

TINY = dict(hidden=16, layers=2, intermediate=24, num_heads=3)


def tiny_model(encoding, isotropic, **kw):
    pos_dim = 8 if encoding == "learned" else None  # learned_content (query form): pos_dim = hidden
    return build_model(ModelConfig(encoding=encoding, isotropic=isotropic, pos_dim=pos_dim, **{**TINY, **kw}))


def tiny_layer(encoding, isotropic, *, dim=8, heads=3, size=5):
    if encoding == "quadratic":
        pos = GaussianScores(num_heads=heads, isotropic=isotropic)
    else:
        pos = LearnedScores(num_heads=heads, pos_dim=6, max_size=size)
    return RelativeSelfAttention(
        dim=dim, num_heads=heads, positional=pos, content=encoding == "learned_content"
    )


def test_output_and_attention_shapes(variant):
    model = tiny_model(*variant).eval()
    logits, maps = model(torch.randn(4, 3, 32, 32), return_attention=True)
    assert logits.shape == (4, 10)
    assert len(maps) == 2
    batch_dim = 4 if variant[0] == "learned_content" else 1
    for p in maps:
        assert p.shape == (batch_dim, 3, 256, 256)


def test_attention_rows_sum_to_one(variant):
    model = tiny_model(*variant).eval()
    _, maps = model(torch.randn(2, 3, 32, 32), return_attention=True)
    for p in maps:
        assert (p >= 0).all()
        torch.testing.assert_close(p.sum(-1), torch.ones_like(p.sum(-1)), atol=1e-5, rtol=0)


def test_positional_probabilities_do_not_depend_on_image(variant):
    layer = tiny_layer(*variant).eval()
    a = layer.attention_probs(torch.randn(1, 5, 5, 8))
    b = layer.attention_probs(torch.randn(1, 5, 5, 8) * 3 + 1)
    if variant[0] == "learned_content":
        assert not torch.allclose(a, b), "content attention must depend on the image"
    else:
        assert a.shape == (3, 25, 25)
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_shared_matrix_path_equals_naive_per_image(variant):
    layer = tiny_layer(*variant).eval().double()
    x = torch.randn(4, 5, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(layer(x), naive_relative_attention(layer, x), rtol=1e-10, atol=1e-10)


def test_shared_matrix_path_equals_naive_in_full_model(variant):
    model = tiny_model(*variant).eval().double()
    x = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    h = model.embed(model.stem(x))
    for block in model.blocks:
        torch.testing.assert_close(
            block.attention(h), naive_relative_attention(block.attention, h), rtol=1e-9, atol=1e-9
        )
        h = block(h)


@pytest.mark.parametrize("s", [0.3, 1.0, 2.5])
def test_non_isotropic_with_scaled_identity_scores_as_isotropic(s):
    iso = GaussianScores(num_heads=4, isotropic=True).double()
    non = GaussianScores(num_heads=4, isotropic=False).double()
    with torch.no_grad():
        iso.spreads.fill_(s)
        non.spreads.copy_(s * torch.eye(2, dtype=torch.float64).repeat(4, 1, 1))
        non.centers.copy_(iso.centers)
    torch.testing.assert_close(non(6, 7), iso(6, 7), rtol=1e-12, atol=1e-12)


def test_gaussian_score_is_the_quadratic_form():
    g = GaussianScores(num_heads=2, isotropic=False)
    scores = g(4, 4)
    prec = g.inv_covariance()
    # query (1, 2) -> key (3, 0): δ = (2, -2)
    q, k = 1 * 4 + 2, 3 * 4 + 0
    d = torch.tensor([2.0, -2.0])
    for h in range(2):
        diff = d - g.centers[h]
        assert scores[h, q, k].item() == pytest.approx((-0.5 * diff @ prec[h] @ diff).item(), rel=1e-5)


def test_gradients_reach_positional_parameters(variant):
    model = tiny_model(*variant)
    model(torch.randn(2, 3, 32, 32)).logsumexp(-1).sum().backward()
    pos = model.blocks[0].attention.positional
    params = {
        "quadratic": ["centers", "spreads"],
        "learned": [
            "row_embeddings.weight",
            "col_embeddings.weight",
            "head_keys_row.weight",
            "head_keys_col.weight",
        ],
        "learned_content": ["row_embeddings.weight", "col_embeddings.weight"],
    }[variant[0]]
    for name in params:
        grad = pos.get_parameter(name).grad
        assert grad is not None and grad.abs().sum() > 0, name
    if variant[0] == "learned_content":
        assert model.blocks[0].attention.query.weight.grad.abs().sum() > 0


def test_positional_dropout_uses_one_mask_for_the_batch(variant):
    layer = tiny_layer(*variant)
    layer.attention_dropout.p = 0.5
    layer.train()
    x = torch.randn(1, 5, 5, 8).expand(3, -1, -1, -1).contiguous()
    out = layer(x)
    shared = variant[0] != "learned_content"
    assert torch.allclose(out[0], out[1]) == shared
    assert torch.allclose(out[1], out[2]) == shared


def test_weight_decay_exclusions(variant):
    model = tiny_model(*variant)
    names = model.no_weight_decay()
    if variant[0] == "quadratic":
        assert names == {
            f"blocks.{i}.attention.positional.{p}" for i in range(2) for p in ("centers", "spreads")
        }
        for n in names:
            model.get_parameter(n)
    else:
        assert names == set()


def test_resnet18_parameter_count():
    model = build_model(ModelConfig(arch="resnet18"))
    assert sum(p.numel() for p in model.parameters()) == 11_173_962
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_torchvision_imports_and_runs():
    import torchvision
    from torchvision.transforms import v2

    img = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8)
    out = v2.RandomHorizontalFlip(p=1.0)(img)
    assert torch.equal(out, img.flip(-1))
    assert torchvision.__version__


# Parameter counts of the original implementation (epfml/attention-cnn) at the
# paper's configuration, derived from its layer shapes: per layer
# value Linear(N_h*400 -> 400) + dense + 2 LayerNorms + FFN 400-512-400,
# stem Linear(12 -> 400) and classifier Linear(400 -> 10).
_LAYER = 9 * 400 * 400 + 400 + 400 * 400 + 400 + 2 * 800 + 400 * 512 + 512 + 512 * 400 + 400
_EDGES = 12 * 400 + 400 + 400 * 10 + 10
PAPER_COUNTS = {
    ("quadratic", True): 6 * (_LAYER + 9 * 2 + 9) + _EDGES,
    ("quadratic", False): 6 * (_LAYER + 9 * 2 + 9 * 4) + _EDGES,
    ("learned", None): 6 * (_LAYER + 2 * 31 * 400 + 2 * 400 * 9) + _EDGES,
    # the paper's Table 1 model: query positional score, two 31 x 200 tables, no head keys
    ("learned_content", None): 6 * (_LAYER + 2 * 31 * 200 + 2 * (400 * 3600 + 3600)) + _EDGES,
}
# learned_content with positional_score head (the original's first version)
HEAD_FORM_COUNT = 6 * (_LAYER + 2 * 31 * 400 + 2 * 400 * 9 + 2 * (400 * 3600 + 3600)) + _EDGES


def test_paper_parameter_counts(variant):
    encoding, isotropic = variant
    cfg = ModelConfig(
        encoding=encoding, isotropic=isotropic, pos_dim=None if encoding == "quadratic" else 400
    )
    model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == PAPER_COUNTS[variant]
    assert PAPER_COUNTS[("quadratic", True)] == 12_086_844
    assert PAPER_COUNTS[("learned_content", None)] == 29_484_282


def test_head_form_content_parameter_count():
    model = build_model(ModelConfig(encoding="learned_content", pos_dim=400, positional_score="head"))
    assert sum(p.numel() for p in model.parameters()) == HEAD_FORM_COUNT == 29_601_882


def test_space_to_depth_matches_original_channel_order():
    from study.models.blocks import SpaceToDepth

    x = torch.arange(2 * 3 * 4 * 4).float().view(2, 3, 4, 4)
    y = SpaceToDepth(block=2)(x)
    assert y.shape == (2, 2, 2, 12)
    # feature index = row_offset * (2 * C) + col_offset * C + channel
    xl = x.permute(0, 2, 3, 1)
    assert y[1, 1, 0, 2 * 3 + 1 * 3 + 2] == xl[1, 3, 1, 2]
