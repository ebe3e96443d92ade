"""The run contract of ``study run`` / ``study resume`` on the driver: a Tune callback and a
Tune stopper writing the ``error`` / ``interrupted`` rows and stopping every trial on a signal
or a storage failure (docs/design.md §9 "Interrupts and failures"; docs/reliability.md)."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
from typing import Any

from ray.tune import Callback, Stopper
from ray.tune.stopper import NoopStopper

from study.errors import EXIT_OK, EXIT_STORAGE, EXIT_TRIAL_ERROR
from study.storage import is_remote
from study.tables import compact_all, part_path, read_table, write_part

RESERVE = ".study-reserve"
RESERVE_BYTES = 1 << 20
#: the cause of an attempt that recorded none: its process ended from outside
DIED = "WorkerDied: the trial's process died unexpectedly (killed, out of memory or its node was lost)"

#: A second SIGINT/SIGTERM this soon after the first is the same request delivered
#: twice (SLURM's ``scancel`` signals every process of the job: the driver, and the
#: batch script that passes its own signal on to the driver); a later one stops at once.
DUPLICATE_SIGNAL_S = 2.0


class _StopAll(Stopper):
    """Tune's stopper: every trial stops once the contract asks (a signal, a storage failure)."""

    def __init__(self, contract: RunContract):
        self.contract = contract

    def __call__(self, trial_id=None, result=None) -> bool:
        return self.contract.stopping

    stop_all = __call__  # every trial, as one

    def __reduce__(self):  # Tune pickles its run config: the stopper is only live in this driver
        return (NoopStopper, ())


