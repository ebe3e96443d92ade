"""A trial's attempt ledger: ``<study>/trials/<trial_id>.json`` (or ``trial.json``
beside ``study train --out``'s checkpoint).

Written at the START of every attempt (``attempts`` + 1) and after every epoch
(``device_seconds`` so far), so attempts are counted even when a worker dies before
its first checkpoint, and the time of every completed epoch of every attempt adds
up (an epoch killed half-way is not measured).  Plain JSON, replaced atomically
(one PUT on object storage).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _remote(uri: str) -> bool:
    return "://" in uri


class TrialLedger:
    def __init__(self, *, uri: str):
        self.uri = str(uri)
        self.attempts = 0
        self.device_seconds = 0.0
        self.last_error: str | None = None

    def read(self) -> dict[str, Any]:
        try:
            if _remote(self.uri):
                import pyarrow.fs as pafs

                fs, path = pafs.FileSystem.from_uri(self.uri)
                with fs.open_input_stream(path) as f:
                    data = json.loads(f.read())
            else:
                data = json.loads(Path(self.uri).read_text())
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self) -> None:
        text = json.dumps({"attempts": self.attempts, "device_seconds": self.device_seconds,
                           "last_error": self.last_error})
        if _remote(self.uri):
            import pyarrow.fs as pafs

            fs, path = pafs.FileSystem.from_uri(self.uri)
            with fs.open_output_stream(path) as f:
                f.write(text.encode())
            return
        path = Path(self.uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def start(self) -> tuple[int, float]:
        """Count a new attempt; returns (this attempt's number, device-seconds before it)."""
        data = self.read()
        self.attempts = int(data.get("attempts", 0)) + 1
        self.device_seconds = float(data.get("device_seconds", 0.0))
        self.last_error = None
        self._write()
        return self.attempts, self.device_seconds

    def fail(self, cause: str) -> None:
        """Record why this attempt failed (one line, read by the driver)."""
        data = self.read()
        self.attempts = int(data.get("attempts", self.attempts))
        self.device_seconds = float(data.get("device_seconds", self.device_seconds))
        self.last_error = cause
        self._write()

    def update(self, device_seconds: float) -> None:
        self.device_seconds = float(device_seconds)
        self._write()
