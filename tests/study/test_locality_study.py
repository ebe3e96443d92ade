"""Issue 21's acceptance end to end: one study with all seven attention encodings (the
paper's four variants, GPSA, relative bias, RoPE) runs through ``study run``, and
``analysis figures`` draws the attention-distance, locality-over-training and gate
figures from its tables (asserted on the figures' data)."""

from __future__ import annotations

import pandas as pd
import pytest

from study.results.tables import read_table
from tests.helpers import TINY, run_cli, write_spec

pytestmark = pytest.mark.slow

SEVEN = [
    {"encoding": "quadratic", "isotropic": True},
    {"encoding": "quadratic", "isotropic": False},
    {"encoding": "learned", "pos_dim": 8},
    {"encoding": "learned_content"},
    {"encoding": "gpsa"},
    {"encoding": "relative_bias"},
    {"encoding": "rope2d", "rope_mode": "mixed"},
]


@pytest.mark.long
def test_a_study_of_all_seven_encodings_runs_and_draws_the_locality_figures(tmp_path):
    spec = write_spec(tmp_path, "seven", epochs=2, model={**TINY, "num_heads": 4}, models=SEVEN)
    r = run_cli(tmp_path, "run", str(spec), "--storage", "st", "--num-cpus", "2", "--quiet", timeout=1500)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = run_cli(tmp_path, "figures", "st/seven", "--out", "figs", "--no-pdf", module="analysis", timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    figs = tmp_path / "figs"
    runs = read_table(tmp_path / "st/seven/tables", "runs")
    assert sorted(runs.status) == ["finished"] * 7
    names = set(runs.name)
    assert len(names) == 7
    distance = pd.read_csv(figs / "attention_distance.csv")
    assert set(distance.model) == names
    assert distance.groupby("model").layer.nunique().eq(TINY["layers"]).all()
    assert set(distance.metric) == {"attention_distance"}  # one measure for every encoding
    assert ((distance.distance > 0) & (distance.distance < 16)).all()
    over = pd.read_csv(figs / "locality_over_training.csv")
    assert set(over.model) == names and set(over.epoch) == {-1, 0, 1}  # from the untrained model
    gates = pd.read_csv(figs / "gates_over_training.csv")
    assert set(gates.model) == {"SA GPSA (N_h=4)"}  # the only gated encoding
    assert ((gates.gate > 0) & (gates.gate < 1)).all()
    assert (figs / "gates_over_training.png").stat().st_size > 0
