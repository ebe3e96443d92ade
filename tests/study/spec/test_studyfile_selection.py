"""Issue 11, trial side: the whole resolved configuration in ``runs`` and in Ray's trial
config, a validation split held out from the training images, and selection (Optuna,
ASHA) on validation accuracy, never on the test set unless a study asks for it."""

import json

import pytest
import torch
import yaml

from study.data import hold_out_validation, load_splits
from study.models import ModelConfig
from study.results.tables import read_table
from study.spec.studyfile import SpecError, load_spec
from study.trial import TrainConfig, train_trial

TINY = {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 2}


def spec_file(tmp_path, doc, name="s"):
    p = tmp_path / f"{name}.yaml"
    p.write_text(
        yaml.safe_dump(
            {"name": name, "data": "synthetic:100", "epochs": 1, "batch_size": 25, "model": TINY, **doc}
        )
    )
    return p


def test_validation_split_is_stratified_disjoint_and_seeded():
    splits = load_splits("synthetic:300")
    a = hold_out_validation(splits, validation=50, seed=0)
    assert len(a.val_labels) == 50 and len(a.train_labels) == 250
    counts = torch.bincount(a.val_labels, minlength=10)
    assert counts.max() - counts.min() <= 1, counts  # stratified by class
    # disjoint: every training image is in exactly one of the two parts
    together = torch.cat([a.train_images, a.val_images]).flatten(1)
    assert len(torch.unique(together, dim=0)) == len(torch.unique(splits.train_images.flatten(1), dim=0))
    same = hold_out_validation(splits, validation=50, seed=0)
    assert torch.equal(same.val_images, a.val_images)
    other = hold_out_validation(splits, validation=50, seed=1)
    assert not torch.equal(other.val_images, a.val_images)
    assert len(hold_out_validation(splits, validation=0.1, seed=0).val_labels) == 30
    assert hold_out_validation(splits, validation=0, seed=0).val_labels is None


def test_spec_validation_defaults_and_errors(tmp_path):
    sampled = load_spec(spec_file(tmp_path, {"sample": {"lr": {"loguniform": [0.01, 0.2]}}}))
    cfg = sampled.train_config(sampled.cells[0])
    assert cfg.validation == 0.1 and sampled.study.scheduler.metric == "val_acc"
    asha = load_spec(spec_file(tmp_path, {"scheduler": {"type": "asha"}}))
    assert asha.train_config(asha.cells[0]).validation == 0.1 and asha.study.scheduler.metric == "val_acc"
    grid = load_spec(spec_file(tmp_path, {"grid": {"num_heads": [1, 2]}}))
    assert grid.train_config(grid.cells[0]).validation == 0
    explicit = load_spec(
        spec_file(
            tmp_path,
            {
                "sample": {"lr": {"uniform": [0.01, 0.2]}},
                "validation": 0,
                "scheduler": {"type": "fifo", "metric": "test_acc"},
            },
        )
    )
    assert explicit.study.scheduler.metric == "test_acc"
    bad = [
        (
            {"sample": {"lr": {"uniform": [0.01, 0.2]}}, "validation": 0},
            "validation: is 0 but the study selects",
        ),
        ({"validation": 100}, "validation: 100 held-out images leave none of the 100 training images"),
        ({"subset": 50, "validation": 60}, "leave none of the 50 training images"),
        ({"validation": 1.5}, "validation: must be a number of training images"),
        (
            {"validation": 0, "scheduler": {"type": "asha", "metric": "val_acc"}},
            "scheduler.metric: val_acc needs",
        ),
    ]
    for doc, message in bad:
        with pytest.raises(SpecError) as e:
            load_spec(spec_file(tmp_path, doc, "bad"))
        assert message in str(e.value) and "\n" not in str(e.value), (doc, str(e.value))


