"""Learning-rate schedules as pure functions of the global step (no scheduler state
to checkpoint: resuming at step s gives exactly the lr of an uninterrupted run)."""

from __future__ import annotations

import math

#: The original ResNet18 recipe (train.py): MultiStepLR milestones of a 300-epoch run.
STEP_MILESTONES = (80, 150, 250)
STEP_EPOCHS = 300
STEP_GAMMA = 0.1


def step_milestones(epochs: int) -> tuple[int, ...]:
    """``MultiStepLR`` milestones of an ``epochs``-epoch run: [80, 150, 250] at 300
    epochs, scaled as ⌊m·epochs/300 + ½⌋ otherwise (e.g. [27, 50, 83] at 100 epochs).
    Milestones that coincide divide there once per milestone."""
    return tuple(math.floor(m * epochs / STEP_EPOCHS + 0.5) for m in STEP_MILESTONES)


def step_drop_epochs(epochs: int) -> tuple[int, ...]:
    """0-based epochs from which the lr is multiplied by another ``STEP_GAMMA``.  The
    original (epfml/attention-cnn ``train.py``) calls ``scheduler.step()`` at the start of
    every epoch, the first included, so milestone M applies from epoch M − 1: 79, 149, 249
    at 300 epochs (26, 49, 82 at 100); a scaled milestone 0 (E = 1) from the first."""
    return tuple(max(m - 1, 0) for m in step_milestones(epochs))


def learning_rate(
    *,
    step: int,
    steps_per_epoch: int,
    epochs: int,
    base_lr: float,
    schedule: str = "cosine",
    warmup_steps: int = 0,
) -> float:
    """lr for optimisation step ``step`` (0-based).  ``cosine``: linear warm-up over the
    first ``warmup_steps`` steps (base_lr/warmup_steps up to base_lr; the number of steps:
    :meth:`study.trial.config.TrainConfig.warmup_steps_for`), then cosine decay to 0 at the
    last step.  ``step``: the original ResNet18 recipe, ``MultiStepLR(milestones=[80, 150,
    250], gamma=0.1)`` stepped per epoch (:func:`step_drop_epochs`)."""
    total = steps_per_epoch * epochs
    if schedule == "step":
        epoch = step // steps_per_epoch
        return base_lr * STEP_GAMMA ** sum(epoch >= d for d in step_drop_epochs(epochs))
    warm = warmup_steps
    if step < warm:
        return base_lr * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
