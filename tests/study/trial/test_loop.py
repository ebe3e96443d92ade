"""One trial (training loop, tables, checkpoints, divergence), on synthetic data, CPU."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from study.models import ModelConfig
from study.trial import TrainConfig, train_trial
from study.trial.checkpoint import load_checkpoint
from study.trial.schedule import learning_rate
from tests.conftest import VARIANT_IDS, VARIANTS


def tiny(encoding="quadratic", isotropic=True, **kw):
    pos_dim = 8 if encoding == "learned" else None  # learned_content (query form): pos_dim = hidden
    base = dict(
        hidden=32,
        layers=2,
        intermediate=48,
        num_heads=4,
        encoding=encoding,
        isotropic=isotropic,
        pos_dim=pos_dim,
    )
    return ModelConfig(**{**base, **kw})


def read(root, table):
    from study.results.tables import read_table

    return read_table(root, table)


@pytest.mark.parametrize("encoding,isotropic", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.slow
def test_tiny_model_learns_synthetic_data(encoding, isotropic, tmp_path):
    cfg = TrainConfig(
        model=tiny(encoding, isotropic, hidden=16, layers=1, intermediate=32, num_heads=2),
        data="synthetic:500",
        epochs=3,
        batch_size=25,
        lr=0.1,
        warmup=0.1,
        head_images=10,
    )
    result = train_trial(cfg, trial_id="t", tables=tmp_path)
    assert result.status == "finished"
    assert result.final_test_acc > 0.4, result  # chance is 0.1
    epochs = read(tmp_path, "epochs")
    assert list(epochs.epoch) == [0, 1, 2]
    heads = read(tmp_path, "heads")
    assert len(heads) == (1 + 3) * 1 * 2  # (init + epochs) x layers x heads
    assert sorted(set(heads.epoch)) == [-1, 0, 1, 2]
    assert (
        heads[["center_x", "center_y", "entropy", "max_prob", "attention_distance", "attention_entropy"]]
        .notna()
        .all()
        .all()
    )
    gaussian = encoding == "quadratic"
    assert heads.param_center_x.notna().all() == gaussian
    maps = read(tmp_path, "maps")
    assert len(maps) == (1 + 3) * 1 * 2 and (maps.window == 15).all()
    # a window of a distribution: non-negative, at most all of its mass
    assert all(len(p) == 15 * 15 and min(p) >= 0 and 0 < sum(p) <= 1 + 1e-5 for p in maps.probs)
    runs = read(tmp_path, "runs")
    assert len(runs) == 1 and runs.status.iloc[0] == "finished" and runs.epochs_done.iloc[0] == 3
    assert runs.n_params.iloc[0] > 0 and runs.flops.iloc[0] > 0
    assert runs.failed_to_train.isna().all()  # it trained (study.trial.verdict)


def _config(**kw):
    return TrainConfig(model=tiny(), data="synthetic:200", epochs=4, batch_size=20, head_images=10, **kw)


@pytest.mark.slow
def test_resume_continues_exactly(tmp_path):
    straight, resumed = tmp_path / "a", tmp_path / "b"
    train_trial(_config(), trial_id="t", tables=straight / "tables", checkpoint_dir=straight / "ckpt")
    # 2 epochs, then the process "dies" (after the epoch-2 checkpoint), then resume

    class Killed(Exception):
        pass

    def die_after_two(metrics, ckpt):
        if metrics["epoch"] == 1:
            raise Killed

    with pytest.raises(Killed):
        train_trial(
            _config(),
            trial_id="t",
            tables=resumed / "tables",
            checkpoint_dir=resumed / "ckpt",
            report=die_after_two,
        )
    assert load_checkpoint(resumed / "ckpt")["epoch"] == 2
    train_trial(_config(), trial_id="t", tables=resumed / "tables", checkpoint_dir=resumed / "ckpt")
    a, b = load_checkpoint(straight / "ckpt"), load_checkpoint(resumed / "ckpt")
    assert a["epoch"] == b["epoch"] == 4
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    cols = ["trial_id", "epoch", "train_loss", "train_acc", "test_loss", "test_acc", "lr"]
    ea, eb = read(straight / "tables", "epochs")[cols], read(resumed / "tables", "epochs")[cols]
    pd.testing.assert_frame_equal(ea.reset_index(drop=True), eb.reset_index(drop=True))
    assert len(eb) == 4  # (trial, epoch) unique despite the second call


def _init_rows(root):
    heads = read(root, "heads")
    return heads[heads.epoch == -1].sort_values(["layer", "head"]).reset_index(drop=True)


@pytest.mark.parametrize("encoding,isotropic", VARIANTS, ids=VARIANT_IDS)
def test_heads_table_records_the_untrained_model_once_per_head(encoding, isotropic, tmp_path):
    """epoch −1 of ``heads`` (and ``maps``) is the untrained model: one row per (layer,
    head), the statistics of the seeded model as built, before any training step."""
    from study.data import load_splits
    from study.models import build_model
    from study.trial.headstats import collect_head_stats

    cfg = TrainConfig(
        model=tiny(encoding, isotropic, hidden=16, layers=2, intermediate=32, num_heads=4),
        data="synthetic:100",
        epochs=1,
        batch_size=50,
        head_images=10,
        lr=0.5,
    )
    train_trial(cfg, trial_id="t", tables=tmp_path)
    init = _init_rows(tmp_path)
    assert list(zip(init.layer, init["head"])) == [(li, h) for li in range(2) for h in range(4)]
    maps = read(tmp_path, "maps")
    assert (maps.epoch == -1).sum() == 2 * 4
    assert len(read(tmp_path, "epochs")) == 1  # epochs: trained epochs only
    # the statistics of the untrained model (built as the trial builds it), not of the trained one
    splits = load_splits(cfg.data, seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model.replace(num_classes=len(splits.classes))).eval()
    from study.data import DeviceData

    data = DeviceData(splits.test_images[:10], splits.test_labels[:10], device=torch.device("cpu"))
    expected, _ = collect_head_stats(model, data.normalise(data.images), radius=cfg.map_radius)
    np.testing.assert_allclose(
        init.attention_distance, [r["attention_distance"] for r in expected], rtol=1e-6
    )
    trained = read(tmp_path, "heads").query("epoch == 0").sort_values(["layer", "head"])
    assert not np.allclose(trained.attention_distance, init.attention_distance, rtol=1e-6)


@pytest.mark.long
def test_init_row_is_written_once_across_a_kill_and_resume(tmp_path):
    """Killed in epoch 0 (before any checkpoint), the trial restarts from scratch and
    rewrites the same init part; resumed from a later checkpoint it does not record
    the (trained) model as the init again: the init rows equal those of a straight run."""
    straight, resumed = tmp_path / "a", tmp_path / "b"
    train_trial(_config(), trial_id="t", tables=straight / "tables", checkpoint_dir=straight / "ckpt")

    class Killed(Exception):
        pass

    def die_at(epoch):
        def report(metrics, ckpt):
            if metrics["epoch"] == epoch:
                raise Killed

        return report

    kill_before_checkpoint = die_at(0)
    with pytest.raises(Killed):  # raised after epoch 0's tables, before report returns: no resume point used
        train_trial(_config(), trial_id="t", tables=resumed / "tables", report=kill_before_checkpoint)
    with pytest.raises(
        Killed
    ):  # from scratch again (no checkpoint dir), then dies after epoch 1's checkpoint
        train_trial(
            _config(),
            trial_id="t",
            tables=resumed / "tables",
            checkpoint_dir=resumed / "ckpt",
            report=die_at(1),
        )
    train_trial(_config(), trial_id="t", tables=resumed / "tables", checkpoint_dir=resumed / "ckpt")
    a, b = _init_rows(straight / "tables"), _init_rows(resumed / "tables")
    assert len(b) == 2 * 4  # layers x heads, once
    cols = ["layer", "head", "attention_distance", "attention_entropy", "mean_distance"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert sorted(read(resumed / "tables", "epochs").epoch) == [0, 1, 2, 3]


def test_diverging_trial_is_recorded(tmp_path):
    cfg = _config(lr=1e6, warmup=0.0)
    result = train_trial(cfg, trial_id="bad", tables=tmp_path)
    assert result.status == "diverged"
    runs = read(tmp_path, "runs")
    assert runs.status.iloc[0] == "diverged"
    assert runs.epochs_done.iloc[0] == result.epochs_done < 4
    if (tmp_path / "epochs").exists():
        assert read(tmp_path, "epochs").train_loss.map(math.isfinite).all()


def test_checkpoint_refuses_code(tmp_path):
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    from study.errors import CheckpointError

    (tmp_path / "checkpoint.pt").write_bytes(pickle.dumps({"model": Evil()}))
    with pytest.raises(CheckpointError) as e:  # refused (weights_only), never executed
        load_checkpoint(tmp_path)
    assert "UnpicklingError" in str(e.value) and "checkpoint.pt" in str(e.value)


def test_cosine_schedule_with_warmup():
    kw = dict(
        steps_per_epoch=10, epochs=10, base_lr=0.1, warmup_steps=TrainConfig(epochs=10).warmup_steps_for(10)
    )
    lrs = [learning_rate(step=s, **kw) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1 / 5) and lrs[4] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    assert lrs[-1] < 1e-3


@pytest.mark.parametrize(
    "epoch,lr",
    [(0, 0.1), (78, 0.1), (79, 0.01), (148, 0.01), (149, 1e-3), (248, 1e-3), (249, 1e-4), (299, 1e-4)],
)
def test_step_schedule_is_the_resnet_recipe(epoch, lr):
    """MultiStepLR([80, 150, 250], gamma 0.1) stepped at the start of every epoch (the
    original's train.py): the lr drops at the start of 0-based epochs 79, 149, 249."""
    kw = dict(steps_per_epoch=3, epochs=300, base_lr=0.1, schedule="step")
    for s in (3 * epoch, 3 * epoch + 2):  # constant within the epoch
        assert learning_rate(step=s, **kw) == pytest.approx(lr, rel=1e-12)


def _original_step_lrs(milestones, epochs: int) -> list[float]:
    """Per-epoch lr of the original's loop: ``scheduler.step()`` first thing in every
    epoch, the first included, then that epoch's optimisation steps."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(milestones), gamma=0.1)
    lrs = []
    for _ in range(epochs):
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
    return lrs


def test_step_schedule_matches_the_originals_multisteplr_loop():
    """The same lr in every one of 300 epochs as torch's MultiStepLR stepped the way
    the original steps it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # torch's "step() before optimizer.step()" notice: the original's order
        expected = _original_step_lrs((80, 150, 250), 300)
    got = [
        learning_rate(step=e, steps_per_epoch=1, epochs=300, base_lr=0.1, schedule="step") for e in range(300)
    ]
    assert got == pytest.approx(expected, rel=1e-12)
    assert [e for e in range(1, 300) if got[e] < got[e - 1]] == [79, 149, 249]


@pytest.mark.parametrize(
    "epochs,milestones",
    [
        (300, (80, 150, 250)),
        (100, (27, 50, 83)),
        (30, (8, 15, 25)),
        (600, (160, 300, 500)),
        (7, (2, 4, 6)),
        (2, (1, 1, 2)),
        (1, (0, 1, 1)),
    ],
)
def test_step_milestones_scale_with_epochs(epochs, milestones):
    """For E epochs each milestone is ⌊m·E/300 + ½⌋ (docs/design.md §3, "step schedule"), applied
    as the original applies its milestones: per epoch the same lr as its MultiStepLR
    loop with those milestones, so the last epoch is at 1e-4 for every E."""
    import warnings

    from study.trial.schedule import step_drop_epochs, step_milestones

    assert step_milestones(epochs) == milestones
    assert step_drop_epochs(epochs) == tuple(max(m - 1, 0) for m in milestones)
    got = [
        learning_rate(step=e, steps_per_epoch=1, epochs=epochs, base_lr=0.1, schedule="step")
        for e in range(epochs)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert got == pytest.approx(_original_step_lrs(milestones, epochs), rel=1e-12)
    assert got[-1] == pytest.approx(1e-4)


def test_study_train_command(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "study",
        "train",
        "--data",
        "synthetic:100",
        "--epochs",
        "2",
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
        "--out",
        str(out),
    ]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert [ln.split()[1] for ln in r.stderr.splitlines() if ln.startswith("epoch ")] == ["1/2", "2/2"]
    assert (
        len(read(out / "tables", "epochs")) == 2 and read(out / "tables", "runs").status.iloc[0] == "finished"
    )
    bad = subprocess.run(
        args[:5] + [str(tmp_path / "missing.tar.gz")] + args[6:-1] + [str(tmp_path / "b")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--data" in bad.stderr and "missing.tar.gz" in bad.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("encoding,isotropic", VARIANTS, ids=VARIANT_IDS)
def test_superseded_attempt_stops_and_writes_nothing_more(encoding, isotropic, tmp_path):
    """A node cut off from Ray (its raylet dead but not reaped, a network partition)
    keeps training while Tune retries the trial elsewhere: once a newer attempt has
    started (the ledger's count), the old one writes no further table part, ``runs``
    row or ledger entry, and stops with ``SupersededError``."""
    from study.errors import SupersededError
    from study.trial.ledger import TrialLedger

    uri = tmp_path / "trials" / "t.json"
    cfg = TrainConfig(
        model=tiny(encoding, isotropic, hidden=16, layers=1, intermediate=32, num_heads=2),
        data="synthetic:200",
        epochs=4,
        batch_size=20,
        head_images=10,
    )
    old = TrialLedger(uri=uri)
    old.start()

    def newer_attempt_after_epoch_1(metrics, ckpt):
        if metrics["epoch"] == 1:
            TrialLedger(uri=uri).start()  # Tune's retry on another node

    with pytest.raises(SupersededError, match="attempt 1 .* attempt 2"):
        train_trial(
            cfg, trial_id="t", tables=tmp_path / "tables", report=newer_attempt_after_epoch_1, ledger=old
        )
    assert sorted(read(tmp_path / "tables", "epochs").epoch) == [0, 1]
    assert len(read(tmp_path / "tables", "heads").query("epoch > 1")) == 0
    runs = read(tmp_path / "tables", "runs")
    assert runs.status.tolist() == ["running"] and runs.epochs_done.tolist() == [2]
    assert TrialLedger(uri=uri).read()["attempts"] == 2  # the old attempt's clock never wrote over it
    old.fail("anything")  # its failure is not the trial's: nothing recorded
    assert TrialLedger(uri=uri).read()["last_error"] is None