@pytest.mark.slow
def test_runs_records_the_whole_resolved_configuration(tmp_path):
    model = ModelConfig(encoding="learned", pos_dim=4, **TINY, dropout=0.2, attention_dropout=0.0)
    cfg = TrainConfig(
        model=model,
        data="synthetic:120",
        subset=100,
        validation=20,
        epochs=2,
        batch_size=20,
        momentum=0.5,
        head_images=4,
        seed=3,
    )
    result = train_trial(cfg, trial_id="t", tables=tmp_path)
    runs = read_table(tmp_path, "runs")
    row = runs.iloc[0].to_dict()
    for k, v in cfg.flat().items():
        if k != "num_classes":
            assert row[k] == v or (v is None and row[k] is None), k
    assert (row["momentum"], row["intermediate"], row["dropout"], row["attention_dropout"]) == (
        0.5,
        16,
        0.2,
        0.0,
    )
    # sizes actually used: subset 100 → 20 held out, 80 trained on; test capped at max(100 // 5, 100)
    assert (row["n_train"], row["n_val"], row["n_test"]) == (80, 20, 100)
    assert "20 of the training images held out" in row["data_source"]
    epochs = read_table(tmp_path, "epochs")
    assert epochs.val_acc.notna().all() and epochs.val_loss.notna().all() and epochs.test_acc.notna().all()
    assert row["best_val_acc"] == epochs.val_acc.max() == result.best_val_acc
    assert row["final_val_acc"] == epochs.val_acc.iloc[-1]
    # accuracies on 20 images are multiples of 1/20
    assert all(abs(v * 20 - round(v * 20)) < 1e-9 for v in epochs.val_acc)


@pytest.mark.slow
def test_study_train_validation_flag(tmp_path, capsys):
    from study.cli import main

    base = [
        "train",
        "--data",
        "synthetic:100",
        "--epochs",
        "1",
        "--hidden",
        "16",
        "--layers",
        "1",
        "--num-heads",
        "2",
        "--intermediate",
        "16",
        "--batch-size",
        "25",
        "--no-head-stats",
        "--quiet",
    ]
    with pytest.raises(SystemExit) as e:
        main(base + ["--validation", "100", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--validation: 100 held-out images" in err and not (tmp_path / "b").exists()
    assert main(base + ["--validation", "20", "--out", str(tmp_path / "a")]) == 0
    assert "best val acc" in capsys.readouterr().out
    runs = read_table(tmp_path / "a" / "tables", "runs")
    assert (runs.n_train.iloc[0], runs.n_val.iloc[0], runs.validation.iloc[0]) == (80, 20, 20)


@pytest.fixture(scope="module")
def ray_local():
    import ray

    from study.tuning.runner import init_ray

    init_ray(None, num_cpus=2)
    yield
    ray.shutdown()


@pytest.mark.long
def test_sampled_study_tells_optuna_validation_accuracy(tmp_path, ray_local, monkeypatch):
    """The value Optuna's ``tell`` receives is the trial's best validation accuracy."""
    import optuna

    from study.tuning.runner import run_study

    told = []
    original = optuna.study.Study.tell

    def spy(self, trial, values=None, state=None, **kw):
        number = trial if isinstance(trial, int) else trial.number
        told.append((self.trials[number].params["momentum"], values))
        return original(self, trial, values, state=state, **kw)

    monkeypatch.setattr(optuna.study.Study, "tell", spy)
    doc = {
        "data": "synthetic:200",
        "epochs": 2,
        "validation": 20,
        "training": {"head_stats": False},
        "sample": {"momentum": {"uniform": [0.0, 0.9]}},
        "num_samples": 3,
        "grid": {"intermediate": [16, 24]},
        "resources": {"cpus_per_trial": 1},
        "max_concurrent": 2,
    }
    spec = load_spec(spec_file(tmp_path, doc, "sel"))
    runs = run_study(spec, storage=str(tmp_path / "st"), verbose=False)
    assert len(runs) == 6 and (runs.status == "finished").all(), runs
    assert (runs.n_val == 20).all() and (runs.selection_metric == "val_acc").all()
    assert len(told) == 6
    by_momentum = runs.set_index("momentum")
    for momentum, value in told:
        assert value == pytest.approx(by_momentum.loc[momentum, "best_val_acc"], abs=1e-12)
    # the test could not tell them apart if validation and test accuracies agreed
    assert (runs.best_val_acc != runs.best_test_acc).any()
    # Ray's trial config carries the resolved hyper-parameters (params.json, results DataFrame)
    params = [json.loads(p.read_text()) for p in (tmp_path / "st" / "sel").glob("tune/*/params.json")]
    assert len(params) == 6
    for p in params:
        h = p["hparams"]
        row = runs.set_index("trial_id").loc[p["key"]]
        assert h["momentum"] == row.momentum and h["intermediate"] == row.intermediate
        assert h["seed"] == row.seed and h["data"] == row.data and h["validation"] == 20
        assert {"cell", "sample", "key"} <= set(p)
    assert sorted({h["intermediate"] for h in (p["hparams"] for p in params)}) == [16, 24]
    # the summary names the selection metric
    from study.tuning.runner import summary

    assert "chosen by best_val_acc" in summary(runs)
