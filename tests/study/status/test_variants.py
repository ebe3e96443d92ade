"""One label per model variant wherever a user reads one: the end-of-study summary,
``study status``, the report's tables and Table 1 (``study.status.variants.variant_labels``).
Fabricated ``runs`` rows: no Ray run needed."""

import pandas as pd

from analysis.variants import variant_labels as analysis_labels
from study.status.bookkeeping import status_table
from study.status.variants import variant_labels
from study.tuning.runner import summary

NAME = "SA quadratic isotropic (N_h=9)"


def grid_over_lr(**extra) -> pd.DataFrame:
    """Two learning rates of a grid, two seeds each, one model name."""
    n = 4
    return pd.DataFrame(
        {
            "trial_id": [f"t{i}" for i in range(n)],
            "study": "s",
            "name": NAME,
            "status": "finished",
            "arch": "sa",
            "encoding": "quadratic",
            "isotropic": True,
            "num_heads": 9,
            "hidden": 400,
            "lr": [0.05, 0.05, 0.1, 0.1],
            "seed": [0, 1, 0, 1],
            "epochs": 3,
            "epochs_done": 3,
            "best_test_acc": [0.41, 0.43, 0.52, 0.50],
            "final_test_acc": [0.40, 0.42, 0.51, 0.50],
            "device_seconds": 12.0,
            "updated_at": 1.0e9,
            **extra,
        }
    )


def summary_rows(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("best trial per model configuration"))
    return [ln for ln in lines[start + 1 :] if ln.startswith("  ")]


def test_summary_names_each_learning_rate_of_a_grid_as_table_1_does():
    runs = grid_over_lr()
    rows = summary_rows(summary(runs))
    # before: two identical lines "SA quadratic isotropic (N_h=9)"
    assert len(rows) == 2, rows
    assert rows[0].split()[:6] == [*f"{NAME}, lr=0.1".split(), "t2"], rows  # the best first: lr 0.1, seed 0
    assert rows[1].split()[:6] == [*f"{NAME}, lr=0.05".split(), "t1"], rows
    table1 = set(analysis_labels(runs))
    assert table1 == {f"{NAME}, lr=0.05", f"{NAME}, lr=0.1"}
    assert {r.split("  ")[1].strip() for r in rows} == table1


def test_summary_shows_a_sampled_search_as_one_variant_with_its_best_value():
    """Values Optuna sampled are a search inside a variant: one line, the best trial's value."""
    runs = grid_over_lr(sampled_lr=[0.05, 0.05, 0.1, 0.1])
    rows = summary_rows(summary(runs))
    assert len(rows) == 1 and rows[0].split("  ")[1].strip() == NAME, rows
    assert "  t2  lr=0.1  " in rows[0], rows


def test_status_names_each_trial_by_its_variant():
    text = status_table(grid_over_lr(), 4)
    lines = {ln.split()[0]: ln for ln in text.splitlines()[2:]}
    assert f"{NAME}, lr=0.05" in lines["t0"] and f"{NAME}, lr=0.1" in lines["t3"], text
    assert text.splitlines()[1].split()[:2] == ["trial_id", "variant"], text


def test_report_tables_name_each_trial_by_its_variant():
    from analysis.report import _failures, _progress

    runs = grid_over_lr()
    page = _progress(runs, pd.DataFrame())
    assert page.count(f"<td>{NAME}, lr=0.05</td>") == 2 and page.count(f"<td>{NAME}, lr=0.1</td>") == 2, page
    runs.loc[3, "status"] = "error"
    assert f"<td>{NAME}, lr=0.1</td>" in _failures(runs)


def test_one_label_function_for_study_and_analysis():
    runs = grid_over_lr()
    assert analysis_labels is variant_labels
    # a label names what differs between trials of one name, never the seed
    assert list(variant_labels(runs.assign(lr=0.1))) == [NAME] * 4
