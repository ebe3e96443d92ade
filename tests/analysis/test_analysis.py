"""analysis: queries, figures and Table 1 over tables written by the real trial code.

Two small studies are trained once per module (CPU, synthetic data, ~20 s): a
"paper" study (quadratic isotropic N_h=9 with 2 seeds, learned and learned+content
N_h=4 D_p=8, 2 epochs) and a sweep (num_heads × isotropic, one cell with 2 seeds).
Every figure's CSV is checked against the same aggregation computed here from the
tables, and every image file is opened.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import analysis
from analysis import cli
from analysis.contours import gaussian_ellipse, mahalanobis_radius, mass_level, window_contours
from analysis.figures import heads as heads_fig
from analysis.lattice import kernel_size, lattice, lattice_distance
from study.results.tables import read_table
from tests.helpers import REPO_ROOT

REPO = REPO_ROOT
TINY = dict(hidden=16, layers=2, intermediate=16)


def _train(tables: Path, study: str, trials) -> None:
    from study.models import ModelConfig
    from study.trial import TrainConfig, train_trial

    for trial_id, model, seed, epochs in trials:
        cfg = TrainConfig(
            model=ModelConfig(**TINY, **model),
            data="synthetic:100",
            subset=100,
            epochs=epochs,
            batch_size=10,
            lr=0.05,
            warmup=0.1,
            head_images=8,
            seed=seed,
        )
        train_trial(cfg, trial_id=trial_id, tables=tables, study=study)


@pytest.fixture(scope="module")
def paper(tmp_path_factory) -> Path:
    """A study folder (tables in ./tables) of 4 real trials, 2 epochs each."""
    root = tmp_path_factory.mktemp("storage") / "paper"
    iso = dict(encoding="quadratic", isotropic=True, num_heads=9)
    _train(
        root / "tables",
        "paper",
        [
            ("iso-s0", iso, 0, 2),
            ("iso-s1", iso, 1, 2),
            ("learned", dict(encoding="learned", num_heads=4, pos_dim=8), 0, 2),
            ("content", dict(encoding="learned_content", num_heads=4), 0, 2),
        ],
    )
    return root


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A grid sweep num_heads {1, 4} × isotropic {true, false}, 1 epoch; one cell twice."""
    root = tmp_path_factory.mktemp("sweep")
    trials = [
        (f"nh{n}-{'iso' if iso else 'aniso'}", dict(encoding="quadratic", isotropic=iso, num_heads=n), 0, 1)
        for n in (1, 4)
        for iso in (True, False)
    ]
    trials.append(("nh4-iso-s1", dict(encoding="quadratic", isotropic=True, num_heads=4), 1, 1))
    _train(root / "tables", "sweep", trials)
    return root


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------- loading


@pytest.mark.slow
def test_load_by_folder_tables_name_and_uri(paper):
    tables = paper / "tables"
    want = {t: read_table(tables, t) for t in ("runs", "epochs", "heads", "maps")}
    for study in (
        analysis.load(paper),
        analysis.load(tables),
        analysis.load("paper", storage=str(paper.parent)),
        analysis.load(tables.as_uri()),
    ):
        assert study.name == "paper"
        for t, frame in want.items():
            pd.testing.assert_frame_equal(study.table(t), frame)
            assert int(study.sql(f"SELECT count(*) AS n FROM {t}").n[0]) == len(frame)
    assert len(want["runs"]) == 4 and len(want["epochs"]) == 8
    assert len(want["heads"]) == (1 + 2) * 2 * (9 + 9 + 4 + 4)  # (init + 2 epochs) x layers x heads


def test_load_errors_are_analysis_errors(tmp_path):
    with pytest.raises(analysis.AnalysisError, match="no study 'nope'"):
        analysis.load("nope", storage=str(tmp_path))
    (tmp_path / "junk").mkdir()
    with pytest.raises(analysis.AnalysisError, match="not a study folder"):
        analysis.load(tmp_path / "junk")


# ---------------------------------------------------------------------------- queries


