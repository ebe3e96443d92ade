"""Issue 21 §2: locality figures across encodings (attention distance vs depth,
locality over training, gates, head centres), on tables written with the project's
own ``TableWriter`` from fabricated rows: no training, so the expected values are
known exactly.  The encodings carry new names ("gpsa", "relative_bias", "rope2d")
beside the paper's; ``analysis`` must draw them from table columns alone.  Every
assertion is on the CSV of exactly the plotted data."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analysis
from analysis import cli, style
from analysis.contours import window_contours
from analysis.figures import distance, gates, locality
from analysis.figures import heads as heads_fig
from analysis.figures.context import Context, Skip
from analysis.figures.pooled import CONV3_DISTANCE
from analysis.variants import trial_table, variant_order
from study.results.tables import TableWriter, read_table

LAYERS, EPOCHS = 3, 3
# (trial_id, name, encoding, num_heads, seed, gate rule)
#   gate rule: "value" a float gate per head, "null" the column present but null, None no column at all
TRIALS = [
    ("q-s0", "SA quadratic isotropic (N_h=9)", "quadratic", 9, 0, None),
    ("q-s1", "SA quadratic isotropic (N_h=9)", "quadratic", 9, 1, None),
    ("l-s0", "SA learned (N_h=4, D_p=8)", "learned", 4, 0, None),
    ("g-s0", "SA gpsa (N_h=9)", "gpsa", 9, 0, "value"),
    ("g-s1", "SA gpsa (N_h=9)", "gpsa", 9, 1, "value"),
    ("g-s2", "SA gpsa (N_h=9)", "gpsa", 9, 2, "value"),
    ("b-s0", "SA relative_bias (N_h=4)", "relative_bias", 4, 0, "null"),
    ("r-s0", "SA rope2d (N_h=4)", "rope2d", 4, 0, None),
    ("res", "ResNet18", None, None, 0, None),
]
NAN = float("nan")


def mean_distance(tid: str, epoch: int, layer: int, head: int) -> float:
    """A distinct, known canvas E‖δ‖ per row."""
    k = sum(map(ord, tid))
    return 0.5 + 0.3 * layer + 0.1 * head + 0.05 * epoch + 0.01 * (k % 7)


def attention_distance(tid: str, epoch: int, layer: int, head: int) -> float:
    """A distinct, known grid attention distance per row, never equal to the canvas one."""
    return 3.0 + mean_distance(tid, epoch, layer, head)


def gate_value(tid: str, epoch: int, layer: int, head: int) -> float:
    return 1.0 / (1.0 + math.exp(-(2.0 - 0.8 * epoch * (layer + 1) / 3 + 0.1 * head - 0.05 * int(tid[-1]))))


def head_row(tid, enc, n_heads, gate_rule, epoch, layer, head, *, grid_metric=True) -> dict:
    quadratic = enc in ("quadratic", "gpsa")  # the fabricated GPSA heads carry Σ⁻¹ of their positional part
    cx, cy = float(head % 3 - 1), float(head // 3 - 1)
    row = {
        "layer": layer,
        "head": head,
        "center_x": cx,
        "center_y": cy,
        "cov_xx": 0.3,
        "cov_xy": 0.0,
        "cov_yy": 0.3,
        "entropy": 1.0 if head % 2 == 0 or enc != "rope2d" else 5.0,  # rope2d: odd heads diffuse
        "mean_distance": mean_distance(tid, epoch, layer, head),
        "max_prob": 0.6,
        "param_center_x": cx if quadratic else NAN,
        "param_center_y": cy if quadratic else NAN,
        "param_inv_cov_xx": 4.0 if quadratic else NAN,
        "param_inv_cov_xy": 0.0 if quadratic else NAN,
        "param_inv_cov_yy": 4.0 if quadratic else NAN,
    }
    if grid_metric:
        row["attention_distance"] = attention_distance(tid, epoch, layer, head)
        row["attention_entropy"] = 2.0
    if gate_rule == "value":
        row["gate"] = gate_value(tid, epoch, layer, head)
    elif gate_rule == "null":
        row["gate"] = None
    return row


def map_row(layer, head, cx, cy) -> dict:
    side = 15
    probs = np.zeros((side, side))
    probs[int(cy) + 7, int(cx) + 7] = 0.6
    probs[7, 7] += 0.2
    return {"layer": layer, "head": head, "window": side, "probs": probs.ravel().tolist()}


def write_study(root: Path, trials=TRIALS, *, epochs=EPOCHS, grid_metric=True) -> Path:
    """Tables of ``trials``; ``grid_metric``: with ``heads.attention_distance`` and the
    untrained model's rows (epoch −1), as trials record them now; without: a study
    written before either existed."""
    tables = root / "tables"
    for cell, (tid, name, enc, n_heads, seed, gate_rule) in enumerate(trials):
        w = TableWriter(tables, trial_id=tid)
        resnet = enc is None
        run = {
            "study": "loc",
            "name": name,
            "arch": "resnet18" if resnet else "sa",
            "encoding": enc,
            "num_heads": n_heads,
            "pos_dim": None,
            "seed": seed,
            "epochs": epochs,
            "epochs_done": epochs,
            "status": "finished",
            "best_test_acc": 0.3,
            "final_test_acc": 0.3,
            "n_params": 1000,
            "flops": 2000,
            "data": "synthetic:100",
            "subset": 100,
            "n_train": 100,
            "n_val": 0,
            "n_test": 100,
            "cell": cell,
            "hidden": 16,
            "layers": LAYERS,
            "head_images": 8,
            "image_size": 32,
            "downsample": 2,
        }
        for epoch in range(-1 if grid_metric else 0, epochs):
            if epoch >= 0:
                w.rows("epochs", epoch, [{"test_acc": 0.1 * (epoch + 1), "train_loss": 1.0}])
            if not resnet:
                rows = [
                    head_row(tid, enc, n_heads, gate_rule, epoch, layer, head, grid_metric=grid_metric)
                    for layer in range(LAYERS)
                    for head in range(n_heads)
                ]
                w.rows("heads", epoch, rows)
                w.rows(
                    "maps",
                    epoch,
                    [map_row(r["layer"], r["head"], r["center_x"], r["center_y"]) for r in rows],
                )
            w.run(run)
        w.close()
    return root


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    return write_study(tmp_path_factory.mktemp("loc") / "loc")


@pytest.fixture(scope="module")
def drawn(study_dir, tmp_path_factory):
    """`analysis figures --no-pdf` of the fabricated study: (output folder, stdout lines)."""
    out = tmp_path_factory.mktemp("figs")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["figures", str(study_dir), "--out", str(out), "--no-pdf"])
    assert rc == 0
    return out, buf.getvalue().splitlines()


def _tables(study_dir):
    runs = read_table(study_dir / "tables", "runs")
    heads = read_table(study_dir / "tables", "heads").merge(runs[["trial_id", "name", "seed"]], on="trial_id")
    return runs, heads


@pytest.mark.slow
def test_attention_distance_csv_is_every_head_and_the_layer_means(study_dir, drawn):
    out, lines = drawn
    got = pd.read_csv(out / "attention_distance.csv")
    _, heads = _tables(study_dir)
    last = heads[heads.epoch == EPOCHS - 1]
    # one panel per variant with attention heads, in display order (no ResNet)
    runs, _ = _tables(study_dir)
    order = [m for m in variant_order(trial_table(runs)) if m != "ResNet18"]
    assert list(dict.fromkeys(got.model)) == order and len(order) == 5
    dots = got[got.kind == "head"]
    assert len(dots) == len(last)  # every head of every seed, pooled, once
    merged = dots.merge(last, on=["trial_id", "layer", "head"], suffixes=("", "_t"))
    assert len(merged) == len(dots)
    assert set(dots.metric) == {"attention_distance"}
    np.testing.assert_allclose(merged.distance, merged.attention_distance, rtol=1e-12)
    assert (merged.model == merged.name).all() and set(dots.epoch) == {EPOCHS - 1}
    # x: the 1-based layer, heads spread within ±0.3 of it
    assert ((dots.x - (dots.layer + 1)).abs() <= 0.3 + 1e-9).all()
    means = got[got.kind == "layer"]
    for (name, layer), g in last.groupby(["name", "layer"]):
        m = means[(means.model == name) & (means.layer == layer)].iloc[0]
        assert m.distance == pytest.approx(g.attention_distance.mean(), rel=1e-12)
        assert m.n == len(g) and m.seeds == g.trial_id.nunique() and m.x == layer + 1
        per_seed = g.groupby("trial_id").attention_distance.mean()
        if len(per_seed) > 1:
            assert m.seed_std == pytest.approx(per_seed.std(), rel=1e-9)
        else:
            assert math.isnan(m.seed_std)
    gpsa = means[means.model == "SA gpsa (N_h=9)"]
    assert set(gpsa.n) == {27} and set(gpsa.seeds) == {3}


def test_reference_lines_are_on_the_grid_metrics_scale(study_dir):
    """The grid metric's reference lines: uniform attention and a 3×3 convolution's
    in-grid taps on the trials' 16×16 token grid, computed here independently."""
    import itertools

    from analysis.figures.pooled import distance_metric

    cells = list(itertools.product(range(16), range(16)))
    uniform = np.mean([math.dist(a, b) for a in cells for b in cells])
    conv = np.mean(
        [
            np.mean([math.dist(q, k) for k in cells if max(abs(q[0] - k[0]), abs(q[1] - k[1])) <= 1])
            for q in cells
        ]
    )
    runs, heads = _tables(study_dir)
    m = distance_metric(heads, trial_table(runs))
    assert m.column == "attention_distance"
    (u, _), (c, _) = m.references
    assert u == pytest.approx(uniform, rel=1e-12) and round(u, 2) == 8.33
    assert c == pytest.approx(conv, rel=1e-12) and round(c, 2) == 1.05


