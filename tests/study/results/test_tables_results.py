"""Issue 11, analysis side, on tables written by the real trial code (tiny models,
synthetic data): seeds aggregate into one variant whatever bookkeeping columns a
study adds; swept training and model fields are queryable and drawn; figures say
what data they show, use one honest colour scale and mark diffuse heads; Table 1's
MACs follow the model's equations; ``analysis schema`` documents every column."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

import analysis
from analysis import cli
from analysis.concentration import MAX_ENTROPY, MIN_WINDOW_MASS
from analysis.figures import convergence, sweeps, table1
from analysis.figures import heads as heads_fig
from analysis.figures import maps as maps_fig
from analysis.figures.context import Context, Skip
from analysis.schema import COLUMNS
from study.models import ModelConfig
from study.models.cost import model_macs
from study.results.tables import read_table
from study.trial import TrainConfig, train_trial

TINY = dict(hidden=16, layers=1, intermediate=16)


def _train(tables: Path, trials, *, epochs=1) -> None:
    """Trials as a study's trainable writes them: with cell, sample and a Ray id."""
    for cell, (trial_id, model, seed, train) in enumerate(trials):
        cfg = TrainConfig(
            model=ModelConfig(**{**TINY, **model}),
            data="synthetic:120",
            subset=100,
            epochs=epochs,
            batch_size=10,
            lr=0.05,
            warmup=0.1,
            head_images=4,
            seed=seed,
            **train,
        )
        train_trial(
            cfg,
            trial_id=trial_id,
            tables=tables,
            study="t",
            extra_run_fields={
                "cell": cell,
                "sample": 0,
                "ray_trial_id": uuid.uuid4().hex[:8],
                "selection_metric": None,
            },
        )


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Path:
    """3 seeds of a quadratic N_h=9 model and one learned model (1 epoch)."""
    root = tmp_path_factory.mktemp("seeds")
    iso = dict(encoding="quadratic", isotropic=True, num_heads=9)
    _train(
        root / "tables",
        [(f"c{s:03d}-s000", iso, s, {}) for s in range(3)]
        + [("c003-s000", dict(encoding="learned", num_heads=4, pos_dim=8), 0, {})],
    )
    return root


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """momentum {0, 0.9} × intermediate {8, 16}, one cell with a second seed."""
    root = tmp_path_factory.mktemp("sweep")
    quad = dict(encoding="quadratic", num_heads=2)
    trials = [
        (f"m{m}-i{i}", {**quad, "intermediate": i}, 0, {"momentum": m}) for m in (0.0, 0.9) for i in (8, 16)
    ]
    trials.append(("m0.9-i16-s1", {**quad, "intermediate": 16}, 1, {"momentum": 0.9}))
    _train(root / "tables", trials)
    return root


def _ctx(root: Path, out: Path) -> Context:
    from analysis import style

    style.setup()
    return Context(study=analysis.load(root), out=out)


@pytest.mark.slow
def test_three_seeds_are_one_variant_everywhere(seeds, tmp_path):
    runs = read_table(seeds / "tables", "runs")
    assert runs.ray_trial_id.nunique() == 4  # bookkeeping differs trial to trial
    ctx = _ctx(seeds, tmp_path)
    t1 = table1.data(ctx)
    assert len(t1) == 2, t1.model.tolist()
    iso = t1[t1.model.str.contains("quadratic")].iloc[0]
    three = runs[runs.encoding == "quadratic"]
    assert iso.seeds == 3 and iso.seed_values == "0,1,2"
    assert iso.best_test_acc == pytest.approx(three.best_test_acc.mean())
    assert iso.best_test_acc_std == pytest.approx(three.best_test_acc.std())
    assert iso.final_test_acc_std == pytest.approx(three.final_test_acc.std())
    assert iso.n_test == 100 and iso.macs == model_macs(three.iloc[0].to_dict())
    md = table1.markdown(t1, ctx.trials)
    assert "synthetic data; subset 100: train 100 / test 100; 1 epoch; seeds 0–2" in md.splitlines()[0]
    assert "One test image is worth 1 pp" in md
    fig2 = convergence.data(ctx)
    assert set(fig2.model) == set(t1.model) and fig2[fig2.model == iso.model].seeds.max() == 3
    # file names come from the variant, never from Ray ids (figures: <kind>_<slug>)
    slugs = list(ctx.trials["slug"])
    assert not any(r in sl for r in runs.ray_trial_id for sl in slugs), slugs
    assert "sa-quadratic-isotropic-nh9-seed2" in slugs and "sa-learned-nh4-dp8" in slugs
    with pytest.raises(Skip, match=r"found 1: encoding\)"):
        sweeps.data(ctx.study.runs)  # the only configuration axis: no Ray id, no cell, no sample