class RunContract(Callback):
    def __init__(self, *, meta: dict[str, Any], prog: str, show_tracebacks: bool = False, lock=None):
        self.meta, self.prog, self.show_tracebacks, self.lock = meta, prog, show_tracebacks, lock
        self.root, self.tables = meta["root"], meta["tables"]
        self.signal: int | None = None
        self.storage_error: str | None = None
        self.completed: set[str] = set()
        self._signal_at = 0.0
        self.stopper = _StopAll(self)

    def __reduce__(self):  # Tune pickles its run config; nothing reads it back
        return (Callback, ())

    @property
    def stopping(self) -> bool:
        return self.signal is not None or self.storage_error is not None

    def say(self, line: str) -> None:
        print(f"{self.prog}: {line}", file=sys.stderr, flush=True)

    def install(self) -> None:
        """Take over SIGINT/SIGTERM (Tune's own SIGINT handler off, its documented
        switch), keep the reserve, and print no trial's traceback unless ``--verbose``."""
        if not self.show_tracebacks:
            os.environ["TUNE_PRINT_ALL_TRIAL_ERRORS"] = "0"
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        if not is_remote(self.root):
            try:
                with open(os.path.join(self.root, RESERVE), "wb") as f:
                    os.posix_fallocate(f.fileno(), 0, RESERVE_BYTES)
            except OSError:
                self._free_reserve()

    def _free_reserve(self) -> None:
        if not is_remote(self.root):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.root, RESERVE))

    def uninstall(self) -> None:
        self._free_reserve()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def _on_signal(self, signum, frame) -> None:
        if self.signal is not None:
            if time.monotonic() - self._signal_at < DUPLICATE_SIGNAL_S:
                return  # the same request delivered twice (DUPLICATE_SIGNAL_S)
            os._exit(
                128 + signum
            )  # a second signal: stop now, every table row and checkpoint as last written
        self.signal, self._signal_at = signum, time.monotonic()
        self.say(
            f"{signal.Signals(signum).name} received: stopping the study "
            f"(continue with `study resume {self.meta['name']}`)"
        )

    def storage_failed(self, why: str | OSError, *, more: str = "") -> None:
        """Stop every trial; ``why``: one line, or the ``OSError`` of the tables' storage."""
        if isinstance(why, OSError):
            why = f"{why.filename or self.tables}: {why.strerror or why}{more}"
        self._free_reserve()  # room for the trials' marks
        if self.storage_error is None:
            self.storage_error = why
            self.say(f"storage failed: {why}; stopping the study")

    def exit_code(self, runs) -> int:
        if self.storage_error is not None:
            return EXIT_STORAGE
        if self.signal is not None:
            return 128 + self.signal
        if len(runs) and (runs.status == "error").any():
            return EXIT_TRIAL_ERROR
        return EXIT_OK

    def _key(self, trial) -> str | None:
        return (trial.config or {}).get("key")

    def _ledger(self, key: str) -> dict:
        from study.tuning.trainable import ledger

        try:
            return ledger(self.meta, key).read()
        except (OSError, ValueError):  # unreadable: the cause is unknown, the count Tune's
            return {}

    def _failed(self, trial, *, final: bool) -> None:
        key = self._key(trial)
        if key is None:
            return
        book = self._ledger(key)
        why = book.get("last_error") or DIED
        attempts = int(book.get("attempts") or trial.num_failures or 1)
        if not final:
            self.say(f"trial {key} failed (attempt {attempts}): {why}; retrying from its last checkpoint")
        else:
            self.say(f"trial {key} error after {attempts} attempt(s): {why}")
            try:
                old = read_table(self.tables, "runs").query("trial_id == @key")
                row = old.iloc[0].to_dict() if len(old) else self._row_from_config(trial, key)
                _write(
                    self.tables,
                    {**row, "status": "error", "error": why, "attempts": attempts},
                    spent=book.get("device_seconds"),
                )
            except OSError as e:
                self.storage_failed(e)
        if why.startswith("StorageError"):
            self.storage_failed(why.split(":", 1)[1].strip())

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._failed(trial, final=False)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._failed(trial, final=True)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get("warning"):
            self.say(f"trial {self._key(trial)}: warning: {result['warning']}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        """A trial the scheduler ended early (its row still ``running``: ASHA stopped
        it) is marked ``stopped`` at once, so a resume after a lost driver keeps ASHA's
        decision instead of training it on."""
        key = self._key(trial)
        if key is None or self.stopping:
            return
        self.completed.add(key)
        if (trial.last_result or {}).get("status") != "running":
            return  # its final report (finished, diverged) or none: its row is as it wrote it
        row = read_table(self.tables, "runs").query("trial_id == @key")
        if len(row) and row.status.iloc[0] == "running" and row.epochs_done.iloc[0] < row.epochs.iloc[0]:
            try:
                _write(self.tables, {**row.iloc[0].to_dict(), "status": "stopped"})
            except OSError as e:
                self.storage_failed(e)

    def on_step_end(self, iteration, trials, **info):
        if self.lock is not None:
            self.lock.heartbeat()

    def _row_from_config(self, trial, key: str) -> dict[str, Any]:
        """A ``runs`` row for a trial that failed before it wrote one: the resolved
        configuration the searcher gave it (``config["train"]``)."""
        from study.models import model_name
        from study.trial.config import TrainConfig

        config = trial.config or {}
        row: dict[str, Any] = {
            "trial_id": key,
            "ray_trial_id": trial.trial_id,
            "study": self.meta["name"],
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

    def settle(self) -> None:
        """After Tune returns: parts compacted, and no row stays ``running``.  Interrupted
        (signal, storage failure, or never seen to end) -> ``interrupted``, with the
        device-seconds of its ledger (which count an epoch cut short); ended early by
        the scheduler -> ``stopped`` (normally marked already when it ended)."""
        try:
            compact_all(self.tables)  # what trials left uncompacted (stopped early, killed)
            runs = read_table(self.tables, "runs")
            for r in runs[runs.status == "running"].to_dict("records"):
                early = (
                    r["trial_id"] in self.completed and not self.stopping and r["epochs_done"] < r["epochs"]
                )
                r["status"] = "stopped" if early else "interrupted"
                if self.storage_error is not None and not r.get("error"):
                    r["error"] = f"StorageError: {self.storage_error}"
                # the time of an epoch cut short is only in the ledger (its clock ran while it did)
                _write(self.tables, r, spent=self._ledger(r["trial_id"]).get("device_seconds"))
        except OSError as e:
            self.storage_failed(
                e, more=" (trials could not be marked; `study status` shows them as last written)"
            )


def _write(tables: str, row: dict[str, Any], *, spent: float | None = None) -> None:
    """``row`` as plain Python (NumPy scalars unwrapped; a NaN ``error`` is None); ``spent``: the
    ledger's device-seconds, kept where more than the row's."""
    if spent is not None:
        row = {**row, "device_seconds": max(float(spent), float(row.get("device_seconds") or 0.0))}
    row = {k: v.item() if hasattr(v, "item") else v for k, v in row.items()}
    if isinstance(row.get("error"), float) and math.isnan(row["error"]):
        row["error"] = None
    write_part(part_path(tables, "runs", row["trial_id"]), [{**row, "updated_at": time.time()}])