def test_a_study_before_the_grid_metric_is_drawn_with_the_canvas_column_and_says_so(tmp_path):
    """Tables written before ``attention_distance`` (and the init rows) existed still draw;
    the CSVs name the column shown and the figure's note says it is the canvas moment."""
    from analysis.figures.pooled import distance_metric

    study = write_study(tmp_path / "old", TRIALS[:3], epochs=2, grid_metric=False)
    style.setup()
    ctx = Context(study=analysis.load(study), out=tmp_path / "figs")
    assert "attention_distance" not in ctx.study.heads
    assert distance.draw(ctx) and locality.draw(ctx)
    d = pd.read_csv(tmp_path / "figs" / "attention_distance.csv")
    over = pd.read_csv(tmp_path / "figs" / "locality_over_training.csv")
    assert set(d.metric) == set(over.metric) == {"mean_distance"}
    heads = ctx.study.heads
    last = heads[heads.epoch == 1]
    merged = d[d.kind == "head"].merge(last, on=["trial_id", "layer", "head"])
    np.testing.assert_allclose(merged.distance, merged.mean_distance, rtol=1e-12)
    assert over.epochs_trained.min() == 1  # no initialisation rows: starts after epoch 1
    m = distance_metric(heads, ctx.trials)
    assert m.column == "mean_distance" and "predates heads.attention_distance" in m.note
    assert "canvas" in m.axis


