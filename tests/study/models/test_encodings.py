"""The encoding registry (``study.models.encodings``): every encoding builds, trains and
validates through one path; GPSA's convolutional initialisation is the paper's quadratic
construction; configurations refuse values that do not apply."""

from __future__ import annotations

import math

import pytest
import torch

from study.models import ENCODING_MODELS, ConfigError, ModelConfig, build_model, model_name
from study.models.attention import RelativeSelfAttention
from study.models.cost import model_macs
from study.models.encoded import EncodedAttention
from study.models.encodings import PAPER_ENCODINGS, REGISTRY, encoding_fields
from study.models.positional import GaussianScores
from study.theory.theorem import conv_as_attention, lattice_offsets, mhsa_from_conv

TINY = dict(hidden=16, layers=2, intermediate=24, num_heads=4)


def tiny(variant: dict, **kw) -> torch.nn.Module:
    over = {**TINY, **kw, **variant}
    if over["encoding"] == "learned":
        over.setdefault("pos_dim", 8)
    return build_model(ModelConfig(**over))


def test_every_encoding_is_one_registered_file():
    import importlib

    for name, enc in REGISTRY.items():
        module = importlib.import_module(f"study.models.encodings.{name}")
        assert module.ENCODING is enc and enc.name == name and enc.variants and enc.equation


