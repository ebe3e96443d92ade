"""The one error type of the data layer."""

from __future__ import annotations


class DataError(ValueError):
    """A data source that cannot be used: ``str(error)`` is ONE line naming the path (and the
    file inside it) and what is wrong, ready for ``study train: error: <message>``."""

    def __init__(self, message: str):
        super().__init__(one_line(message))


def one_line(text: object, *, limit: int = 300) -> str:
    """``text`` squeezed onto one line (whitespace runs → one space), at most ``limit`` chars."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"
