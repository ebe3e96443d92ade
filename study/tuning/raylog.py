"""Ray's own log lines: in the study's ``logs/ray.log``, on the console only with ``--verbose``
(docs/design.md §10 "Quiet output"), through the ``ray`` logger's handlers alone (nothing of Ray's is
patched)."""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import sys
import tempfile
from types import SimpleNamespace

#: the study folder's log file of Ray's driver-side lines
RAY_LOG = "logs/ray.log"
#: the line format of Ray's console, so that the file reads like it
FORMAT = "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"
#: records kept in memory before the study's folder exists (Ray's start-up logs a handful;
#: a full buffer is emptied)
KEPT = 10_000


#: the kept records, the echo to stderr, the file, and the logger's own handlers and propagate
_STATE = SimpleNamespace(kept=None, echo=None, file=None, saved=None)


class _StudyLog(logging.FileHandler):
    """The study's ``ray.log``.  A record it cannot write (a full or vanished storage) is
    dropped: logging's default prints a traceback on the console, and the storage failure
    is the study's to report (one line, exit 3)."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass

    def close(self) -> None:
        with contextlib.suppress(OSError):  # the last flush, on the same full storage
            super().close()


def capture(*, echo: bool = False) -> None:
    """Take over the ``ray`` logger (before ``ray.init``); ``echo`` (``--verbose``) also
    prints on stderr.  Idempotent; a later call may turn ``echo`` on or off."""
    from study.tuning.cluster import import_ray

    import_ray()  # importing Ray adds its console handler to the `ray` logger: first, then replace it

    logger = logging.getLogger("ray")
    if _STATE.saved is None:
        _STATE.saved = (list(logger.handlers), logger.propagate)
        for h in list(logger.handlers):
            logger.removeHandler(h)
        logger.propagate = False
        _STATE.kept = logging.handlers.BufferingHandler(KEPT)
        logger.addHandler(_STATE.kept)
    if echo and _STATE.echo is None:
        _STATE.echo = logging.StreamHandler(sys.stderr)
        _STATE.echo.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(_STATE.echo)
    elif not echo and _STATE.echo is not None:
        logger.removeHandler(_STATE.echo)
        _STATE.echo = None


def log_path(root: str, name: str) -> str:
    if "://" in root:
        return os.path.join(tempfile.gettempdir(), f"study-{name}", "ray.log")
    return os.path.join(root, *RAY_LOG.split("/"))


def to_file(path: str) -> None:
    """Write the kept records and every later one to ``path`` (appended: a resumed study
    adds to its log)."""
    capture(echo=_STATE.echo is not None)
    if _STATE.file is not None and _STATE.file.baseFilename == os.path.abspath(path):
        return
    release()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError:
        return  # never let the log file break the study: the records stay kept
    _STATE.file = _StudyLog(path, delay=True, encoding="utf-8")
    _STATE.file.setFormatter(logging.Formatter(FORMAT))
    for record in list(_STATE.kept.buffer):
        _STATE.file.handle(record)
    _STATE.kept.flush()  # emptied
    logging.getLogger("ray").addHandler(_STATE.file)


def release() -> None:
    """Close the study's log file; later records are kept in memory again."""
    if _STATE.file is not None:
        logging.getLogger("ray").removeHandler(_STATE.file)
        _STATE.file.close()
        _STATE.file = None


def restore() -> None:
    """Give the ``ray`` logger back its handlers from before :func:`capture` (a notebook)."""
    release()
    if _STATE.saved is None:
        return
    logger = logging.getLogger("ray")
    for h in (_STATE.kept, _STATE.echo):
        logger.removeHandler(h)  # None: nothing to remove
    handlers, propagate = _STATE.saved
    for h in handlers:
        logger.addHandler(h)
    logger.propagate = propagate
    _STATE.kept = _STATE.echo = _STATE.saved = None