def test_forward_backward_and_probabilities_of_every_encoding(encoding_variant):
    model = tiny(encoding_variant).train()
    x = torch.randn(3, 3, 32, 32)
    logits, maps = model(x, return_attention=True)
    logits.sum().backward()
    assert logits.shape == (3, 10) and len(maps) == 2
    spec = REGISTRY[encoding_variant["encoding"]]
    for p in maps:
        assert p.shape == ((3 if spec.content else 1), 4, 256, 256)
        torch.testing.assert_close(p.sum(-1), torch.ones_like(p.sum(-1)), atol=1e-5, rtol=0)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_fused_path_equals_explicit_path(encoding_variant):
    """``scaled_dot_product_attention`` (CUDA's default) equals the explicit probabilities,
    forward and gradients, in float64, for every encoding that has it."""
    model = tiny(encoding_variant).double().eval()
    layers = [b.attention for b in model.blocks]
    if not isinstance(layers[0], EncodedAttention) or not hasattr(layers[0].encoding, "sdpa_inputs"):
        pytest.skip(
            "no fused path: the paper's layer has its own tests (test_fast_paths); GPSA mixes two softmaxes"
        )
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    outs, grads = [], []
    for fused in (False, True):
        for layer in layers:
            layer.fused = fused
        model.zero_grad()
        y = model(x)
        y.square().sum().backward()
        outs.append(y)
        grads.append([p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-10)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_scores_depend_on_the_shift_only():
    """RoPE's q̃·k̃ and the relative bias depend on δ = key − query, not on positions:
    two query/key pairs with the same shift get the same score for the same vectors."""
    for variant in (
        {"encoding": "rope2d", "rope_mode": "axial"},
        {"encoding": "rope2d", "rope_mode": "mixed"},
        {"encoding": "relative_bias"},
    ):
        layer = tiny(variant).double().blocks[0].attention
        q = torch.randn(1, 4, 1, 16, dtype=torch.float64).expand(1, 4, 256, 16)
        k = torch.randn(1, 4, 1, 16, dtype=torch.float64).expand(1, 4, 256, 16)
        q2, k2, bias = layer.encoding.sdpa_inputs(layer, q, k, 16, 16)
        s = q2 @ k2.transpose(-1, -2) + (0 if bias is None else bias)
        tok = lambda r, c: r * 16 + c  # noqa: E731
        # δ = (+2, −3) from two different queries (mixed RoPE's angles are float32, as timm's)
        tol = 1e-5 if variant.get("rope_mode") == "mixed" else 1e-12
        torch.testing.assert_close(
            s[0, :, tok(1, 5), tok(3, 2)], s[0, :, tok(9, 12), tok(11, 9)], rtol=0, atol=tol
        )
        assert not torch.allclose(s[0, :, tok(1, 5), tok(3, 2)], s[0, :, tok(1, 5), tok(2, 3)])


# ------------------------------------------------------------ GPSA ↔ Lemma 1/2
def gpsa_at_init(alpha: float, *, dim=5, heads=9, grid=6) -> EncodedAttention:
    torch.manual_seed(0)
    layer = (
        EncodedAttention(
            dim=dim, num_heads=heads, encoding=REGISTRY["gpsa"], grid=grid, locality_strength=alpha
        )
        .double()
        .eval()
    )
    with torch.no_grad():
        layer.positional.gate.fill_(40.0)  # σ(40) = 1 − 4e-18: fully positional
    return layer


def test_gpsa_local_init_is_the_quadratic_isotropic_construction():
    """At ConViT's convolutional initialisation with the gate fully positional, GPSA's heads
    are the paper's isotropic quadratic heads centred on the √N_h × √N_h lattice with
    s_h² = 2α (v_hᵀ r_δ = −α‖δ − Δ_h‖² + const): the layer equals RelativeSelfAttention so
    built, to float64 round-off (1e-12), for a locality strength of 1 (ConViT's) and 46."""
    for alpha in (1.0, 46.0):
        layer = gpsa_at_init(alpha)
        pos = GaussianScores(num_heads=9, isotropic=True)
        ref = RelativeSelfAttention(dim=5, num_heads=9, positional=pos).double().eval()
        with torch.no_grad():
            pos.centers.copy_(lattice_offsets(3))
            pos.spreads.fill_(math.sqrt(2 * alpha))
            ref.out_proj.load_state_dict(layer.out_proj.state_dict())
        x = torch.randn(2, 6, 6, 5, dtype=torch.float64)
        torch.testing.assert_close(layer(x), ref(x), rtol=0, atol=1e-12)


def test_gpsa_local_init_with_large_alpha_is_a_convolution():
    """Lemma 1 through GPSA: with α = 46 (one-hot softmaxes) and out_proj set from a 3×3
    conv's kernel, the layer computes the convolution on a zero-padded input (1e-12)."""
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(5, 7, 3, padding=1).double()
    ref = mhsa_from_conv(conv)  # the quadratic construction, heads in the same lattice order
    layer = (
        EncodedAttention(
            dim=5, num_heads=9, encoding=REGISTRY["gpsa"], grid=8, out_dim=7, locality_strength=46.0
        )
        .double()
        .eval()
    )
    with torch.no_grad():
        layer.positional.gate.fill_(40.0)
        layer.out_proj.load_state_dict(ref.out_proj.state_dict())
    x = torch.randn(2, 5, 6, 6, dtype=torch.float64)
    torch.testing.assert_close(conv_as_attention(layer, x, padding=1), conv(x), rtol=0, atol=1e-12)


def test_gpsa_gate_mixes_content_and_positional_attention():
    layer = gpsa_at_init(1.0)
    x = torch.randn(2, 6, 6, 5, dtype=torch.float64)
    positional = layer.attention_probs(x)
    with torch.no_grad():
        layer.positional.gate.fill_(-40.0)  # fully content
    content = layer.attention_probs(x)
    with torch.no_grad():
        layer.positional.gate.fill_(0.0)  # σ(0) = ½
    half = layer.attention_probs(x)
    torch.testing.assert_close(half, (positional + content) / 2, rtol=0, atol=1e-12)
    assert not torch.allclose(positional, content)
    assert layer.head_columns()["gate"].tolist() == [0.5] * 9


def test_head_statistics_record_gpsa_gates_and_null_elsewhere(encoding_variant):
    from study.trial.headstats import collect_head_stats

    model = tiny(encoding_variant).eval()
    rows, _ = collect_head_stats(model, torch.randn(4, 3, 32, 32), radius=2)
    gates = [r["gate"] for r in rows]
    assert len(rows) == 2 * 4
    if encoding_variant["encoding"] == "gpsa":
        assert gates == pytest.approx([1 / (1 + math.exp(-1.0))] * 8)  # σ(1), ConViT's gate init
    else:
        assert all(math.isnan(g) for g in gates)


# ---------------------------------------------------------------- configs
def test_paper_size_parameter_counts_follow_the_equations():
    """Per layer beyond the shared content layer (two Linear(400 → 3600) + Linear(3600 → 400)):
    GPSA 5·N_h (v_h ∈ R³, b_h, λ_h), relative bias 31²·N_h, RoPE mixed D·N_h (f_x, f_y ∈
    R^{D/2} per head), axial none; so e.g. relative bias − axial = 6·961·9."""
    n = {k: sum(p.numel() for p in build_model(c).parameters()) for k, c in ENCODING_MODELS.items()}
    base = n["sa_rope2d_axial"]
    assert n["sa_gpsa"] - base == 6 * 5 * 9
    assert n["sa_relative_bias"] - base == 6 * 31 * 31 * 9
    assert n["sa_rope2d_mixed"] - base == 6 * 400 * 9
    assert base == 29_409_882


def test_macs_count_each_encodings_positional_scores():
    base = model_macs(ENCODING_MODELS["sa_relative_bias"].to_dict())  # a table look-up costs nothing
    t, d, h, s = 256, 400, 9, 31
    assert model_macs(ENCODING_MODELS["sa_gpsa"].to_dict()) - base == 6 * h * s * s * 3
    assert model_macs(ENCODING_MODELS["sa_rope2d_axial"].to_dict()) - base == 6 * (
        2 * h * t * d // 2 * 4 + t * d // 2
    )
    assert model_macs(ENCODING_MODELS["sa_rope2d_mixed"].to_dict()) - base == 6 * (
        2 * h * t * d // 2 * 4 + h * t * d
    )


@pytest.mark.parametrize(
    "kw,field,message",
    [
        ({"encoding": "gpsa", "num_heads": 8}, "num_heads", "must be a square"),
        ({"encoding": "gpsa", "pos_dim": 5}, "pos_dim", "must be one of 3, got 5"),
        ({"encoding": "gpsa", "locality_strength": 0.0}, "locality_strength", "must be a number from"),
        (
            {"encoding": "gpsa", "locality_strength": float("inf")},
            "locality_strength",
            "must be a number from",
        ),
        ({"encoding": "gpsa", "locality_strength": "strong"}, "locality_strength", "must be a number from"),
        ({"encoding": "gpsa", "isotropic": False}, "isotropic", "applies only to encoding quadratic"),
        ({"encoding": "rope2d", "rope_mode": "spiral"}, "rope_mode", "axial, mixed"),
        ({"encoding": "rope2d", "rope_theta": -1.0}, "rope_theta", "must be a number from"),
        ({"encoding": "rope2d", "hidden": 30}, "hidden", "multiple of 4"),
        ({"encoding": "rope2d", "pos_dim": 8}, "pos_dim", "applies only to encoding"),
        ({"encoding": "relative_bias", "rope_mode": "axial"}, "rope_mode", "applies only to encoding rope2d"),
        (
            {"encoding": "quadratic", "locality_strength": 2.0},
            "locality_strength",
            "applies only to encoding gpsa",
        ),
        ({"encoding": "learned", "positional_score": "query"}, "positional_score", "needs content attention"),
    ],
)
def test_bad_values_are_refused_naming_the_field(kw, field, message):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**kw)
    assert e.value.field == field and message in e.value.message


