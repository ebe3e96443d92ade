"""A trial's attempt ledger: ``<study>/trials/<trial_id>.json`` (or ``trial.json`` beside
``study train --out``'s checkpoint), plain JSON replaced atomically, written when an attempt
starts, after every epoch and every :data:`CLOCK_S` seconds of one (docs/reliability.md "Faults").

(trial, epoch) exactly once: the attempt count is a fencing token.  An attempt superseded by a
newer one finds a larger ``attempts`` at its next check and raises
:class:`~study.errors.SupersededError`, so it writes nothing past the epoch it was in, and never
the ledger; the newer attempt rewrites that epoch under the same part names.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from study.errors import SupersededError
from study.results.atomicio import write_atomic
from study.results.storage import is_remote

#: seconds between two saves of a running epoch's clock (local files / object storage)
CLOCK_S = 1.0
CLOCK_REMOTE_S = 10.0
#: the ledger's fields, in the order written, and their types (a damaged ledger is refused, naming the file)
LEDGER_FIELDS = {
    "attempts": int,
    "device_seconds": (int, float),
    "last_error": str,
    "epoch": int,
    "epoch_fraction": (int, float),
    "epoch_seconds": (int, float),
}


class TrialLedger:
    def __init__(self, *, uri: str):
        self.uri = str(uri)
        self.attempts = 0
        self.device_seconds = 0.0
        self.last_error: str | None = None
        #: (epoch, fraction done, seconds into it) while the clock runs, else None
        self.running: tuple[int, float, float] | None = None

    def read(self) -> dict[str, Any]:
        """The ledger's fields ({} before the first attempt); a damaged one raises, never counts from 0."""
        from study.results.metafile import read_object

        try:
            return read_object(self.uri, fields=LEDGER_FIELDS)
        except FileNotFoundError:
            return {}

    def ensure_current(self) -> None:
        """Raise :class:`SupersededError` if a newer attempt has started since this one."""
        current = int(self.read().get("attempts", 0))
        if current > self.attempts:
            raise SupersededError(self.uri, self.attempts, current)

    def _write(self) -> None:
        values = (self.attempts, self.device_seconds, self.last_error, *(self.running or (None, None, None)))
        write_atomic(self.uri, json.dumps(dict(zip(LEDGER_FIELDS, values))).encode(), suffix=".json")

    def start(self) -> None:
        """Count a new attempt."""
        data = self.read()
        self.attempts = int(data.get("attempts", 0)) + 1
        self.device_seconds = float(data.get("device_seconds", 0.0))
        self.last_error = None
        self._write()

    def fail(self, cause: str) -> None:
        """Record why this attempt failed; nothing if a newer attempt has started (this
        attempt's failure is not the trial's)."""
        data = self.read()
        if int(data.get("attempts", 0)) > self.attempts > 0:
            return
        self.attempts = int(data.get("attempts", self.attempts))
        self.device_seconds = float(data.get("device_seconds", self.device_seconds))
        self.last_error = cause
        self._write()

    def update(self, device_seconds: float) -> None:
        """Save the device-seconds so far, unless superseded (:class:`SupersededError`)."""
        self.ensure_current()
        self.device_seconds = float(device_seconds)
        self._write()

    @contextlib.contextmanager
    def clock(
        self,
        *,
        before: float,
        scale: float = 1.0,
        period: float | None = None,
        epoch: int | None = None,
        fraction: Callable[[], float] | None = None,
    ):
        """While the block (one epoch) runs, save ``device_seconds = before + elapsed x scale``
        (``scale``: the ranks) every ``period`` seconds from a thread, and once more if it
        is left by an exception; with ``epoch`` and ``fraction()`` also where it stands."""
        period = period if period is not None else (CLOCK_REMOTE_S if is_remote(self.uri) else CLOCK_S)
        start = time.perf_counter()
        stop = threading.Event()

        def save() -> None:
            elapsed = time.perf_counter() - start
            if epoch is not None and fraction is not None:
                self.running = (int(epoch), min(max(float(fraction()), 0.0), 1.0), elapsed)
            self.update(before + elapsed * scale)

        def tick() -> None:
            while not stop.wait(period):
                with contextlib.suppress(Exception):  # a storage failure surfaces in the epoch's own writes
                    save()

        thread = threading.Thread(target=tick, name="trial-ledger-clock", daemon=True)
        thread.start()
        failed = True
        try:
            yield
            failed = False
        finally:
            stop.set()
            thread.join()
            if failed:
                with contextlib.suppress(Exception):
                    save()
            self.running = None  # the epoch's own update follows
