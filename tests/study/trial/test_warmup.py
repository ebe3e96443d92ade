"""The learning-rate warm-up in its three forms (a fraction of all steps, epochs, steps): one
resolution (:meth:`TrainConfig.warmup_steps_for`), the schedule it drives, the ``runs`` row
that records it, and the refusal of two forms at once (issue 43)."""

import itertools
import math

import pytest

from study.models import ModelConfig
from study.models.config import ConfigError
from study.trial import TrainConfig, train_trial
from study.trial.config import WARMUP_FIELDS
from study.trial.schedule import learning_rate

#: 10 steps an epoch, 10 epochs: each form gives the same 25-step warm-up
STEPS, EPOCHS, WARM = 10, 10, 25
FORMS = [{"warmup": 0.25}, {"warmup_epochs": 2.5}, {"warmup_steps": 25}]
FORM_IDS = list(WARMUP_FIELDS)


@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
def test_each_warmup_form_ramps_the_lr_over_its_steps_then_decays_by_cosine(form):
    cfg = TrainConfig(epochs=EPOCHS, lr=0.1, **form)
    warm = cfg.warmup_steps_for(STEPS)
    assert warm == WARM

    def lr(step):
        return learning_rate(
            step=step, steps_per_epoch=STEPS, epochs=EPOCHS, base_lr=cfg.lr, warmup_steps=warm
        )

    assert lr(0) == pytest.approx(0.1 / WARM, rel=1e-12)
    assert lr(WARM - 2) == pytest.approx(0.1 * (WARM - 1) / WARM, rel=1e-12)
    assert lr(WARM - 1) == pytest.approx(0.1, rel=1e-12)  # the ramp's last step reaches the base lr
    assert lr(WARM) == pytest.approx(0.1, rel=1e-12)  # the cosine starts there
    last = STEPS * EPOCHS - 1
    assert lr(last) == pytest.approx(
        0.05 * (1 + math.cos(math.pi * (last - WARM) / (last + 1 - WARM))), rel=1e-12
    )


def test_no_warmup_given_is_the_papers_five_percent_of_all_steps():
    cfg = TrainConfig()
    assert (cfg.warmup, cfg.warmup_epochs, cfg.warmup_steps) == (0.05, None, None)
    assert cfg.warmup_steps_for(500) == 7_500  # 5 % of 300 epochs of 500 steps = 15 epochs
    assert TrainConfig(warmup_epochs=15).warmup_steps_for(500) == cfg.warmup_steps_for(500)


def test_a_warmup_of_zero_steps_starts_at_the_base_lr():
    assert learning_rate(step=0, steps_per_epoch=STEPS, epochs=EPOCHS, base_lr=0.1, warmup_steps=0) == 0.1


@pytest.mark.parametrize(
    "a,b",
    list(itertools.combinations(range(3), 2)),
    ids=[f"{FORM_IDS[a]}+{FORM_IDS[b]}" for a, b in itertools.combinations(range(3), 2)],
)
def test_two_warmup_forms_are_refused_naming_both(a, b):
    with pytest.raises(ConfigError) as e:
        TrainConfig(**FORMS[a], **FORMS[b])
    assert e.value.field == WARMUP_FIELDS[b] and WARMUP_FIELDS[a] in e.value.message
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"warmup_epochs": 3.5, "epochs": 3}, "warmup_epochs"),  # longer than the run
        ({"warmup_epochs": -0.5}, "warmup_epochs"),
        ({"warmup_epochs": "2"}, "warmup_epochs"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"warmup_steps": 2.5}, "warmup_steps"),
        ({"warmup_steps": True}, "warmup_steps"),
        ({"warmup": 1.0}, "warmup"),
    ],
)
def test_a_warmup_out_of_its_bounds_is_refused(kw, field):
    with pytest.raises(ConfigError) as e:
        TrainConfig(**kw)
    assert e.value.field == field


@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
def test_replace_with_another_warmup_form_replaces_the_form(form):
    for start in ({}, *FORMS):
        cfg = TrainConfig(epochs=EPOCHS, **start).replace(**form)
        assert cfg.warmup_steps_for(STEPS) == WARM
        assert [k for k in WARMUP_FIELDS if getattr(cfg, k) is not None] == list(form)


def test_runs_row_records_the_warmup_form_given_and_the_epoch_lr_follows_it(tmp_path):
    """Half an epoch of 4 steps: 2 warm-up steps; the ``epochs`` table's lr is the lr of the last step."""
    from study.results.tables import SCHEMA, read_table

    assert set(WARMUP_FIELDS) <= set(SCHEMA["runs"])
    assert {k: TrainConfig().flat()[k] for k in WARMUP_FIELDS} == {
        "warmup": 0.05,
        "warmup_epochs": None,
        "warmup_steps": None,
    }
    model = ModelConfig(hidden=8, layers=1, intermediate=8, num_heads=1)
    cfg = TrainConfig(
        model=model, data="synthetic:40", epochs=1, batch_size=10, head_stats=False, warmup_epochs=0.5
    )
    assert train_trial(cfg, trial_id="t", tables=tmp_path).status == "finished"
    row = read_table(tmp_path, "runs").iloc[0]
    assert row.warmup_epochs == 0.5 and row.warmup is None and row.warmup_steps is None
    lr = learning_rate(step=3, steps_per_epoch=4, epochs=1, base_lr=0.1, warmup_steps=cfg.warmup_steps_for(4))
    assert cfg.warmup_steps_for(4) == 2 and list(read_table(tmp_path, "epochs").lr) == pytest.approx(
        [lr], rel=1e-12
    )


def test_a_checkpoint_from_before_the_warmup_forms_resumes_and_another_form_is_refused():
    from study.errors import CheckpointError
    from study.trial.checkpoint import check_config

    saved = {k: v for k, v in TrainConfig().to_dict().items() if k not in ("warmup_epochs", "warmup_steps")}
    check_config({"train_config": saved}, model_config={}, train_config=TrainConfig().to_dict(), where="ckpt")
    with pytest.raises(CheckpointError, match=r"warmup: 0\.05 -> None; warmup_steps: None -> 300"):
        check_config(
            {"train_config": saved},
            model_config={},
            train_config=TrainConfig(warmup_steps=300).to_dict(),
            where="ckpt",
        )
