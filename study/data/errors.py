"""The one error type of the data layer."""

from __future__ import annotations

from study.errors import one_line


class DataError(ValueError):
    """A data source that cannot be used: ``str(error)`` is ONE line naming the path (and the
    file inside it) and what is wrong, ready for ``study train: error: <message>``."""

    def __init__(self, message: str):
        super().__init__(one_line(message))