def test_sql_over_each_table_matches_pandas(paper):
    s = analysis.load(paper)
    runs, epochs, heads, maps = (read_table(paper / "tables", t) for t in ("runs", "epochs", "heads", "maps"))

    got = s.sql("SELECT trial_id, name, n_params, best_test_acc FROM runs ORDER BY trial_id")
    want = (
        runs[["trial_id", "name", "n_params", "best_test_acc"]].sort_values("trial_id").reset_index(drop=True)
    )
    assert list(got.trial_id) == list(want.trial_id) and list(got.name) == list(want.name)
    assert list(got.n_params) == list(want.n_params)
    np.testing.assert_allclose(got.best_test_acc, want.best_test_acc)

    got = s.sql("SELECT trial_id, avg(test_acc) AS acc, max(epoch) AS last FROM epochs GROUP BY 1 ORDER BY 1")
    want = epochs.groupby("trial_id").agg(acc=("test_acc", "mean"), last=("epoch", "max")).reset_index()
    assert list(got.trial_id) == list(want.trial_id) and list(got["last"]) == list(want["last"])
    np.testing.assert_allclose(got.acc, want.acc)

    got = s.sql(
        "SELECT trial_id, layer, avg(center_x) AS cx, max(max_prob) AS mp FROM heads "
        "WHERE epoch = 1 GROUP BY ALL ORDER BY ALL"
    )
    want = (
        heads[heads.epoch == 1]
        .groupby(["trial_id", "layer"])
        .agg(cx=("center_x", "mean"), mp=("max_prob", "max"))
        .reset_index()
    )
    np.testing.assert_allclose(got[["cx", "mp"]].to_numpy(), want[["cx", "mp"]].to_numpy())

    got = s.sql(
        'SELECT trial_id, epoch, layer, head, "window", list_sum(probs) AS mass FROM maps ORDER BY ALL'
    )
    want = maps.sort_values(["trial_id", "epoch", "layer", "head"]).reset_index(drop=True)
    assert list(got["window"]) == list(want["window"])
    np.testing.assert_allclose(got.mass, [sum(p) for p in want.probs])


def test_query_formats_parse_back(paper, capsys):
    sql = "SELECT trial_id, epoch, test_acc FROM epochs ORDER BY trial_id, epoch"
    want = read_table(paper / "tables", "epochs")[["trial_id", "epoch", "test_acc"]]
    want = want.sort_values(["trial_id", "epoch"]).reset_index(drop=True)

    code, out, err = run_cli(capsys, "query", paper, sql, "--format", "csv")
    assert code == 0 and err == ""
    got = pd.read_csv(StringIO(out))
    assert list(got.trial_id) == list(want.trial_id) and list(got.epoch) == list(want.epoch)
    np.testing.assert_allclose(got.test_acc, want.test_acc, rtol=0, atol=0)

    code, out, _ = run_cli(capsys, "query", paper, sql, "--format", "json")
    rows = json.loads(out)
    assert [r["trial_id"] for r in rows] == list(want.trial_id)
    assert [r["test_acc"] for r in rows] == list(want.test_acc)

    # list columns come back as JSON lists; NaN (a non-Gaussian head's parameters) as null
    code, out, _ = run_cli(
        capsys,
        "query",
        "paper",
        "--storage",
        paper.parent,
        'SELECT "window", probs, param_center_x FROM maps JOIN heads USING '
        "(trial_id, epoch, layer, head) WHERE trial_id = 'learned' LIMIT 1",
        "--format",
        "json",
    )
    (row,) = json.loads(out)
    assert len(row["probs"]) == row["window"] ** 2 and row["param_center_x"] is None

    code, out, _ = run_cli(capsys, "query", paper, sql)
    lines = out.splitlines()
    assert lines[0].split() == ["trial_id", "epoch", "test_acc"] and lines[-1] == f"({len(want)} rows)"


@pytest.mark.parametrize(
    "sql,message",
    [
        ("SELEC 1", "syntax error"),
        ("SELECT * FROM nosuch", "unknown table nosuch"),
        ("SELECT nosuch FROM runs", "nosuch"),
    ],
)
def test_query_errors_are_one_line_exit_2(paper, capsys, sql, message):
    code, out, err = run_cli(capsys, "query", paper, sql)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("analysis query: error:") and message in err


