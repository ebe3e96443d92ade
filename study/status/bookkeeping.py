"""What ``study status`` and ``study list`` print, from the ``runs`` table alone (read-only); when a
``running`` trial shows as **stale**: docs/study-files.md, "Running a study"."""

from __future__ import annotations

import time

import pandas as pd

from study.status.variants import variant_labels

STALE_FACTOR = 3.0
STALE_MIN_S = 300.0
STALE_UNKNOWN_S = 3600.0


def shown_status(runs: pd.DataFrame, *, now: float | None = None) -> pd.Series:
    """``runs.status`` with ``running`` trials that stopped updating shown as ``stale``."""
    status = runs["status"].astype(str).copy()
    if runs.empty or "updated_at" not in runs:
        return status
    now = time.time() if now is None else now
    age = now - pd.to_numeric(runs["updated_at"], errors="coerce")
    done = pd.to_numeric(runs["epochs_done"], errors="coerce")
    world = pd.to_numeric(runs.get("world_size", pd.Series(1, index=runs.index)), errors="coerce").fillna(1)
    # mean wall seconds per epoch (NaN before the first); stale after STALE_FACTOR of them without an update:
    seconds = pd.to_numeric(runs["device_seconds"], errors="coerce")
    per_epoch = (seconds / (done * world.clip(lower=1))).where(done > 0)
    longest = per_epoch.max()
    fallback = STALE_UNKNOWN_S if pd.isna(longest) else max(STALE_MIN_S, STALE_FACTOR * longest)
    limit = (STALE_FACTOR * per_epoch).clip(lower=STALE_MIN_S).fillna(fallback)
    stale = (status == "running") & (age > limit)
    status[stale] = "stale"
    return status


def did_not_train(runs: pd.DataFrame) -> pd.Series:
    """Whether each trial did not train after its warm-up (``runs.failed_to_train``, written by
    :mod:`study.trial.verdict`; tables written before the column have none)."""
    if "failed_to_train" not in runs:
        return pd.Series(False, index=runs.index)
    return runs["failed_to_train"].notna() & (runs["failed_to_train"].astype(str) != "")


def _counts(status: pd.Series) -> str:
    return ", ".join(f"{n} {s}" for s, n in status.value_counts().items())


def status_table(runs: pd.DataFrame, planned: int | None, *, now: float | None = None) -> str:
    head = f"{len(runs)} trials recorded" + (f" of {planned} planned" if planned else "")
    if not len(runs):
        return head
    runs = runs.assign(status=shown_status(runs, now=now))
    lines = [f"{head}: {_counts(runs.status)}"]
    stale = (runs.status == "stale").any()
    # each trial's model variant, named as Table 1 and the end-of-study summary name it
    runs = runs.assign(variant=variant_labels(runs))
    cols = ["trial_id", "variant", "status", "epochs_done", "epochs", "best_test_acc", "device_seconds"]
    # a trial that did not train shows so beside its state (its accuracy is not a result)
    failed = did_not_train(runs)
    runs = runs.assign(status=runs.status.where(~failed, runs.status + " (did not train)"))
    frame = runs[[c for c in cols if c in runs]].rename(
        columns={"epochs_done": "epoch", "best_test_acc": "best_acc", "device_seconds": "device_s"}
    )
    width = int(frame["variant"].str.len().max())
    lines.append(
        frame.to_string(
            index=False, float_format=lambda v: f"{v:.4f}", formatters={"variant": lambda v: f"{v:<{width}}"}
        )
    )
    if failed.any():
        lines.append(
            f"did not train: {int(failed.sum())} of {len(runs)} trials (runs.failed_to_train): their "
            "accuracies are not results"
        )
        lines += [f"  {tid}: {why}" for tid, why in zip(runs.trial_id[failed], runs.failed_to_train[failed])]
    if stale:
        lines.append(
            f"stale: 'running' but not updated for over {STALE_FACTOR:g}x its epoch time (at least "
            f"{STALE_MIN_S:g} s): its driver or node died; `study resume` continues it"
        )
    return "\n".join(lines)


def study_line(name: str, runs: pd.DataFrame, planned: int | None, *, now: float | None = None) -> dict:
    """One row of ``study list``: name, trials recorded/planned, status counts, last update."""
    last = pd.to_numeric(runs.get("updated_at", pd.Series(dtype=float)), errors="coerce").max()
    return {
        "name": name,
        "trials": f"{len(runs)}/{planned}" if planned else str(len(runs)),
        "statuses": _counts(shown_status(runs, now=now)) if len(runs) else "-",
        "last_update": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last)) if pd.notna(last) else "-",
    }