def test_three_by_three_reference_distance():
    taps = [(x, y) for x in (-1, 0, 1) for y in (-1, 0, 1)]
    assert CONV3_DISTANCE == pytest.approx(sum(math.hypot(x, y) for x, y in taps) / 9, rel=1e-12)
    assert CONV3_DISTANCE == pytest.approx((4 + 4 * math.sqrt(2)) / 9, rel=1e-12)


def test_locality_over_training_csv_starts_at_initialisation(study_dir, drawn):
    out, _ = drawn
    got = pd.read_csv(out / "locality_over_training.csv")
    _, heads = _tables(study_dir)
    assert len(got) == 5 * (1 + EPOCHS) * LAYERS  # every variant with heads, init + epoch, and layer
    assert set(got.metric) == {"attention_distance"}
    init = got[got.epoch == -1]
    assert len(init) == 5 * LAYERS and set(init.epochs_trained) == {0}  # x = 0: the untrained model
    for (name, epoch, layer), g in heads.groupby(["name", "epoch", "layer"]):
        r = got[(got.model == name) & (got.epoch == epoch) & (got.layer == layer)].iloc[0]
        per_seed = g.groupby("trial_id").attention_distance.mean()
        assert r.distance == pytest.approx(g.attention_distance.mean(), rel=1e-12)
        assert r.seed_min == pytest.approx(per_seed.min(), rel=1e-12)
        assert r.seed_max == pytest.approx(per_seed.max(), rel=1e-12)
        assert r.n == len(g) and r.seeds == len(per_seed) and r.epochs_trained == epoch + 1