def test_fields_of_other_encodings_are_null_and_defaults_filled():
    c = ModelConfig(encoding="rope2d")
    assert (c.rope_mode, c.rope_theta, c.isotropic, c.pos_dim, c.locality_strength) == (
        "axial",
        100.0,
        None,
        None,
        None,
    )
    assert ModelConfig(encoding="rope2d", rope_mode="mixed").rope_theta == 10.0
    g = ModelConfig(encoding="gpsa")
    assert (g.pos_dim, g.locality_strength, g.rope_mode) == (3, 1.0, None)
    assert set(encoding_fields()) >= {
        "isotropic",
        "pos_dim",
        "positional_score",
        "locality_strength",
        "rope_mode",
    }
    assert model_name(ModelConfig(encoding="rope2d", rope_mode="mixed")) == "SA RoPE mixed (N_h=9)"
    assert set(PAPER_ENCODINGS) < set(REGISTRY)


@pytest.mark.parametrize("layout", ["paper", "timm"])
def test_layer_equals_its_papers_formulation(encoding_variant, layout):
    """Each of today's layers equals the plain-einsum formulation of its paper's code
    (``study bench``'s einsum reference, ``reference_probs``), forward and input gradients,
    float64, in both head layouts."""
    spec = REGISTRY[encoding_variant["encoding"]]
    if encoding_variant["encoding"] in PAPER_ENCODINGS:
        pytest.skip("the paper's layer is compared with its references in test_fast_paths")
    from study.bench.einsum_ref import encoded_reference_heads

    cfg = ModelConfig(**{**TINY, "num_heads": 4, **encoding_variant})
    timm_layout = {"head_dim": 4, "value": True} if layout == "timm" else {}
    torch.manual_seed(0)
    layer = (
        EncodedAttention(dim=16, num_heads=4, encoding=spec, grid=5, **timm_layout, **spec.options(cfg))
        .double()
        .eval()
    )
    x1 = torch.randn(2, 5, 5, 16, dtype=torch.float64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    ours, _ = layer.head_outputs(x1)
    ref = encoded_reference_heads(layer, x2, dropout=False)
    tol = 1e-6 if cfg.rope_mode == "mixed" else 1e-10  # float32 angles: complex polar vs cos/sin
    torch.testing.assert_close(ours, ref, rtol=0, atol=tol)
    ours.square().sum().backward()
    ref.square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=0, atol=tol * 10)