def test_query_missing_study_one_line_exit_2(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "analysis", "query", "nope", "SELECT 1", "--storage", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "no study 'nope'" in r.stderr


def test_empty_study_is_queryable_and_skips_every_figure(tmp_path, capsys):
    study = tmp_path / "fresh"
    study.mkdir()
    (study / "study.json").write_text("{}")
    for table in ("runs", "epochs", "heads", "maps"):
        code, out, err = run_cli(capsys, "query", study, f"SELECT * FROM {table}", "--format", "json")
        assert (code, json.loads(out), err) == (0, [], "")
    code, out, _ = run_cli(
        capsys, "query", study, "SELECT count(*) AS n, avg(test_acc) AS a FROM epochs", "--format", "csv"
    )
    assert out.splitlines() == ["n,a", "0,"]
    code, out, err = run_cli(capsys, "figures", study, "--out", tmp_path / "figs")
    assert code == 0 and err == ""
    assert all(line.startswith("skipped ") for line in out.splitlines()) and len(out.splitlines()) == 10


class _Stop(Exception):
    pass


@pytest.mark.long
def test_running_study_partial_tables(tmp_path, capsys, monkeypatch):
    """A study caught mid-run, written by the real trial code: one trial stopped after
    its first epoch, one stopped before finishing any, and a temporary part being
    written (never read)."""
    import study.trial.loop as loop
    from study.models import ModelConfig
    from study.trial import TrainConfig, train_trial

    tables = tmp_path / "live" / "tables"
    base = dict(data="synthetic:100", subset=100, epochs=2, batch_size=50, head_images=8)

    def stop(metrics, ckpt):
        raise _Stop

    cfg = TrainConfig(model=ModelConfig(**TINY, encoding="quadratic", num_heads=9), **base)
    with pytest.raises(_Stop):
        train_trial(cfg, trial_id="iso", tables=tables, study="live", report=stop)
    monkeypatch.setattr(loop, "evaluate", lambda *a, **k: stop(None, None))
    cfg = TrainConfig(model=ModelConfig(**TINY, encoding="learned", num_heads=4, pos_dim=8), **base)
    with pytest.raises(_Stop):
        train_trial(cfg, trial_id="learned", tables=tables, study="live")
    (tables / "epochs" / "iso" / ".tmp-abc123.parquet").write_bytes(b"PAR1 half-written")
    (tables / "runs" / ".tmp-def456.parquet").write_bytes(b"")

    s = analysis.load(tables.parent)
    assert list(s.runs.status) == ["running", "running"] and list(s.runs.epochs_done) == [1, 0]
    assert len(s.epochs) == 1 and int(s.sql("SELECT count(*) AS n FROM epochs").n[0]) == 1
    # the trial stopped before its first epoch ended has the untrained model's rows only
    assert s.sql("SELECT count(*) AS n FROM heads WHERE trial_id = 'learned' AND epoch = -1").n[0] == 2 * 4
    assert s.sql("SELECT count(*) AS n FROM heads WHERE trial_id = 'learned' AND epoch >= 0").n[0] == 0
    code, out, err = run_cli(capsys, "figures", tables.parent, "--out", tmp_path / "figs")
    assert code == 0 and err == ""
    assert "skipped heads for" not in out and "skipped trajectories for SA quadratic" not in out
    assert (
        "skipped trajectories for SA learned (N_h=4, D_p=8): needs head statistics of at least 2 epochs"
        in out
    )
    for stem in (
        "fig2_accuracy",
        "heads_sa-quadratic-isotropic-nh9",
        "maps_sa-quadratic-isotropic-nh9",
        "conv_likeness_sa-quadratic-isotropic-nh9",
        "heads_sa-learned-nh4-dp8",
        "trajectories_sa-quadratic-isotropic-nh9",
    ):
        _check_image(tmp_path / "figs" / f"{stem}.png")
    table1 = pd.read_csv(tmp_path / "figs" / "table1.csv")
    assert list(table1.model) == ["SA quadratic isotropic (N_h=9)"]  # the learned trial has no epoch yet
    assert "| 1/2 (running) |" in (tmp_path / "figs" / "table1.md").read_text()


@pytest.mark.parametrize("argv", [["--help"], ["query", "--help"], ["figures", "--help"]])
def test_help_on_every_command(capsys, argv):
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and "usage: analysis" in out


# ---------------------------------------------------------------------------- figures


@pytest.fixture(scope="module")
def paper_figures(paper, tmp_path_factory):
    """`analysis figures paper --storage …` in a fresh interpreter (which must not
    import torch or the training code, queries included; torch-free config
    modules such as study.models.config and study.cliutil are fine): (output folder, stdout)."""
    out = tmp_path_factory.mktemp("figs")
    code = (
        "import contextlib, io, sys\n"
        "from analysis.cli import main\n"
        f"rc = main(['figures', 'paper', '--storage', {str(paper.parent)!r}, '--out', {str(out)!r}])\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['query', {str(paper)!r}, 'SELECT count(*) FROM heads JOIN maps USING (trial_id)'])\n"
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('study.trial.loop', 'study.data'))]\n"
        "sys.exit(f'imported {bad}' if bad else rc)\n"
    )
    return out, run_fresh(code)