def test_gates_drawn_only_for_variants_with_gates(study_dir, drawn):
    out, lines = drawn
    got = pd.read_csv(out / "gates_over_training.csv")
    _, heads = _tables(study_dir)
    assert set(got.model) == {"SA gpsa (N_h=9)"}  # the only variant with non-null gates
    g = heads[heads.name == "SA gpsa (N_h=9)"]
    assert len(got) == (1 + EPOCHS) * LAYERS  # from initialisation
    for (epoch, layer), rows in g.groupby(["epoch", "layer"]):
        r = got[(got.epoch == epoch) & (got.layer == layer)].iloc[0]
        want = [gate_value(t, epoch, layer, h) for t, h in zip(rows.trial_id, rows["head"])]
        assert r.gate == pytest.approx(np.mean(want), rel=1e-12)
        assert r.head_min == pytest.approx(min(want)) and r.head_max == pytest.approx(max(want))
        per_seed = rows.groupby("trial_id").gate.mean()
        assert r.seed_min == pytest.approx(per_seed.min()) and r.seed_max == pytest.approx(per_seed.max())
        assert r.n == 27 and r.seeds == 3
    assert "skipped gates for SA relative_bias (N_h=4): no gated heads (gate is null)" in lines
    assert "skipped gates for SA rope2d (N_h=4): no gated heads (gate is null)" in lines


def test_gate_figure_skipped_for_an_older_study_without_the_column(tmp_path):
    study = write_study(tmp_path / "old", [t[:5] + (None,) for t in TRIALS[:3]], epochs=2)
    style.setup()
    ctx = Context(study=analysis.load(study), out=tmp_path / "figs")
    assert "gate" not in ctx.study.heads
    with pytest.raises(Skip, match="no gate column"):
        gates.draw(ctx)
    # the distance figures do not need it
    assert distance.draw(ctx) and locality.draw(ctx)


def test_gate_figure_skipped_when_every_gate_is_null(tmp_path):
    study = write_study(tmp_path / "nulls", [TRIALS[6], TRIALS[0]], epochs=2)
    style.setup()
    ctx = Context(study=analysis.load(study), out=tmp_path / "figs")
    with pytest.raises(Skip, match="no gated heads"):
        gates.draw(ctx)


def test_epoch_option_stops_the_locality_figures(study_dir, tmp_path):
    style.setup()
    ctx = Context(study=analysis.load(study_dir), out=tmp_path, epoch=1, pdf=False)  # CSVs read
    distance.draw(ctx)
    locality.draw(ctx)
    gates.draw(ctx)
    assert set(pd.read_csv(tmp_path / "attention_distance.csv").epoch) == {1}
    assert pd.read_csv(tmp_path / "locality_over_training.csv").epoch.max() == 1
    assert pd.read_csv(tmp_path / "locality_over_training.csv").epoch.min() == -1
    assert pd.read_csv(tmp_path / "gates_over_training.csv").epoch.max() == 1


def test_head_centres_of_every_concentrated_head_whatever_its_encoding(study_dir, tmp_path):
    """Fig. 4 style: every concentrated head has its centre drawn, diffuse heads are
    listed; gated heads get the contours of their attention map, not the ellipse of
    the positional part's Σ."""
    out = tmp_path
    style.setup()
    heads_fig.draw(Context(study=analysis.load(study_dir), out=out, per_seed=True, pdf=False))  # CSVs read
    _, heads = _tables(study_dir)
    last = heads[heads.epoch == EPOCHS - 1]
    for tid, stem in [
        ("g-s0", None),
        ("b-s0", "heads_sa-relative-bias-nh4"),
        ("r-s0", "heads_sa-rope2d-nh4"),
        ("l-s0", "heads_sa-learned-nh4-dp8"),
    ]:
        files = sorted(out.glob(f"{stem}*.csv")) if stem else sorted(out.glob("heads_sa-gpsa-nh9-seed*.csv"))
        frames = [pd.read_csv(f) for f in files]
        got = next(f for f in frames if set(f.trial_id) == {tid}) if stem is None else frames[0]
        t = last[last.trial_id == tid]
        concentrated = t[t.entropy <= math.log(49)]
        centres = got[got.kind == "center"]
        assert set(zip(centres.layer, centres["head"])) == set(zip(concentrated.layer, concentrated["head"]))
        assert set(zip(got[got.kind == "diffuse"].layer, got[got.kind == "diffuse"]["head"])) == set(
            zip(t.layer, t["head"])
        ) - set(zip(concentrated.layer, concentrated["head"]))
        if tid == "g-s0":
            # the mass contours of its stored window, not the ellipse of its Σ⁻¹ = 4 I
            maps = read_table(study_dir / "tables", "maps")
            for (layer, head), pts in got[(got.kind == "contour") & (got.level == 0.5)].groupby(
                ["layer", "head"]
            ):
                m = maps[
                    (maps.trial_id == tid)
                    & (maps.epoch == EPOCHS - 1)
                    & (maps.layer == layer)
                    & (maps["head"] == head)
                ].iloc[0]
                paths = window_contours(m.probs, int(m.window), 0.5)
                np.testing.assert_allclose(pts.x, np.concatenate([p[0] for p in paths]))
                np.testing.assert_allclose(pts.y, np.concatenate([p[1] for p in paths]))


