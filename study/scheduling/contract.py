"""The run contract of ``study run`` / ``study resume`` on the driver, as a plain state machine:
the stop-all decision (a signal, a storage failure), the one line said for each failure, the rows
written when a trial fails or ends early and when the run is over, and the exit status
(docs/design.md §9 "Interrupts and failures"; docs/reliability.md).  Ray Tune's hooks call it
through :mod:`study.tuning.hooks`."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import Any

from study.errors import EXIT_OK, EXIT_STORAGE, EXIT_TRIAL_ERROR
from study.results.filesystem import is_remote
from study.scheduling.ledger import ledger_fields
from study.scheduling.rows import config_row, mark_error, mark_stopped, settle_rows

RESERVE = ".study-reserve"
RESERVE_BYTES = 1 << 20
#: the cause of an attempt that recorded none: its process ended from outside
DIED = "WorkerDied: the trial's process died unexpectedly (killed, out of memory or its node was lost)"

#: A second SIGINT/SIGTERM this soon after the first is the same request delivered
#: twice (SLURM's ``scancel`` signals every process of the job: the driver, and the
#: batch script that passes its own signal on to the driver); a later one stops at once.
DUPLICATE_SIGNAL_S = 2.0


class RunContract:
    """One run of a study's pending trials: ``meta`` (``study.json``, paths resolved), ``prog``
    (the command named in its lines), ``lock`` (the study's :class:`study.tuning.lock.StudyLock`,
    kept alive by :meth:`heartbeat`)."""

    def __init__(self, *, meta: dict[str, Any], prog: str, lock=None):
        self.meta, self.prog, self.lock = meta, prog, lock
        self.root, self.tables = meta["root"], meta["tables"]
        self.signal: int | None = None
        self.storage_error: str | None = None
        self.completed: set[str] = set()  # trials the scheduler saw end
        self._signal_at = 0.0

    @property
    def stopping(self) -> bool:
        """Every trial must stop: a signal came, or the storage failed."""
        return self.signal is not None or self.storage_error is not None

    def say(self, line: str) -> None:
        print(f"{self.prog}: {line}", file=sys.stderr, flush=True)

    def install(self) -> None:
        """Take over SIGINT/SIGTERM and keep the reserve (room for the trials' marks on a full disk)."""
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGTERM, self.on_signal)
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

    def on_signal(self, signum: int, frame) -> None:
        """The first SIGINT/SIGTERM stops the study; a later one (not a copy: :data:`DUPLICATE_SIGNAL_S`)
        ends the process at once, every table row and checkpoint as last written."""
        if self.signal is not None:
            if time.monotonic() - self._signal_at < DUPLICATE_SIGNAL_S:
                return
            os._exit(128 + signum)
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

    def trial_failed(self, config: dict[str, Any], *, ray_trial_id: str, failures: int, final: bool) -> None:
        """An attempt of the trial of ``config`` (the sampler's) failed: retried, or (``final``) its
        row becomes ``error`` with the cause its ledger recorded (:data:`DIED` if none); a cause
        ``StorageError: ...`` stops the study.  ``failures``: the scheduler's count of them."""
        key = config.get("key")
        if key is None:
            return
        book = ledger_fields(self.root, key)
        why = book.get("last_error") or DIED
        attempts = int(book.get("attempts") or failures or 1)
        if not final:
            self.say(f"trial {key} failed (attempt {attempts}): {why}; retrying from its last checkpoint")
        else:
            self.say(f"trial {key} error after {attempts} attempt(s): {why}")
            try:
                mark_error(
                    self.tables,
                    key,
                    why=why,
                    attempts=attempts,
                    spent=book.get("device_seconds"),
                    otherwise=lambda: config_row(
                        config, key=key, ray_trial_id=ray_trial_id, study=self.meta["name"]
                    ),
                )
            except OSError as e:
                self.storage_failed(e)
        if why.startswith("StorageError"):
            self.storage_failed(why.split(":", 1)[1].strip())

    def trial_reported(self, key: str | None, result: dict[str, Any]) -> None:
        """A trial's report: its ``warning`` (sent once) is said."""
        if result.get("warning"):
            self.say(f"trial {key}: warning: {result['warning']}")

    def trial_ended(self, key: str | None, last_status: str | None) -> None:
        """The scheduler saw the trial ``key`` end, its last report's ``status`` being ``last_status``:
        one it ended early (still ``running``: ASHA stopped it) is marked ``stopped`` at once."""
        if key is None or self.stopping:
            return
        self.completed.add(key)
        if last_status != "running":
            return  # its final report (finished, diverged) or none: its row is as it wrote it
        try:
            mark_stopped(self.tables, key)
        except OSError as e:
            self.storage_failed(e)

    def heartbeat(self) -> None:
        """The scheduler's loop turned: the study's lock is renewed."""
        if self.lock is not None:
            self.lock.heartbeat()

    def settle(self) -> None:
        """After the scheduler returns: no row stays ``running`` (:func:`.rows.settle_rows`)."""
        try:
            settle_rows(
                self.tables,
                completed=self.completed,
                stopping=self.stopping,
                storage_error=self.storage_error,
                spent=lambda key: ledger_fields(self.root, key).get("device_seconds"),
            )
        except OSError as e:
            self.storage_failed(
                e, more=" (trials could not be marked; `study status` shows them as last written)"
            )
