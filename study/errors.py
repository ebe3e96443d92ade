"""Exit statuses of ``study`` commands and the one-line cause of a failure."""

from __future__ import annotations

import contextlib

EXIT_OK = 0  # every trial finished (or diverged / was stopped by ASHA)
EXIT_TRIAL_ERROR = 1  # at least one trial ended in ``error`` (see ``runs.error``)
EXIT_USAGE = 2  # bad input (study file, flags, data source): nothing started
EXIT_STORAGE = 3  # storage failed (full, unwritable, vanished, or failed a check)
EXIT_RAY = 4  # Ray could not be started or reached (nothing ran)
EXIT_SIGINT = 130  # interrupted (SIGINT; SIGTERM is 143): state saved, ``study resume NAME``


def printable(text: object) -> str:
    """``str(text)`` with every character that would end or restyle a terminal's line (line breaks, control
    and format characters: ``\\n``, ``\\r``, ``\\x1b``, ``\\x00``, ``\\u2028``, ...) escaped as ``repr``
    escapes it: the one home of how an error shows user text, so an error is always one line."""
    s = str(text)
    return s if s.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def short(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (error lines stay short)."""
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def one_line(text: object, *, limit: int = 300) -> str:
    """``text`` squeezed onto one line (whitespace runs → one space, other control characters escaped:
    :func:`printable`), at most ``limit`` chars."""
    s = printable(" ".join(str(text).split()))
    return s if len(s) <= limit else s[: limit - 1] + "…"


class StudyError(Exception):
    """Base of the project's run-time errors: one line, ``exit_code`` the command's exit
    status.  Each survives ``pickle`` (Ray copies a failed trial's exception to the
    driver): ``__reduce__`` rebuilds it from ``self._init``."""

    exit_code = EXIT_TRIAL_ERROR
    #: keep the message as written (a value quoted in it keeps its blanks: `got '   '`), its line breaks
    #: and other control characters escaped (:func:`printable`); else squeezed by :func:`one_line`
    verbatim = False

    def __init__(self, message: str):
        super().__init__(printable(message) if self.verbatim else one_line(message, limit=500))
        self._init = (message,)

    def __reduce__(self):
        return (type(self), self._init)


class UsageError(StudyError):
    """Bad input (an option, a data source, a storage URI, a study name): nothing started."""

    exit_code = EXIT_USAGE
    verbatim = True


class StudyFileError(UsageError):
    """A study file, or a command-line override of one, that fails its check:
    ``FILE: path.field: problem`` (:class:`study.spec.check.SpecError` is one)."""


class PathError(StudyError):
    """``PATH: what is wrong`` (one line)."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self._init = (path, reason)
        self.path, self.reason = str(path), reason


class StorageError(PathError):
    """The study's storage failed (disk full, unwritable, vanished): names the path."""

    exit_code = EXIT_STORAGE


class CheckpointError(StudyError):
    """A checkpoint that cannot be used (damaged, or written for another configuration)."""


class RayStartError(StudyError):
    """A local Ray did not start, or a cluster could not be joined."""

    exit_code = EXIT_RAY


class SupersededError(StudyError):
    """A newer attempt of the trial has started (Tune retried it on another node while
    this one, cut off from Ray, kept training): this attempt must write nothing more."""

    def __init__(self, uri: str, mine: int, current: int):
        super().__init__(
            f"{uri}: attempt {mine} of this trial superseded by attempt {current}; it stops without writing"
        )
        self._init = (uri, mine, current)


class LockError(StudyError):
    """Another driver holds the study's lock."""

    exit_code = EXIT_USAGE


def _is_ray(e: BaseException) -> bool:
    return type(e).__module__.split(".")[0] == "ray" or type(e).__name__.startswith("RayTaskError")


def cause(exc: BaseException) -> str:
    """``ExceptionType: message`` of the innermost project error wrapped in ``exc``,
    else of the innermost non-Ray error, else of ``exc`` itself; one line."""
    # exc and every exception it wraps (Ray's ``cause``, ``__cause__``, ``__context__``)
    chain, todo = [], [exc]
    while todo:
        e = todo.pop(0)
        if isinstance(e, BaseException) and all(e is not c for c in chain):
            chain.append(e)
            todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    pick = next(
        (e for e in reversed(chain) if type(e).__module__.split(".")[0] in ("study", "analysis")), None
    ) or next((e for e in reversed(chain) if not _is_ray(e)), exc)
    message = str(pick)
    if _is_ray(pick) and "\n" in message:  # Ray's text trace: keep its last line (the error)
        message = [ln for ln in message.splitlines() if ln.strip()][-1]
    return one_line(f"{type(pick).__name__}: {message}", limit=500)


@contextlib.contextmanager
def refused(errors, prefix: str = ""):
    """An exception of ``errors`` raised inside as the command's one-line refusal: ``prefix`` + its text,
    exit 2."""
    try:
        yield
    except errors as e:
        raise UsageError(f"{prefix}{e}") from None