def _capture(monkeypatch):
    """Keep the figures a module draws instead of writing them (test_analysis opens
    the written files)."""
    figures = []

    def keep(fig, data, out, stem, **_):
        figures.append((fig, data))
        return [out / f"{stem}.png"]

    import analysis.style

    monkeypatch.setattr(analysis.style, "save", keep)  # what Canvas.save calls, for every figure
    return figures


@pytest.mark.slow
def test_maps_one_colour_scale_equal_to_the_data_and_diffuse_heads_marked(seeds, tmp_path, monkeypatch):
    figures = _capture(monkeypatch)
    ctx = _ctx(seeds, tmp_path)
    ctx.per_seed = True  # one figure per trial
    maps_fig.draw(ctx)
    assert len(figures) == 4
    heads = read_table(seeds / "tables", "heads")
    maps = read_table(seeds / "tables", "maps")
    saw_diffuse = saw_concentrated = False
    for fig, d in figures:
        images = [im for ax in fig.axes for im in ax.get_images()]
        assert len({(im.norm.vmin, im.norm.vmax) for im in images}) == 1, "one colour scale per figure"
        bars = [ax for ax in fig.axes if not ax.get_images() and ax.get_ylabel() == "attention probability"]
        assert len(bars) == 1, "a colour bar"
        assert bars[0].get_ylim() == pytest.approx((d.prob.min(), d.prob.max()))
        assert images[0].norm.vmin == pytest.approx(d.prob.min()) and images[0].norm.vmax == pytest.approx(
            d.prob.max()
        )
        trial, epoch = d.trial_id.iloc[0], d.epoch.iloc[0]
        for (layer, head), g in d.groupby(["layer", "head"]):
            key = ["trial_id", "epoch", "layer", "head"]
            m = maps[(maps[key] == [trial, epoch, layer, head]).all(axis=1)]
            h = heads[(heads[key] == [trial, epoch, layer, head]).all(axis=1)]
            mass = float(np.sum(m.probs.iloc[0]))
            want = mass >= MIN_WINDOW_MASS and float(h.entropy.iloc[0]) <= MAX_ENTROPY
            assert g.window_mass.iloc[0] == pytest.approx(mass) and bool(g.concentrated.iloc[0]) == want
            saw_diffuse |= not want
            saw_concentrated |= want
        labels = [ax.get_xlabel() for ax in fig.axes if ax.get_images()]
        assert all(lbl.rstrip(" d").endswith("%") for lbl in labels)
        assert sum(lbl.endswith(" d") for lbl in labels) == int(
            (~d.groupby(["layer", "head"]).concentrated.first()).sum()
        )
        text = " ".join(t.get_text() for t in fig.texts)
        assert "test 100" in text and "diffuse" in text and "7×7" in text
    assert saw_diffuse and saw_concentrated, "the fixture should hold both kinds of heads"


@pytest.mark.slow
def test_heads_figure_draws_only_concentrated_heads_numbered(seeds, tmp_path, monkeypatch):
    figures = _capture(monkeypatch)
    heads_fig.draw(_ctx(seeds, tmp_path))
    learned = [(f, d) for f, d in figures if d.model.iloc[0].startswith("SA learned")]
    ((fig, d),) = learned
    diffuse = d[d.kind == "diffuse"]
    assert len(diffuse) == 4 and d[d.kind == "center"].empty, "learned heads at init are diffuse: no centres"
    assert any("diffuse: 1,2,3,4" in t.get_text() for ax in fig.axes for t in ax.texts)
    fig_q, d_q = next((f, d) for f, d in figures if d.model.iloc[0].startswith("SA quadratic"))
    centres = d_q[d_q.kind == "center"]
    numbers = sorted(t.get_text() for ax in fig_q.axes for t in ax.texts if t.get_text().isdigit())
    assert numbers == sorted(str(h + 1) for h in centres["head"])


@pytest.mark.slow
def test_fig2_axes_and_labels_carry_the_test_size(seeds, tmp_path, monkeypatch):
    figures = _capture(monkeypatch)
    convergence.draw(_ctx(seeds, tmp_path))
    ((fig, d),) = figures
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert lo <= 0.1 and hi - lo >= 0.2, "no zoom onto a few images' difference"
    assert "n_test = 100" in ax.get_ylabel()
    assert any(t.get_text() == "1 test image = 1 pp" for t in ax.texts)
    assert "synthetic data" in ax.get_title() and "seeds 0–2" in ax.get_title()
    lines = [ln for ln in ax.get_lines() if ln.get_label() and not ln.get_label().startswith("_")]
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in lines}) == len(lines) == 2
    assert any("(n=3)" in ln.get_label() for ln in lines)


