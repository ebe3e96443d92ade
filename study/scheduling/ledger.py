"""The driver's view of a trial's attempt ledger (``<study>/trials/<key>.json``, written by the
trial: :class:`study.trial.ledger.TrialLedger`): its counts and cause, and where its epoch stands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from study.trial.ledger import TrialLedger


def trial_ledger(root: str, key: str) -> TrialLedger:
    """The ledger of the trial ``key`` of the study stored at ``root``."""
    return TrialLedger(uri=f"{root}/trials/{key}.json")


def ledger_fields(root: str, key: str) -> dict[str, Any]:
    """The ledger's fields; {} where it is missing or unreadable (the cause is unknown then,
    and the attempt count is the scheduler's)."""
    try:
        return trial_ledger(root, key).read()
    except (OSError, ValueError):
        return {}


def ledger_probe(root: str | None) -> Callable[[str], tuple[int, float, float] | None] | None:
    """``probe(key)``: ``(epoch, fraction done, seconds into it)`` of a running trial from its
    ledger, or None between epochs or without a ledger; None without a study folder ``root``."""
    if root is None:
        return None

    def probe(key: str) -> tuple[int, float, float] | None:
        d = trial_ledger(root, key).read()
        p = d.get("epoch"), d.get("epoch_fraction"), d.get("epoch_seconds")
        return None if None in p else (int(p[0]), float(p[1]), float(p[2]))

    return probe
