"""Learning-rate schedules as pure functions of the global step (no scheduler state
to checkpoint: resuming at step s gives exactly the lr of an uninterrupted run)."""

from __future__ import annotations

import math


def learning_rate(*, step: int, steps_per_epoch: int, epochs: int, base_lr: float,
                  schedule: str = "cosine", warmup: float = 0.05) -> float:
    """lr for optimisation step ``step`` (0-based).

    ``cosine``: linear warm-up over the first ``warmup`` fraction of all steps (from
    base_lr/warmup_steps up to base_lr), then cosine decay to 0 at the last step.
    ``step``: base_lr, divided by 10 after 50 % and again after 83 % of the epochs
    (the original ResNet18 recipe: epochs 150 and 250 of 300), per epoch.
    """
    total = steps_per_epoch * epochs
    if schedule == "step":
        epoch = step // steps_per_epoch
        milestones = (round(0.5 * epochs), round(250 / 300 * epochs))
        return base_lr * 0.1 ** sum(epoch >= m for m in milestones)
    warm = int(round(warmup * total))
    if step < warm:
        return base_lr * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
