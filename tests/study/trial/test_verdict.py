"""Did a trial train? (study.trial.verdict: runs.failed_to_train, the one rule that `study status`,
Table 1 and the figures' captions read)."""

import math

import numpy as np
import pytest

from study.trial import TrainConfig, train_trial
from study.trial.verdict import CHANCE_SIGMAS, chance_band, failed_to_train
from tests.study.trial.test_loop import read, tiny

CIFAR = dict(num_classes=10, n_test=10_000)


def test_the_chance_band_holds_a_guessers_accuracies():
    """A guesser's accuracies on 10,000 images of 10 classes fall inside the band (99.7 % of them
    for 3 σ), and the band is 10 % ± 0.9 pp."""
    p, half = chance_band(**CIFAR)
    assert p == 0.1 and half == pytest.approx(3 * math.sqrt(0.09 / 10_000)) and CHANCE_SIGMAS == 3
    guesses = np.random.default_rng(0).binomial(10_000, 0.1, size=20_000) / 10_000
    inside = np.abs(guesses - p) <= half
    assert 0.995 < inside.mean() < 0.999


@pytest.mark.parametrize(
    "train_loss,test_loss,test_acc,why",
    [
        (3.01, 3.2, 0.10, "train loss 3.01 and test loss 3.20 > ln 10 = 2.30"),  # shortened SA learned, H100
        (13.09, 9.0, 0.10, "train loss 13.09 and test loss 9.00 > ln 10"),  # SA quadratic, same run
        (2.6, 2.5, 0.05, "train loss 2.60 and test loss 2.50 > ln 10"),  # diverging, below chance
        (2.29, 2.29, 0.100, "test accuracy 10.0 % within noise of chance (10 % ± 0.9 pp on 10000 images)"),
        (2.29, 2.29, 0.108, "test accuracy 10.8 % within noise of chance"),
        (2.29, 2.29, 0.092, "test accuracy 9.2 % within noise of chance"),
    ],
)
def test_a_trial_at_chance_or_past_chances_loss_after_its_warm_up_did_not_train(
    train_loss, test_loss, test_acc, why
):
    assert why in failed_to_train(
        train_loss=train_loss, test_loss=test_loss, test_acc=test_acc, warmed_up=True, **CIFAR
    )


@pytest.mark.parametrize(
    "train_loss,test_loss,test_acc",
    [
        (1.88, 1.7, 0.427),  # the same run with a 0.3 warm-up: it trained
        (2.25, 2.26, 0.112),  # just outside the band: better than a guesser
        (2.25, 2.40, 0.08),  # worse than a guesser, but its training loss is below chance's
        (0.05, 3.5, 0.55),  # over-fitted: a test loss past ln 10 alone is no verdict
        (2.40, 1.9, 0.35),  # a soft-target training loss (MixUp) past ln 10 alone is none either
        (math.nan, math.nan, math.nan),  # non-finite ends the trial as `diverged`: the status says it
    ],
)
def test_a_trial_that_left_chance_is_not_marked(train_loss, test_loss, test_acc):
    assert (
        failed_to_train(
            train_loss=train_loss, test_loss=test_loss, test_acc=test_acc, warmed_up=True, **CIFAR
        )
        is None
    )


def test_an_epoch_inside_the_warm_up_is_not_judged():
    assert failed_to_train(train_loss=5.0, test_loss=5.0, test_acc=0.1, warmed_up=False, **CIFAR) is None


def test_few_test_images_widen_the_band():
    """On 100 images a guesser's accuracy spreads over ±9 pp: 18 % cannot be told from it."""
    few = dict(train_loss=2.0, test_loss=2.0, warmed_up=True, num_classes=10, n_test=100)
    assert failed_to_train(test_acc=0.18, **few)
    assert failed_to_train(test_acc=0.20, **few) is None


def test_the_runs_row_records_a_trial_that_stayed_at_chance(tmp_path):
    """At lr 1e-9 the weights do not move: after the warm-up the trial is at chance, and its
    runs row says why (the trials that learn: tests/study/trial/test_loop.py records null)."""
    cfg = TrainConfig(
        model=tiny(hidden=16, layers=1, intermediate=32, num_heads=2),
        data="synthetic:500",
        epochs=1,
        batch_size=25,
        head_stats=False,
        warmup=0.1,
        lr=1e-9,
    )
    result = train_trial(cfg, trial_id="stays", tables=tmp_path)
    runs = read(tmp_path, "runs")
    assert "after the warm-up" in runs.failed_to_train.iloc[0]
    assert result.failed_to_train == runs.failed_to_train.iloc[0]  # what `study train`'s last line prints
    assert runs.status.iloc[0] == "finished"  # the state is the run's; the verdict is beside it
