"""Table 1 beside the paper (issue 22 §4): rows with a Table 1 model of the paper,
trained on full CIFAR-10 for 300 epochs, show the published accuracy, parameters and
FLOPs; other rows say why none is shown.  Fabricated ``runs`` rows: no training."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from analysis.figures import table1
from analysis.paper import TABLE1, paper_row
from analysis.variants import trial_table

SA = dict(arch="sa", hidden=400, layers=6, intermediate=512, num_heads=9)
FULL = dict(data="cifar10", subset=None, n_train=50_000, n_val=0, n_test=10_000, epochs=300, epochs_done=300)


def _row(trial_id: str, model: dict, budget: dict, acc: float) -> dict:
    return {
        "trial_id": trial_id,
        "study": "t",
        "seed": 0,
        "status": "finished",
        "best_test_acc": acc,
        "final_test_acc": acc,
        "n_params": 1,
        "flops": 2,
        "device_seconds": 1.0,
        "lr": 0.1,
        "isotropic": None,
        "pos_dim": None,
        "positional_score": None,
        "encoding": None,
        **model,
        **budget,
    }


def _table(rows: list[dict]) -> pd.DataFrame:
    runs = pd.DataFrame(rows)
    return table1.data(SimpleNamespace(trials=trial_table(runs)))


def test_paper_values_are_table1_as_published():
    got = {p.model: (p.accuracy, p.params, p.flops) for p in TABLE1}
    assert got == {
        "ResNet18": (0.938, 11.2e6, 0.56e9),
        "SA quadratic emb.": (0.938, 12.1e6, 6.2e9),
        "SA learned emb.": (0.918, 12.3e6, 6.2e9),
        "SA learned emb. + content": (0.871, 29.5e6, 15.1e9),
    }


def test_rows_with_the_papers_model_and_budget_show_the_published_numbers():
    rows = [
        _row("c0", {"arch": "resnet18", "schedule": "step"}, FULL, 0.95),
        _row("c1", {**SA, "encoding": "quadratic", "isotropic": True, "pos_dim": 3}, FULL, 0.93),
        _row("c2", {**SA, "encoding": "learned", "pos_dim": 400}, FULL, 0.91),
        _row(
            "c3",
            {**SA, "encoding": "learned_content", "pos_dim": 400, "positional_score": "query"},
            FULL,
            0.86,
        ),
    ]
    d = _table(rows).set_index("paper_model")
    assert set(d.index) == {p.model for p in TABLE1}
    for p in TABLE1:
        assert (
            d.loc[p.model, "paper_acc"],
            d.loc[p.model, "paper_params"],
            d.loc[p.model, "paper_flops"],
        ) == (p.accuracy, p.params, p.flops)
        assert d.loc[p.model, "paper_note"] == ""
    md = table1.markdown(_table(rows), trial_table(pd.DataFrame(rows)))
    assert "| 93.8 / 11.2M / 0.56G (ResNet18) |" in md
    assert (
        "| 87.1 / 29.5M / 15.1G (SA learned emb. + content) |" in md
        and "| 93.8 / 12.1M / 6.2G (SA quadratic emb.) |" in md
    )
    assert "none shown" not in md


@pytest.mark.parametrize(
    "model,budget,why",
    [
        (
            {**SA, "encoding": "quadratic", "isotropic": True},
            dict(FULL, subset=4000, n_train=4000, n_test=800, epochs=6, epochs_done=6),
            "not the paper's budget: 6 epochs on 4,000 images (paper 300 on 50,000)",
        ),
        (
            {"arch": "resnet18"},
            dict(FULL, epochs=100, epochs_done=100),
            "not the paper's budget: 100 epochs on 50,000 images",
        ),
        (
            {**SA, "encoding": "learned", "pos_dim": 400},
            dict(FULL, n_train=45_000, n_val=5_000),
            "not the paper's budget: 300 epochs on 45,000 images",
        ),
        (
            {**SA, "encoding": "quadratic", "isotropic": True, "hidden": 64},
            FULL,
            "not a model of the paper: D 64 (paper 400)",
        ),
        (
            {**SA, "encoding": "quadratic", "isotropic": False, "pos_dim": 5},
            FULL,
            "not a model of the paper: isotropic False (paper True)",
        ),
        (
            {**SA, "encoding": "learned_content", "pos_dim": 400, "positional_score": "head"},
            FULL,
            "not a model of the paper: positional_score head (paper query)",
        ),
        (
            {**SA, "encoding": "quadratic", "isotropic": True},
            dict(FULL, data="synthetic:120"),
            "not CIFAR-10: synthetic:120",
        ),
    ],
)
def test_other_rows_say_why_no_paper_numbers_are_shown(model, budget, why):
    d = _table([_row("c0", model, budget, 0.5)])
    r = d.iloc[0]
    assert r["paper_model"] == "" and r["paper_acc"] != r["paper_acc"]  # NaN: nothing to compare with
    assert why in r["paper_note"]
    md = table1.markdown(d, trial_table(pd.DataFrame([_row("c0", model, budget, 0.5)])))
    assert f"none shown: {r['paper_note']}" in md


def test_the_jpeg_copy_of_full_cifar10_is_the_papers_budget():
    pub, why = paper_row(
        {**SA, "encoding": "learned", "pos_dim": 400, **FULL, "data": "../shared/data/cifar10-jpeg.tar.gz"}
    )
    assert pub is not None and pub.model == "SA learned emb." and why == ""


@pytest.mark.parametrize("status", ["diverged", "error", "running", "stopped"])
def test_a_row_short_of_its_epochs_says_why_from_its_status(status):
    """A diverged trial is not shown as "(running)" (seen in a GPU study's Table 1: the
    learned + content model diverged after 1 of 3 epochs and read "1/3 (running)")."""
    model = {**SA, "encoding": "quadratic", "isotropic": True}
    rows = [_row("c0", model, dict(FULL, epochs_done=1), 0.2) | {"status": status}]
    md = table1.markdown(_table(rows), trial_table(pd.DataFrame(rows)))
    assert f"| 1/300 ({status}) |" in md
    assert status == "running" or "(running)" not in md


def test_a_trial_that_did_not_train_is_left_out_of_its_rows_accuracy():
    """runs.failed_to_train: the seed at chance is not averaged in; the row, the note and the data
    line say so; a row none of whose trials trained shows no accuracy."""
    from analysis.meta import describe

    learned = {**SA, "encoding": "learned", "pos_dim": 400}
    quad = {**SA, "encoding": "quadratic", "isotropic": True}
    why = "test accuracy 10.0 % within noise of chance (10 % ± 0.9 pp on 10000 images) after the warm-up"
    rows = [
        _row("c0-s0", learned, FULL, 0.80) | {"name": "SA learned", "failed_to_train": None},
        _row("c0-s1", learned, FULL, 0.10) | {"name": "SA learned", "seed": 1, "failed_to_train": why},
        _row("c1-s0", quad, FULL, 0.10) | {"name": "SA quadratic", "failed_to_train": why},
    ]
    d = _table(rows)
    assert len(d) == 2, d["model"].tolist()
    trained, at_chance = (d[d["model"].str.contains(m)].iloc[0] for m in ("learned", "quadratic"))
    assert trained["best_test_acc"] == pytest.approx(0.80) and trained["seeds"] == 1
    assert trained["did_not_train"] == 1 and at_chance["did_not_train"] == 1
    assert at_chance["best_test_acc"] != at_chance["best_test_acc"]  # NaN: no result
    runs = trial_table(pd.DataFrame(rows))
    md = table1.markdown(d, runs)
    assert "| 1 (+1 did not train) |" in md and "| 0 (+1 did not train) |" in md
    assert "Did not train:" in md and "DID NOT TRAIN: 2 of 3 trials" in describe(runs)
