"""One trial: data → model → training loop → tables and checkpoints."""

from .config import TrainConfig

__all__ = ["TrainConfig", "TrialResult", "train_trial"]


def __getattr__(name):  # the loop (torch, data) is imported only when used
    if name in ("TrialResult", "train_trial"):
        from . import loop

        return getattr(loop, name)
    raise AttributeError(name)
