"""Did a trial train?  The one rule behind ``runs.failed_to_train`` (docs/results.md, "Trials
that did not train"), which ``study status``, Table 1 and every figure's caption read.

A shortened paper recipe can leave a model at chance: the paper warms the learning rate up
over 5 % of 300 epochs (7,500 steps), and 5 % of one epoch is 25 steps, after which the
paper's models sit at 10 % on CIFAR-10 or diverge (measured on an H100, docs/performance.md,
"Warm-up"). Such a trial's curves are not a result, so each epoch after the warm-up is judged:

- **the loss climbed past chance's**: both the epoch's mean training loss and the test loss
  exceed ln C, the cross-entropy of the uniform prediction over C classes (ln 10 = 2.30 on
  CIFAR-10; with soft targets, MixUp, CutMix or label smoothing, too): the model predicts worse
  than knowing nothing on the images it trains on and on new ones, i.e. the optimisation
  diverged without reaching inf or NaN (those end the trial as ``diverged``). One loss alone
  is no verdict: an over-fitted model's test loss exceeds ln C while it classifies well;
- **the test accuracy is within noise of chance**: a model that guesses gets each of n test
  images right with probability p = 1/C, so its accuracy has standard deviation
  σ = √(p(1 − p)/n) (binomial); an accuracy within :data:`CHANCE_SIGMAS` σ of p cannot be told
  from guessing (on CIFAR-10's 10,000 test images: 10 % ± 0.9 pp).

The verdict is the latest epoch's: a trial that leaves chance later is cleared then.  Epochs
that end inside the warm-up are not judged (the learning rate has not reached its peak).
"""

from __future__ import annotations

import math

#: half-width of the chance band in standard deviations of a guesser's accuracy (99.7 % of a
#: guesser's accuracies fall inside 3 σ)
CHANCE_SIGMAS = 3.0


def chance_band(*, num_classes: int, n_test: int) -> tuple[float, float]:
    """(p, half-width) of the accuracies a guesser reaches on ``n_test`` images of
    ``num_classes`` balanced classes: p = 1/C, half-width = CHANCE_SIGMAS · √(p(1 − p)/n)."""
    p = 1.0 / num_classes
    return p, CHANCE_SIGMAS * math.sqrt(p * (1.0 - p) / n_test)


def failed_to_train(
    *, train_loss: float, test_loss: float, test_acc: float, num_classes: int, n_test: int, warmed_up: bool
) -> str | None:
    """Why the trial did not train after its warm-up (one line), or None when it trains or is
    still warming up (the rule: this module's docstring)."""
    if not warmed_up or num_classes < 2 or n_test < 1:
        return None
    chance_loss = math.log(num_classes)
    if train_loss > chance_loss and test_loss > chance_loss:
        return (
            f"train loss {train_loss:.2f} and test loss {test_loss:.2f} > ln {num_classes} = "
            f"{chance_loss:.2f} (chance's) after the warm-up"
        )
    p, half = chance_band(num_classes=num_classes, n_test=n_test)
    if abs(test_acc - p) <= half:
        return (
            f"test accuracy {100 * test_acc:.1f} % within noise of chance ({100 * p:.0f} % ± "
            f"{100 * half:.1f} pp on {n_test} images) after the warm-up"
        )
    return None