@pytest.mark.slow
def test_momentum_and_intermediate_sweep_is_queryable_and_drawn(sweep, tmp_path, capsys):
    s = analysis.load(sweep)
    q = s.sql("SELECT momentum, intermediate, count(*) AS n FROM runs GROUP BY ALL ORDER BY ALL")
    assert q.values.tolist() == [[0.0, 8, 1], [0.0, 16, 1], [0.9, 8, 1], [0.9, 16, 2]]
    d, a, b = sweeps.data(s.runs)
    assert {a, b} == {"intermediate", "momentum"}
    runs = s.runs
    cell = d[
        (d[a].astype(str) == ("16" if a == "intermediate" else "0.9"))
        & (d[b].astype(str) == ("0.9" if b == "momentum" else "16"))
    ].iloc[0]
    two = runs[(runs.momentum == 0.9) & (runs.intermediate == 16)]
    assert cell.seeds == 2 and cell.best_test_acc_mean == pytest.approx(two.best_test_acc.mean())
    written = sweeps.draw(_ctx(sweep, tmp_path))
    assert any(p.name == f"heatmap_{a}_x_{b}.png" for p in written)
    labels = set(analysis.variants.variant_labels(runs))
    assert len(labels) == 4 and all("momentum=" in lbl and "intermediate=" in lbl for lbl in labels)
    # JSON keeps numbers numeric: integers (also DuckDB's DECIMAL sums) stay integers
    code = cli.main(
        [
            "query",
            str(sweep),
            "SELECT sum(intermediate) AS s, count(*) AS n, avg(momentum) AS m FROM runs",
            "--format",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out == [{"s": 64, "n": 5, "m": pytest.approx(0.54)}]
    assert isinstance(out[0]["s"], int)


def test_keyword_column_error_says_how_to_quote(sweep, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["query", str(sweep), "SELECT window FROM maps"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert 'write the column in double quotes, "window"' in err
    assert cli.main(["query", str(sweep), 'SELECT DISTINCT "window" FROM maps']) == 0


def test_schema_documents_every_column_of_real_tables(seeds, sweep, capsys):
    for root in (seeds, sweep):
        for table in ("runs", "epochs", "heads", "maps"):
            documented = {c for c, _, _ in COLUMNS[table]}
            actual = set(read_table(root / "tables", table).columns)
            assert actual <= documented, (table, sorted(actual - documented))
    assert cli.main(["schema", "maps"]) == 0
    out = capsys.readouterr().out
    assert "row-major" in out and "0-based" in out and "runs:" not in out
    assert cli.main(["schema"]) == 0
    out = capsys.readouterr().out
    assert "Unix time in seconds" in out and "entropy" in out and "last training step" in out


@pytest.mark.parametrize(
    "model",
    [
        dict(encoding="quadratic", isotropic=True),
        dict(encoding="quadratic", isotropic=False),
        dict(encoding="learned", pos_dim=6),
        dict(encoding="learned_content", pos_dim=16),
    ],
    ids=["quadratic-iso", "quadratic-noniso", "learned", "learned_content"],
)
def test_macs_follow_the_equations_not_the_code_path(model):
    """Dense training-mode forward (attention dropout on: no factorisation) of one
    image, counted by torch, equals the model's MACs up to the positional scores
    (which torch's count includes per pair or not at all, depending on the code)."""
    from torch.utils.flop_counter import FlopCounterMode

    from study.models import build_model

    mc = ModelConfig(hidden=16, layers=2, intermediate=24, num_heads=4, **model)
    cfg = mc.to_dict()
    macs = model_macs(cfg)
    net = build_model(mc).train()
    counter = FlopCounterMode(display=False)
    with counter:
        net(torch.zeros(1, 3, 32, 32))
    dense = counter.get_total_flops() // 2
    t, shifts = 256, 31
    # the code evaluates positional scores per shift, per axis pair or per (query, key)
    # pair: nothing else may differ from the equations' count
    assert abs(macs - dense) <= mc.layers * mc.num_heads * t * t * 2 * mc.pos_dim, (macs, dense)
    assert abs(macs - dense) < 0.02 * macs, (macs, dense)
    if mc.encoding == "quadratic":
        other = ModelConfig(
            hidden=16,
            layers=2,
            intermediate=24,
            num_heads=4,
            encoding="quadratic",
            isotropic=not mc.isotropic,
        )
        diff = abs(model_macs(other.to_dict()) - macs)
        assert diff == mc.layers * 4 * shifts**2 * 2, "iso/non-iso differ only by D_p 3 vs 5"


def test_resnet18_macs_equal_torch_count():
    from torch.utils.flop_counter import FlopCounterMode

    from study.models import build_model

    mc = ModelConfig(arch="resnet18")
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        build_model(mc).eval()(torch.zeros(1, 3, 32, 32))
    assert model_macs(mc.to_dict()) == counter.get_total_flops() // 2 == 555_422_720
    assert math.isclose(model_macs({"arch": "resnet18"}), 555_422_720)