def run_fresh(code: str) -> str:
    """``code`` in a fresh interpreter (nothing imported yet): exit 0, no stderr; its stdout."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout


def _check_image(png: Path) -> None:
    with Image.open(png) as im:
        im.verify()
    with Image.open(png) as im:
        w, h = im.size
    assert 600 <= w <= 2200 and 300 <= h <= 2500, (png.name, w, h)  # ≈ 2–7 in at 300 dpi
    assert png.with_suffix(".pdf").read_bytes()[:4] == b"%PDF"
    assert png.with_suffix(".csv").stat().st_size > 0


@pytest.mark.slow
def test_figures_cli_lists_files_and_skips(paper_figures):
    out, stdout = paper_figures
    lines = stdout.splitlines()
    skipped = [ln for ln in lines if ln.startswith("skipped ")]
    files = [Path(ln) for ln in lines if not ln.startswith("skipped ")]
    assert all(f.exists() and f.parent == out for f in files)
    # the folder holds the files listed and the manifest of their inputs (analysis.figures.cache)
    assert sorted(files) == sorted(p for p in out.iterdir() if p.name != ".figures-manifest.json")
    assert "skipped heatmap: needs a sweep over two config axes (found 1: encoding)" in skipped
    assert (
        "skipped conv_likeness for SA learned (N_h=4, D_p=8): needs N_h = K² heads with K odd, has 4"
        in skipped
    )
    # tables written before heads.gate existed, or with the column all null: one line
    assert [ln for ln in skipped if ln.startswith("skipped gates")] in (
        ["skipped gates: the heads table has no gate column"],
        ["skipped gates: no gated heads (heads.gate is null in every row)"],
    )
    assert len(skipped) == 4  # heat-map; conv-likeness of the two N_h=4 models; gates (no gated heads)
    names = {f.name for f in files}
    # one figure per variant by default: no per-seed file
    for stem in [
        "fig2_accuracy",
        "heads_sa-quadratic-isotropic-nh9",
        "heads_sa-learned-nh4-dp8",
        "maps_sa-learned-content-nh4-dp16",
        "trajectories_sa-quadratic-isotropic-nh9",
        "conv_likeness_sa-quadratic-isotropic-nh9",
        "attention_distance",
        "locality_over_training",
    ]:
        assert {f"{stem}.png", f"{stem}.pdf", f"{stem}.csv"} <= names
    assert not any("seed" in n for n in names)
    assert {"table1.md", "table1.csv"} <= names


def test_every_image_is_valid(paper_figures):
    pngs = sorted(paper_figures[0].glob("*.png"))
    # accuracy; heads/maps/trajectories per variant; conv-likeness of N_h=9; attention distance and locality
    assert len(pngs) == 1 + 3 * 3 + 1 + 2
    for png in pngs:
        _check_image(png)


def _runs(root):
    return read_table(root / "tables", "runs")


def test_fig2_csv_is_mean_min_max_over_seeds(paper, paper_figures):
    paper_figures = paper_figures[0]
    epochs = read_table(paper / "tables", "epochs").merge(_runs(paper)[["trial_id", "name"]], on="trial_id")
    want = (
        epochs.groupby(["name", "epoch"])["test_acc"]
        .agg(seeds="count", test_acc_mean="mean", test_acc_min="min", test_acc_max="max")
        .reset_index()
    )
    got = pd.read_csv(paper_figures / "fig2_accuracy.csv")
    got = got.sort_values(["model", "epoch"]).reset_index(drop=True)
    assert list(got.model) == list(want.name) and list(got.epoch) == list(want.epoch)
    assert list(got.epochs_trained) == list(want.epoch + 1) and list(got.seeds) == list(want.seeds)
    for c in ("test_acc_mean", "test_acc_min", "test_acc_max"):
        np.testing.assert_allclose(got[c], want[c], rtol=1e-12)
    iso = got[got.model == "SA quadratic isotropic (N_h=9)"]
    assert (iso.seeds == 2).all()


def test_table1_csv_and_markdown(paper, paper_figures):
    paper_figures = paper_figures[0]
    runs = _runs(paper)
    want = (
        runs.groupby("name")
        .agg(
            seeds=("trial_id", "count"),
            best_test_acc=("best_test_acc", "mean"),
            final_test_acc=("final_test_acc", "mean"),
            n_params=("n_params", "first"),
            flops=("flops", "first"),
        )
        .reset_index()
    )
    got = pd.read_csv(paper_figures / "table1.csv").sort_values("model").reset_index(drop=True)
    assert list(got.model) == list(want.name)
    assert list(got.seeds) == list(want.seeds) and list(got.n_params) == list(want.n_params)
    assert list(got.flops) == list(want.flops)
    np.testing.assert_allclose(got.best_test_acc, want.best_test_acc, rtol=1e-12)
    np.testing.assert_allclose(got.final_test_acc, want.final_test_acc, rtol=1e-12)
    iso = runs[runs.encoding == "quadratic"]
    np.testing.assert_allclose(
        got.loc[got.model.str.contains("isotropic"), "best_test_acc_std"], iso.best_test_acc.std(), rtol=1e-12
    )
    md = (paper_figures / "table1.md").read_text().splitlines()
    md = md[next(i for i, ln in enumerate(md) if ln.startswith("| Model |")) :]  # after the data line
    assert md[0].startswith("| Model |") and len([ln for ln in md if ln.startswith("| SA")]) == 3
    assert f"{runs.n_params.iloc[0]:,}" in "\n".join(md)


def _median_seed(paper) -> str:
    """The quadratic variant's representative: the lower median of its seeds by best
    test accuracy (ties by seed)."""
    iso = _runs(paper)
    iso = iso[iso.encoding == "quadratic"].sort_values(["best_test_acc", "seed"], kind="stable")
    return iso.trial_id.iloc[(len(iso) - 1) // 2]


def test_variant_figures_show_the_median_seed_and_say_so(paper, paper_figures):
    from analysis.figures.context import Context, as_figure

    rep = _median_seed(paper)
    for kind in ("heads", "maps", "trajectories"):
        got = pd.read_csv(paper_figures[0] / f"{kind}_sa-quadratic-isotropic-nh9.csv")
        assert set(got.trial_id) == {rep}, kind
    t = Context(study=analysis.load(paper), out=Path(".")).trials
    row = as_figure(t[t.trial_id == rep].iloc[0], per_seed=False)
    seed = int(_runs(paper).set_index("trial_id").seed[rep])
    assert row.title == (
        f"SA quadratic isotropic (N_h=9), seed {seed} (the median of 2 seeds by best test accuracy)"
    )
    assert row.slug == "sa-quadratic-isotropic-nh9"


def test_per_seed_flag_draws_one_figure_per_trial(paper, tmp_path, monkeypatch, capsys):
    from analysis import style
    from analysis.figures.context import Context

    style.setup()
    ctx = Context(study=analysis.load(paper), out=tmp_path, per_seed=True, pdf=False)  # CSVs read
    heads_fig.draw(ctx)
    names = sorted(p.name for p in tmp_path.glob("heads_*.csv"))
    assert names == [
        "heads_sa-learned-content-nh4-dp16.csv",
        "heads_sa-learned-nh4-dp8.csv",
        "heads_sa-quadratic-isotropic-nh9-seed0.csv",
        "heads_sa-quadratic-isotropic-nh9-seed1.csv",
    ]
    assert set(pd.read_csv(tmp_path / "heads_sa-quadratic-isotropic-nh9-seed1.csv").trial_id) == {"iso-s1"}
    seen = {}
    monkeypatch.setattr("analysis.figures.draw_all", lambda study, out, **kw: seen.update(kw) or ([], []))
    assert run_cli(capsys, "figures", paper, "--out", tmp_path / "f", "--per-seed", "--jobs", "1")[0] == 0
    assert seen["per_seed"] is True and seen["jobs"] == 1 and seen["pdf"] is True
    assert run_cli(capsys, "figures", paper, "--out", tmp_path / "f", "--no-pdf")[0] == 0
    assert seen["pdf"] is False and seen["per_seed"] is False
    code, _, err = run_cli(capsys, "figures", paper, "--out", tmp_path / "f", "--jobs", "0")
    assert code == 2 and "--jobs: must be >= 1, got 0" in err


def test_heads_csv_centres_and_contours(paper, paper_figures):
    paper_figures = paper_figures[0]
    heads = read_table(paper / "tables", "heads")
    maps = read_table(paper / "tables", "maps")
    last = heads[heads.epoch == 1]
    r = mahalanobis_radius
    for slug, tid in [
        ("sa-quadratic-isotropic-nh9", _median_seed(paper)),
        ("sa-learned-nh4-dp8", "learned"),
        ("sa-learned-content-nh4-dp16", "content"),
    ]:
        got = pd.read_csv(paper_figures / f"heads_{slug}.csv")
        assert set(got.trial_id) == {tid} and set(got.epoch) == {1}
        centres = got[got.kind == "center"].sort_values(["layer", "head"])
        diffuse = got[got.kind == "diffuse"]
        everyone = last[last.trial_id == tid].sort_values(["layer", "head"])
        # every head is either drawn (its centre) or listed as diffuse, never both
        drawn = set(zip(centres.layer, centres["head"]))
        assert drawn | set(zip(diffuse.layer, diffuse["head"])) == set(zip(everyone.layer, everyone["head"]))
        assert not drawn & set(zip(diffuse.layer, diffuse["head"]))
        if tid.startswith("iso"):
            assert len(drawn) == len(everyone), "Gaussian heads of this study are concentrated"
        want = everyone[[(lh in drawn) for lh in zip(everyone.layer, everyone["head"])]]
        np.testing.assert_allclose(
            centres[["x", "y"]].to_numpy().reshape(-1, 2),
            want[["center_x", "center_y"]].to_numpy().reshape(-1, 2),
        )
        contours = got[got.kind == "contour"]
        for (layer, head), c in contours.groupby(["layer", "head"]):
            h = want[(want.layer == layer) & (want["head"] == head)].iloc[0]
            for level, pts in c.groupby("level"):
                if tid.startswith("iso"):  # on the ellipse (δ−Δ)ᵀ Σ⁻¹ (δ−Δ) = r(p)² of the stored Σ⁻¹
                    dx, dy = pts.x - h.center_x, pts.y - h.center_y
                    q = (
                        h.param_inv_cov_xx * dx**2
                        + 2 * h.param_inv_cov_xy * dx * dy
                        + h.param_inv_cov_yy * dy**2
                    )
                    np.testing.assert_allclose(q, r(level) ** 2, rtol=1e-9)
                else:  # the mass contours of the stored window
                    m = maps[
                        (maps.trial_id == tid)
                        & (maps.epoch == 1)
                        & (maps.layer == layer)
                        & (maps["head"] == head)
                    ]
                    paths = window_contours(m.probs.iloc[0], int(m.window.iloc[0]), level)
                    np.testing.assert_allclose(pts.x, np.concatenate([p[0] for p in paths]))
        if tid.startswith("iso"):
            assert len(contours.groupby(["layer", "head", "level"])) == len(want) * 2


def test_epoch_option_picks_the_stored_epoch(paper, tmp_path):
    from analysis import style
    from analysis.figures import maps as maps_fig
    from analysis.figures.context import Context

    style.setup()
    study = analysis.load(paper)
    trials = study.runs[study.runs.trial_id != "learned"].trial_id  # draw only the learned trial
    study.heads = study.heads[~study.heads.trial_id.isin(trials)]
    study.maps = study.maps[~study.maps.trial_id.isin(trials)]
    ctx = Context(study=study, out=tmp_path, epoch=0, pdf=False)  # CSVs read
    heads_fig.draw(ctx)
    maps_fig.draw(ctx)
    assert set(pd.read_csv(tmp_path / "heads_sa-learned-nh4-dp8.csv").epoch) == {0}
    assert set(pd.read_csv(tmp_path / "maps_sa-learned-nh4-dp8.csv").epoch) == {0}
    late = Context(study=study, out=tmp_path / "late", epoch=7)
    assert heads_fig.draw(late) == [] and maps_fig.draw(late) == []
    assert "skipped heads for SA learned (N_h=4, D_p=8): no head statistics at epoch 7" in late.skipped
    assert "skipped maps for SA learned (N_h=4, D_p=8): no attention maps at epoch 7" in late.skipped


def test_maps_csv_is_the_stored_window(paper, paper_figures):
    paper_figures = paper_figures[0]
    maps = read_table(paper / "tables", "maps")
    for slug, tid in [
        ("sa-learned-content-nh4-dp16", "content"),
        ("sa-quadratic-isotropic-nh9", _median_seed(paper)),
    ]:
        got = pd.read_csv(paper_figures / f"maps_{slug}.csv")
        want = maps[(maps.trial_id == tid) & (maps.epoch == 1)]
        assert len(got) == sum(w * w for w in want.window)
        for m in want.itertuples():
            side = m.window
            g = got[(got.layer == m.layer) & (got["head"] == m.head)]
            r = side // 2
            idx = (g.y + r) * side + (g.x + r)  # row-major: row = y shift, column = x shift
            np.testing.assert_allclose(g.prob.to_numpy(), np.asarray(m.probs)[idx.to_numpy()])


def test_trajectories_csv(paper, paper_figures):
    paper_figures = paper_figures[0]
    heads = read_table(paper / "tables", "heads")
    got = pd.read_csv(paper_figures / "trajectories_sa-learned-nh4-dp8.csv")
    want = heads[heads.trial_id == "learned"].sort_values(["layer", "head", "epoch"])
    assert list(got.epoch) == list(want.epoch) and list(got["head"]) == list(want["head"])
    np.testing.assert_allclose(
        got[["center_x", "center_y"]].to_numpy(), want[["center_x", "center_y"]].to_numpy()
    )


def _brute_lattice_distance(centres: np.ndarray) -> float:
    pts = np.array([(x, y) for y in (-1, 0, 1) for x in (-1, 0, 1)], dtype=float)
    cost = np.linalg.norm(centres[:, None] - pts[None], axis=-1)
    perms = np.array(list(itertools.permutations(range(9))))
    return float(cost[np.arange(9), perms].mean(axis=1).min())


def test_conv_likeness_csv(paper, paper_figures):
    paper_figures = paper_figures[0]
    heads = read_table(paper / "tables", "heads")
    # one figure for the variant: its two seeds aggregated (mean, min, max over seeds)
    got = pd.read_csv(paper_figures / "conv_likeness_sa-quadratic-isotropic-nh9.csv")
    assert (
        len(got) == (1 + 2) * 2 and set(got.K) == {3} and set(got.seeds) == {2}
    )  # (init + 2 epochs) x layers
    assert sorted(set(got.epochs_trained)) == [0, 1, 2]  # from the untrained model
    for r in got.itertuples():
        per_seed = []
        for tid in ("iso-s0", "iso-s1"):
            g = heads[(heads.trial_id == tid) & (heads.epoch == r.epoch) & (heads.layer == r.layer)]
            per_seed.append(
                (_brute_lattice_distance(g[["center_x", "center_y"]].to_numpy()), g.max_prob.mean())
            )
        dist = [d for d, _ in per_seed]
        assert r.lattice_distance == pytest.approx(np.mean(dist), rel=1e-9)
        assert (r.lattice_distance_min, r.lattice_distance_max) == pytest.approx(
            (min(dist), max(dist)), rel=1e-9
        )
        assert r.max_prob_mean == pytest.approx(np.mean([m for _, m in per_seed]), rel=1e-12)


def test_sweep_heatmap_csv(sweep, tmp_path):
    from analysis import style
    from analysis.figures import conv_likeness, sweeps
    from analysis.figures.context import Context

    style.setup()
    ctx = Context(study=analysis.load(sweep), out=tmp_path)
    files = sweeps.draw(ctx)
    png = tmp_path / "heatmap_isotropic_x_num_heads.png"
    assert files == [png, png.with_suffix(".pdf"), png.with_suffix(".csv")]
    _check_image(png)
    runs = _runs(sweep)
    want = (
        runs.assign(isotropic=runs.isotropic.astype(str), num_heads=runs.num_heads.astype(str))
        .groupby(["isotropic", "num_heads"])["best_test_acc"]
        .agg(seeds="count", mean="mean")
        .reset_index()
    )
    got = pd.read_csv(png.with_suffix(".csv"), dtype={"isotropic": str, "num_heads": str})
    got = got.sort_values(["isotropic", "num_heads"]).reset_index(drop=True)
    assert list(zip(got.isotropic, got.num_heads)) == list(zip(want.isotropic, want.num_heads))
    assert list(got.seeds) == list(want.seeds) and got.seeds.max() == 2
    np.testing.assert_allclose(got.best_test_acc_mean, want["mean"], rtol=1e-12)
    # N_h = 1 is a 1×1 convolution's lattice; N_h = 4 is no K×K lattice with K odd
    ctx.study.heads = ctx.study.heads[ctx.study.heads.trial_id.isin(["nh1-iso", "nh4-aniso"])]
    ctx.study.runs = ctx.study.runs[ctx.study.runs.trial_id.isin(["nh1-iso", "nh4-aniso"])]
    conv_likeness.draw(ctx)
    assert (tmp_path / "conv_likeness_sa-quadratic-isotropic-nh1.csv").exists()
    assert (
        "skipped conv_likeness for SA quadratic non-isotropic (N_h=4): needs N_h = K² heads with K odd, has 4"
        in ctx.skipped
    )


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.7])
def test_isotropic_50_percent_circle_radius(sigma):
    """The plotted contour of a Gaussian head with Σ = σ² I (as the heads figure
    computes it from a heads row) is the circle of radius σ·√(2 ln 2)."""
    row = pd.DataFrame(
        [
            {
                "layer": 0,
                "head": 0,
                "center_x": 1.5,
                "center_y": -2.0,
                "param_inv_cov_xx": sigma**-2,
                "param_inv_cov_xy": 0.0,
                "param_inv_cov_yy": sigma**-2,
            }
        ]
    )
    d, missing = heads_fig.curves(row, None)
    assert not missing
    c = d[(d.kind == "contour") & (d.level == 0.5)]
    radius = np.hypot(c.x - 1.5, c.y + 2.0)
    np.testing.assert_allclose(radius, sigma * math.sqrt(2 * math.log(2)), rtol=0.01)
    c90 = d[(d.kind == "contour") & (d.level == 0.9)]
    np.testing.assert_allclose(
        np.hypot(c90.x - 1.5, c90.y + 2.0), sigma * math.sqrt(-2 * math.log(0.1)), rtol=0.01
    )


def test_non_isotropic_ellipse_axes_match_sigma_eigenvalues():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(2, 2)) + np.eye(2)
    sigma = a @ a.T + 0.3 * np.eye(2)
    prec = np.linalg.inv(sigma)
    xs, ys = gaussian_ellipse((0.3, -0.7), (prec[1, 1], prec[0, 1], prec[0, 0]), 0.5, points=2001)
    # (x, y) = (column, row): Σ of (x, y) from the (row, col)-indexed matrix above
    sig_xy = np.array([[sigma[1, 1], sigma[0, 1]], [sigma[0, 1], sigma[0, 0]]])
    lam, vec = np.linalg.eigh(sig_xy)
    r = math.sqrt(-2 * math.log(0.5))
    d = np.stack([xs - 0.3, ys + 0.7], axis=1)
    dist = np.linalg.norm(d, axis=1)
    np.testing.assert_allclose([dist.min(), dist.max()], np.sqrt(lam) * r, rtol=1e-4)
    major = d[np.argmax(dist)] / dist.max()
    assert abs(abs(major @ vec[:, 1]) - 1) < 1e-4  # the long axis is Σ's top eigenvector


def test_window_mass_contour_encloses_the_smallest_region():
    from matplotlib.path import Path as MplPath

    r = 7
    y, x = np.mgrid[-r : r + 1, -r : r + 1]
    g = np.exp(-0.5 * ((x - 1.3) ** 2 / 3.0 + (y + 0.6) ** 2 / 1.2))
    g /= g.sum()
    for p in (0.5, 0.9):
        paths = window_contours(g.ravel(), 2 * r + 1, p)
        assert len(paths) == 1
        inside = MplPath(np.column_stack(paths[0])).contains_points(np.column_stack([x.ravel(), y.ravel()]))
        assert np.array_equal(inside, g.ravel() > mass_level(g, p))
        assert g.ravel()[inside].sum() >= p and g.ravel()[inside].sum() - g.ravel()[inside].min() < p
    assert window_contours(0.4 * g.ravel(), 2 * r + 1, 0.5) == []  # the window holds 40 %


def test_lattice_distance_zero_on_lattice_and_grows():
    for k in (1, 3, 5):
        pts = lattice(k)
        assert lattice_distance(pts) == 0.0
        assert lattice_distance(pts[::-1]) == 0.0  # any order of heads
    pts = lattice(3)
    moved = [lattice_distance(pts * (1 + t)) for t in (0.0, 0.1, 0.3, 0.6)]
    assert moved[0] == 0 and all(a < b for a, b in zip(moved, moved[1:]))
    one = pts.copy()
    one[4] += (0.3, 0.4)  # one head of nine off by 0.5
    assert lattice_distance(one) == pytest.approx(0.5 / 9)
    assert [kernel_size(n) for n in (1, 4, 9, 16, 25)] == [1, None, 3, None, 5]
    with pytest.raises(ValueError):
        lattice_distance(np.zeros((4, 2)))


def test_variant_labels_and_sweep_axes():
    """Labels add only what tells trials of one name apart; sweep axes must cross."""
    from analysis.variants import sweep_axes, variant_labels

    runs = pd.DataFrame(
        {
            "trial_id": list("abcde"),
            "name": ["Q", "Q", "Q", "L", "R"],
            "arch": ["sa"] * 4 + ["resnet18"],
            "hidden": [400] * 5,
            "lr": [0.1, 0.2, 0.1, 0.1, 0.1],
            "seed": [0, 0, 1, 0, 0],
        }
    )
    assert list(variant_labels(runs)) == ["Q, lr=0.1", "Q, lr=0.2", "Q, lr=0.1", "L", "R"]
    heads = pd.DataFrame(
        {
            "num_heads": [4, 4, 9, 9],
            "isotropic": [True, False, True, False],
            "pos_dim": [3, 5, 3, 5],
            "encoding": ["quadratic"] * 4,
        }
    )
    assert sweep_axes(heads) == ["isotropic", "num_heads"]  # pos_dim follows isotropic
    nested = pd.DataFrame(
        {
            "encoding": ["quadratic", "quadratic", "learned"],
            "isotropic": [True, False, None],
            "num_heads": [9, 9, 9],
        }
    )
    assert sweep_axes(nested) == ["encoding"]  # isotropic does not apply to learned heads


def test_refresh_sees_parts_written_since(paper, tmp_path):
    tables = tmp_path / "tables"
    (tables / "runs").mkdir(parents=True)
    s = analysis.load(tables)
    assert len(s.runs) == 0 and len(s.sql("SELECT * FROM runs")) == 0
    shutil.copy(paper / "tables" / "runs" / "learned.parquet", tables / "runs")
    s.refresh()
    assert list(s.runs.trial_id) == ["learned"] and list(s.sql("SELECT trial_id FROM runs").trial_id) == [
        "learned"
    ]


def test_query_command_imports_neither_pandas_nor_torch(paper):
    """`analysis query` goes DuckDB → rows → text: pandas and pyarrow.compute (a second of
    start-up on a 2-core machine, half of a query's CPU time on a 64 × 300 study) and torch
    are never imported on that path."""
    code = (
        "import contextlib, io, sys\n"
        "from analysis.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    rc = main(['query', {str(paper)!r}, 'SELECT count(*) AS n FROM heads', '--format', 'csv'])\n"
        "bad = [m for m in ('pandas', 'pyarrow.compute', 'torch') if m in sys.modules]\n"
        "answered = out.getvalue().split()[0] == 'n'\n"
        "sys.exit(f'imported {bad}' if bad else (rc or (0 if answered else 'no answer')))\n"
    )
    run_fresh(code)


def _linked_study(tmp_path: Path, name: str, target) -> Path:
    from study.results.tables import part_path, write_part

    study = tmp_path / "studies" / name
    tables = study / "tables"
    write_part(part_path(tables, "runs", "c000-s000"), [{"trial_id": "c000-s000", "status": "finished"}])
    write_part(
        part_path(tables, "epochs", "c000-s000", 0), [{"trial_id": "c000-s000", "epoch": 0, "test_acc": 0.3}]
    )
    (study / "study.yaml").write_text(f"name: {name}\ndata: synthetic\n")
    (tables / "epochs" / "zz").symlink_to(target(tables) if callable(target) else target)
    return study


@pytest.mark.parametrize("target", ["/etc", "/", "outside", "loop"])
@pytest.mark.parametrize(
    "command", [["query", "{s}", "SELECT count(*) FROM epochs"], ["figures", "{s}"], ["report", "{s}"]]
)
def test_a_link_out_of_the_study_in_its_tables_is_refused_in_one_line(tmp_path, target, command):
    """A link under tables/ to /etc printed a warning per file of /etc (1,116 lines) and a
    link to / walked the disk: every analysis command refuses it, exit 2, one line, in
    well under the time a walk would take, and writes nothing."""
    import time

    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.parquet").write_bytes(b"PAR1")
    targets = {"outside": tmp_path / "outside", "loop": lambda tables: tables}
    study = _linked_study(tmp_path, "linked", targets.get(target, target))
    before = sorted(p.name for p in study.iterdir())
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "analysis", *(c.format(s=study) for c in command)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "tables/epochs/zz: a link" in r.stderr, (
        r.stderr
    )
    assert time.monotonic() - start < 30 and sorted(p.name for p in study.iterdir()) == before


def test_a_link_inside_the_study_is_read_like_its_target(tmp_path):
    """Only links out of the study (or looping) are refused: one to a folder of the study is read."""
    from study.results.tables import check_links

    study = _linked_study(tmp_path, "inner", lambda tables: tables.parent / "kept")
    (study / "kept").mkdir()
    check_links(study / "tables")  # no error
