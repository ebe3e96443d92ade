"""Issue 24: `analysis figures` scales with seeds — one figure per variant by default,
figures redrawn only when their tables changed (a manifest of input fingerprints per
output), drawing spread over processes, and `analysis report` reusing the same cache.
The study is fabricated with the project's TableWriter (tests/test_locality_figures)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import analysis
from analysis import cli
from analysis.figures import draw_all
from analysis.figures.cache import MANIFEST
from study.results.tables import TableWriter
from tests.analysis.figures.test_locality import LAYERS, TRIALS, head_row, write_study

# two variants: a quadratic one with 3 seeds and a learned one with 1; 2 epochs
SMALL = [TRIALS[0], TRIALS[1], ("q-s2",) + TRIALS[0][1:4] + (2, None), TRIALS[2]]


@pytest.fixture
def small(tmp_path) -> Path:
    return write_study(tmp_path / "small", SMALL, epochs=2)


@pytest.fixture(scope="module")
def _drawn_once(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    root = tmp_path_factory.mktemp("drawn")
    study = write_study(root / "small", SMALL, epochs=2)
    code, lines = _figures(study, "--out", root / "figs", "--jobs", "1")
    assert code == 0
    return study, root / "figs", lines


@pytest.fixture
def drawn(_drawn_once, tmp_path) -> tuple[Path, Path, list[str]]:
    """(study, its figures drawn by a default run, that run's output lines, naming the copy): a
    copy of one drawing per module (copies keep mtimes, which the fingerprints and the tests compare)."""
    study, out, lines = _drawn_once
    shutil.copytree(study, tmp_path / "small")
    shutil.copytree(out, tmp_path / "figs")
    return (
        tmp_path / "small",
        tmp_path / "figs",
        [ln.replace(str(out), str(tmp_path / "figs")) for ln in lines],
    )


def _stamps(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != MANIFEST}


def _figures(*argv) -> tuple[int, list[str]]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli.main(["figures", *map(str, argv)])
    return code, buf.getvalue().splitlines()


@pytest.mark.slow
def test_one_figure_per_variant_and_a_second_run_redraws_nothing(drawn, monkeypatch):
    small, out, first = drawn
    names = {Path(x).name for x in first if not x.startswith("skipped ")}
    # 3 seeds of the quadratic variant: one heads / maps / trajectories / conv-likeness figure for the variant
    assert {n for n in names if n.startswith("heads_")} == {
        "heads_sa-quadratic-isotropic-nh9.png",
        "heads_sa-quadratic-isotropic-nh9.pdf",
        "heads_sa-quadratic-isotropic-nh9.csv",
        "heads_sa-learned-nh4-dp8.png",
        "heads_sa-learned-nh4-dp8.pdf",
        "heads_sa-learned-nh4-dp8.csv",
    }
    conv = pd.read_csv(out / "conv_likeness_sa-quadratic-isotropic-nh9.csv")
    assert set(conv.seeds) == {3}
    before = _stamps(out)
    calls = []
    monkeypatch.setattr("analysis.figures.jobs.execute", lambda renders, **kw: calls.append(renders) or {})
    code, second = _figures(small, "--out", out, "--jobs", "1")
    assert code == 0 and second == first  # the same files and skip lines, in the same order
    assert calls == [[]], "nothing queued for drawing"
    assert _stamps(out) == before


def test_a_changed_trial_redraws_its_variant_and_the_study_wide_figures_only(drawn):
    small, out, _ = drawn
    before = _stamps(out)
    # the learned trial trains one more epoch
    w = TableWriter(small / "tables", trial_id="l-s0")
    w.rows(
        "heads",
        2,
        [
            head_row("l-s0", "learned", 4, None, 2, layer, head)
            for layer in range(LAYERS)
            for head in range(4)
        ],
    )
    w.close()
    code, lines = _figures(small, "--out", out, "--jobs", "1")
    after = _stamps(out)
    changed = {n.rsplit(".", 1)[0] for n in after if after[n] != before.get(n)}
    assert changed == {
        "heads_sa-learned-nh4-dp8",
        "trajectories_sa-learned-nh4-dp8",
        "maps_sa-learned-nh4-dp8",
        "attention_distance",
        "locality_over_training",
        "table1",
    }
    assert (
        pd.read_csv(out / "attention_distance.csv").query("model == 'SA learned (N_h=4, D_p=8)'").epoch.max()
        == 2
    )


def test_files_of_figures_no_longer_drawn_are_removed_and_foreign_files_kept(drawn):
    small, out, _ = drawn
    (out / "notes.txt").write_text("mine")
    assert (out / "heads_sa-learned-nh4-dp8.png").exists()
    for p in (small / "tables").rglob("*"):  # the learned trial is deleted from the study
        if p.is_file() and "l-s0" in str(p):
            p.unlink()
    code, lines = _figures(small, "--out", out, "--jobs", "1")
    assert code == 0 and not list(out.glob("*learned*"))
    assert (out / "notes.txt").read_text() == "mine"
    listed = {Path(x).name for x in lines if not x.startswith("skipped ")}
    assert listed == {p.name for p in out.iterdir()} - {"notes.txt", MANIFEST}


@pytest.mark.long
def test_options_and_formats_are_part_of_the_fingerprint(small, tmp_path):
    out = tmp_path / "figs"
    study = analysis.load(small)
    written, _ = draw_all(study, out, pdf=False, jobs=1)
    assert written and not list(out.glob("*.pdf"))
    stamps = _stamps(out)
    written, _ = draw_all(analysis.load(small), out, pdf=True, jobs=1)  # PDFs asked for: drawn now
    assert {p.suffix for p in written} >= {".png", ".pdf", ".csv"} and list(out.glob("*.pdf"))
    stamps = _stamps(out)
    draw_all(analysis.load(small), out, pdf=False, jobs=1)  # PNGs only: the PNG+PDF entries serve
    assert _stamps(out) == stamps
    draw_all(analysis.load(small), out, epoch=0, pdf=False, jobs=1)  # another epoch: redrawn
    assert set(pd.read_csv(out / "attention_distance.csv").epoch) == {0}
    doc = json.loads((out / MANIFEST).read_text())
    assert all(e["per_seed"] is False for e in doc["jobs"].values())


@pytest.mark.long
def test_per_seed_and_per_variant_figures_live_side_by_side(small, tmp_path):
    out = tmp_path / "figs"
    _figures(small, "--out", out, "--jobs", "1", "--per-seed", "--no-pdf")
    assert {p.name for p in out.glob("heads_*.csv")} == {
        "heads_sa-quadratic-isotropic-nh9-seed0.csv",
        "heads_sa-quadratic-isotropic-nh9-seed1.csv",
        "heads_sa-quadratic-isotropic-nh9-seed2.csv",
        "heads_sa-learned-nh4-dp8.csv",
    }
    _figures(small, "--out", out, "--jobs", "1", "--no-pdf")
    assert "heads_sa-quadratic-isotropic-nh9.csv" in {p.name for p in out.glob("heads_*.csv")}
    assert (out / "heads_sa-quadratic-isotropic-nh9-seed1.csv").exists(), (
        "a default run keeps per-seed figures"
    )


@pytest.mark.long
def test_pool_draws_the_same_data_as_one_process(drawn, tmp_path):
    small, one, _ = drawn
    two = tmp_path / "two"
    written, _ = draw_all(analysis.load(small), two, jobs=2)
    assert sorted(p.name for p in written) == sorted(p.name for p in one.iterdir() if p.name != MANIFEST)
    for csv in one.glob("*.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(csv), pd.read_csv(two / csv.name))


@pytest.mark.slow
def test_report_reuses_the_figures_folder(small, monkeypatch):
    from analysis.report import render

    render(analysis.load(small))
    out = small / "figures"
    stamps = _stamps(out)
    assert any(n.endswith(".png") for n in stamps) and not any(n.endswith(".pdf") for n in stamps)
    queued = []
    real = analysis.figures.jobs.execute
    monkeypatch.setattr(
        "analysis.figures.jobs.execute",
        lambda renders, **kw: queued.append(len(renders)) or real(renders, **kw),
    )
    html = render(analysis.load(small))
    assert queued == [0] and _stamps(out) == stamps
    assert html.count("data:image/png;base64,") == sum(n.endswith(".png") for n in stamps)