def test_quadratic_heads_keep_their_ellipses(study_dir, drawn):
    out, _ = drawn
    got = pd.read_csv(out / "heads_sa-quadratic-isotropic-nh9.csv")
    pts = got[(got.kind == "contour") & (got.level == 0.5)]
    c = got[got.kind == "center"].set_index(["layer", "head"])
    d2 = [
        (r.x - c.loc[(r.layer, r.head), "x"]) ** 2 + (r.y - c.loc[(r.layer, r.head), "y"]) ** 2
        for r in pts.itertuples()
    ]
    from analysis.contours import mahalanobis_radius

    np.testing.assert_allclose(4.0 * np.asarray(d2), mahalanobis_radius(0.5) ** 2, rtol=1e-9)


def test_locality_figures_are_valid_images(study_dir, drawn, tmp_path):
    """The PNGs `analysis figures` drew and listed, and the PDFs the locality figures write by
    default (drawn here alone: the module's drawing skips PDFs, which double its time)."""
    from PIL import Image

    out, lines = drawn
    style.setup()
    ctx = Context(study=analysis.load(study_dir), out=tmp_path)
    assert distance.draw(ctx) and locality.draw(ctx) and gates.draw(ctx)
    for stem in ("attention_distance", "locality_over_training", "gates_over_training"):
        with Image.open(out / f"{stem}.png") as im:
            im.verify()
        assert str(out / f"{stem}.png") in lines and not (out / f"{stem}.pdf").exists()
        assert (tmp_path / f"{stem}.pdf").read_bytes()[:4] == b"%PDF"


def test_analysis_never_names_an_encoding():
    """The figures read table columns only: no encoding name in analysis/ code
    (the paper's names only in the variant display order)."""
    root = Path(analysis.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        for name in ("gpsa", "relative_bias", "rope2d", '"learned_content"', '"quadratic"'):
            if path.name == "variants.py" and name in ('"learned_content"', '"quadratic"'):
                continue
            assert name not in text, (path, name)


def test_schema_documents_gate(capsys):
    code = cli.main(["schema", "heads"])
    out = capsys.readouterr().out
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("gate "))
    assert "σ(λ_h)" in line and "null" in line


@pytest.mark.long
def test_epoch_minus_one_draws_the_untrained_model(study_dir, tmp_path, capsys):
    """``--epoch -1``: the initialisation rows, titled 'at initialisation'."""
    from analysis.figures.panels import after

    assert after(-1) == "at initialisation" and after(2) == "after 3 epochs"
    assert cli.main(["figures", str(study_dir), "--out", str(tmp_path), "--epoch", "-1", "--no-pdf"]) == 0
    assert (tmp_path / "attention_distance.png").exists() and not list(tmp_path.glob("*.pdf"))  # --no-pdf
    got = pd.read_csv(tmp_path / "attention_distance.csv")
    _, heads = _tables(study_dir)
    init = heads[heads.epoch == -1]
    assert set(got.epoch) == {-1}
    merged = got[got.kind == "head"].merge(init, on=["trial_id", "layer", "head"])
    assert len(merged) == len(init)
    np.testing.assert_allclose(merged.distance, merged.attention_distance, rtol=1e-12)
    assert set(pd.read_csv(tmp_path / "heads_sa-quadratic-isotropic-nh9.csv").epoch) == {-1}
    capsys.readouterr()
    try:
        code = cli.main(["figures", str(study_dir), "--out", str(tmp_path / "no"), "--epoch", "-2"])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and "--epoch" in err and len(err.strip().splitlines()) == 1