def test_macs_of_runs_rows_read_by_pandas():
    """A runs table mixing encodings reads integer columns with nulls as floats
    (pos_dim 32.0) and booleans as numpy scalars: the cost model takes them as they come."""
    import numpy as np

    row = {
        "arch": "sa",
        "encoding": "learned",
        "pos_dim": 32.0,
        "num_heads": np.int64(9),
        "hidden": 32.0,
        "layers": 4.0,
        "intermediate": 64.0,
        "isotropic": float("nan"),
        "rope_mode": None,
        "lr": 0.1,
    }
    cfg = ModelConfig(encoding="learned", pos_dim=32, num_heads=9, hidden=32, layers=4, intermediate=64)
    assert model_macs(row) == model_macs(cfg.to_dict())


@pytest.mark.parametrize(
    "variant",
    [
        {"encoding": "gpsa"},
        {"encoding": "relative_bias"},
        {"encoding": "rope2d", "rope_mode": "axial"},
        {"encoding": "rope2d", "rope_mode": "mixed"},
    ],
    ids=["gpsa", "relative_bias", "rope2d-axial", "rope2d-mixed"],
)
def test_todays_macs_follow_the_equations_not_the_code_path(variant):
    """torch's count of a forward equals the model's MACs but for the positional scores,
    which the code evaluates per (query, key) pair (GPSA's v_hᵀ r_δ) or element-wise (RoPE's
    rotations, the bias look-up) where the equations count them once per shift or as 2×2
    products."""
    from torch.utils.flop_counter import FlopCounterMode

    mc = ModelConfig(hidden=16, layers=2, intermediate=24, num_heads=4, **variant)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        build_model(mc).eval()(torch.zeros(1, 3, 32, 32))
    counted = counter.get_total_flops() // 2
    positional = mc.layers * mc.spec.positional_macs(mc, tokens=256, side=16)
    t = 256
    if variant["encoding"] == "gpsa":  # v_hᵀ r_δ + b_h for every pair instead of every shift
        assert counted - (model_macs(mc.to_dict()) - positional) == mc.layers * mc.num_heads * t * t * 3
    else:  # nothing of the positional part is a matrix product torch counts
        assert counted == model_macs(mc.to_dict()) - positional


