"""Sub-commands of the ``study`` CLI; each module has ``register(subparsers)``."""

from __future__ import annotations

import contextlib

from study.errors import UsageError


@contextlib.contextmanager
def refused(errors, prefix: str = ""):
    """An exception of ``errors`` raised inside as the command's one-line refusal: ``prefix`` + its text, exit 2."""
    try:
        yield
    except errors as e:
        raise UsageError(f"{prefix}{e}") from None
