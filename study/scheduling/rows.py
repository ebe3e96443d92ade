"""Transitions of a trial's ``runs`` row that the driver writes (the trial writes ``running``,
``finished`` and ``diverged`` itself): ``error`` after its last attempt, ``stopped`` when the
scheduler ended it early, and, once the run is over, no row left ``running``: each becomes
``stopped`` or ``interrupted`` (docs/reliability.md; docs/design.md §9 "Interrupts and failures").
An ``OSError`` of the tables' storage is the caller's to handle."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from study.results.tables import compact_all, part_path, read_table, write_part


def write_row(tables: str, row: dict[str, Any], *, spent: float | None = None) -> None:
    """Write ``row`` as plain Python (NumPy scalars unwrapped; a NaN ``error`` is None); ``spent``: the
    ledger's device-seconds, kept where more than the row's."""
    if spent is not None:
        row = {**row, "device_seconds": max(float(spent), float(row.get("device_seconds") or 0.0))}
    row = {k: v.item() if hasattr(v, "item") else v for k, v in row.items()}
    if isinstance(row.get("error"), float) and math.isnan(row["error"]):
        row["error"] = None
    write_part(part_path(tables, "runs", row["trial_id"]), [{**row, "updated_at": time.time()}])


def _row(tables: str, key: str) -> dict[str, Any] | None:
    rows = read_table(tables, "runs").query("trial_id == @key")
    return rows.iloc[0].to_dict() if len(rows) else None


def config_row(config: dict[str, Any], *, key: str, ray_trial_id: str, study: str) -> dict[str, Any]:
    """A ``runs`` row for a trial that failed before it wrote one: the resolved configuration
    the sampler gave it (``config["train"]``, :meth:`study.scheduling.sampler.GridSampler.ask`)."""
    from study.models import model_name
    from study.trial.config import TrainConfig

    row: dict[str, Any] = {
        "trial_id": key,
        "ray_trial_id": ray_trial_id,
        "study": study,
        "cell": config.get("cell"),
        "sample": config.get("sample"),
        "epochs_done": 0,
        "best_test_acc": math.nan,
        "final_test_acc": math.nan,
        "device_seconds": 0.0,
        **{f"sampled_{k}": v for k, v in (config.get("sampled") or {}).items()},
    }
    if "train" in config:
        cfg = TrainConfig.from_dict(config["train"])
        row.update(name=model_name(cfg.model), **cfg.flat())
    return row


def mark_error(
    tables: str,
    key: str,
    *,
    why: str,
    attempts: int,
    spent: float | None,
    otherwise: Callable[[], dict[str, Any]],
) -> None:
    """The trial ``key`` failed its last attempt: its row (``otherwise()`` where it wrote none)
    becomes ``error`` with the cause ``why`` and its ``attempts``."""
    row = _row(tables, key) or otherwise()
    write_row(tables, {**row, "status": "error", "error": why, "attempts": attempts}, spent=spent)


def mark_stopped(tables: str, key: str) -> bool:
    """The scheduler ended the trial ``key`` while its row says ``running`` short of its epochs
    (ASHA stopped it): the row becomes ``stopped`` at once, so a resume after a lost driver keeps
    that decision.  True if the row changed."""
    row = _row(tables, key)
    if row is None or row["status"] != "running" or row["epochs_done"] >= row["epochs"]:
        return False
    write_row(tables, {**row, "status": "stopped"})
    return True


def settle_rows(
    tables: str,
    *,
    completed: set[str],
    stopping: bool,
    storage_error: str | None,
    spent: Callable[[str], float | None],
) -> None:
    """After the scheduler returns: parts compacted, and no row stays ``running``.  Ended early by the
    scheduler (in ``completed``, short of its epochs, the run not ``stopping``) -> ``stopped``; else
    -> ``interrupted``, with the cause ``StorageError: ...`` after a storage failure.  ``spent(key)``:
    the device-seconds of its ledger (which count an epoch cut short)."""
    compact_all(tables)  # what trials left uncompacted (stopped early, killed)
    runs = read_table(tables, "runs")
    for r in runs[runs.status == "running"].to_dict("records"):
        early = r["trial_id"] in completed and not stopping and r["epochs_done"] < r["epochs"]
        r["status"] = "stopped" if early else "interrupted"
        if storage_error is not None and not r.get("error"):
            r["error"] = f"StorageError: {storage_error}"
        # the time of an epoch cut short is only in the ledger (its clock ran while it did)
        write_row(tables, r, spent=spent(r["trial_id"]))