def test_macs_of_a_row_holding_another_encodings_field():
    """A table row may carry a value of a field its encoding does not have (an old table's
    isotropic of a learned model): the cost model leaves it out instead of refusing the row."""
    row = {"encoding": "learned", "isotropic": False, "pos_dim": 8, "hidden": 16, "layers": 1, "num_heads": 2}
    assert model_macs(row) == model_macs(
        ModelConfig(encoding="learned", pos_dim=8, hidden=16, layers=1, num_heads=2).to_dict()
    )


def _number_fields():
    """(encoding, field) for every number field every encoding declares."""
    fields = encoding_fields()
    return [
        (m.name(), fields[k])
        for m in ModelConfig.members.values()
        for k in m.model_fields
        if k in fields and fields[k].type in (int, float)
    ]


def _field_bounds(f):
    from study import limits

    return f.bounds if f.type is float else (1, limits.MAX_MODEL_FIELD[f.name])


def _out_of_bounds(f):
    low, high = _field_bounds(f)
    if f.type is int:  # MAX_MODEL_FIELD's, declared by the field too
        return [low - 1, high + 1]
    return [low / 2, high * 2, 5e-324, 1e308, float("nan"), float("inf"), -float("inf")]


@pytest.mark.parametrize("encoding,field", _number_fields(), ids=lambda v: getattr(v, "name", v))
def test_every_encoding_number_field_declares_the_bounds_its_equation_carries(encoding, field):
    """Every float field of every encoding declares a finite closed range; its ends are
    accepted (ConfigError only for a reason other than the bound), values beyond refused."""
    low, high = _field_bounds(field)
    assert 0 < low < high < float("inf")
    for v in _out_of_bounds(field):
        with pytest.raises(ConfigError) as e:
            ModelConfig(encoding=encoding, **{field.name: v})
        assert e.value.field == field.name, (v, e.value.message)
    for v in (low, high):
        try:
            ModelConfig(encoding=encoding, **{field.name: v})
        except ConfigError as e:  # pos_dim fixed by the encoding (quadratic: 2 or 3, gpsa: 3)
            assert field.type is int and "must be a number from" not in e.message, e.message


@pytest.mark.parametrize(
    "encoding,field",
    [(e, f) for e, f in _number_fields() if f.type is float],
    ids=lambda v: getattr(v, "name", v),
)
def test_encoding_fields_beyond_their_bounds_are_refused_from_flags_and_study_files(
    tmp_path, encoding, field
):
    """`study models --FIELD` and a study file's model.FIELD: one line, exit 2, before anything
    starts (1e308 for GPSA's α was accepted, and the trial diverged after writing its tables)."""
    import yaml

    from tests.helpers import run_cli

    flag = "--" + field.name.replace("_", "-")
    low, high = field.bounds
    for v in (repr(high * 10), repr(low / 10), "1e308", "5e-324", "nan"):
        r = run_cli(tmp_path, "models", "--encoding", encoding, flag, v, timeout=120)
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, (v, r.stderr)
        assert f"{flag}: must be a number from" in r.stderr, r.stderr
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "data": "synthetic:100",
                "epochs": 1,
                "batch_size": 10,
                "model": {
                    "encoding": encoding,
                    "hidden": 16,
                    "layers": 1,
                    "intermediate": 16,
                    "num_heads": 1,
                    field.name: high * 10,
                },
            }
        )
    )
    r = run_cli(tmp_path, "validate", str(spec), timeout=120)
    assert (
        r.returncode == 2
        and r.stderr.count("\n") == 1
        and f"model.{field.name}: must be a number from" in r.stderr
    ), r.stderr
