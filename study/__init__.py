"""Self-attention ↔ convolution study framework (Cordonnier, Loukas & Jaggi, ICLR 2020).

``import study`` is cheap (no torch, no Ray): :func:`run` imports what it needs.
"""

__version__ = "0.1.0"


def run(
    file,
    *,
    overrides=(),
    storage=None,
    data=None,
    name=None,
    num_cpus=None,
    address=None,
    shared_storage=False,
    quiet=False,
    verbose=False,
) -> str:
    """``study run FILE [OVERRIDE ...]`` in this process, by the same library function
    (:func:`study.driver.run`); returns the study's folder (a path or a URI), which
    ``analysis.load`` opens.

    Every argument is checked here, as the command's parser checks its flags: a wrong type or value is a
    :class:`study.errors.UsageError` naming it.  Errors, interruption and failed trials:
    docs/study-files.md, "From Python (a notebook)"."""
    import sys

    from study import driver
    from study.errors import EXIT_SIGINT

    # each override's own type and form: study.spec.overrides; the name's: --name's rule (driver.checked_name)
    _check_type("overrides", overrides, (list, tuple), "a list of KEY=VALUE strings")
    for arg, value in (("shared_storage", shared_storage), ("quiet", quiet), ("verbose", verbose)):
        _check_type(arg, value, bool, "must be True or False")
    _check_type("address", address, (str, type(None)), "must be a string or None")  # its form: tuning.cluster
    file, storage, data = _path("file", file, none=False), _path("storage", storage), _path("data", data)
    if num_cpus is not None:
        num_cpus = _bounded("num_cpus", num_cpus, driver.NUM_CPUS)
    try:
        runs = driver.run(
            file,
            overrides=list(overrides),
            storage=storage,
            data=data,
            name=name,
            address=address,
            shared_storage=shared_storage,
            num_cpus=num_cpus,
            quiet=quiet,
            verbose=verbose,
            prog="study.run",
        )
    finally:
        if "study.tuning.raylog" in sys.modules:  # Ray's lines print as Ray prints them again
            sys.modules["study.tuning.raylog"].restore()
    if runs.attrs.get("exit_code") == EXIT_SIGINT:
        raise KeyboardInterrupt(f"study interrupted; continue it with `study resume {runs.attrs['root']}`")
    return runs.attrs["root"]


def _check_type(arg: str, value, kinds, what: str) -> None:
    """``value`` an instance of ``kinds`` (a bool only where ``bool`` is named), else
    :class:`study.errors.UsageError` ``ARG: WHAT, got TYPE VALUE``."""
    from study.errors import UsageError, printable, short

    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise UsageError(f"{arg}: {what}, got {type(value).__name__} {printable(short(value))}")


def _path(arg: str, value, *, none: bool = True) -> str | None:
    """A path argument as text: a ``str`` or an ``os.PathLike`` of one (or None, where ``none``)."""
    import os

    if value is None and none:
        return None
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    _check_type(arg, text, str, "must be a path (a str or os.PathLike)" + (" or None" if none else ""))
    return text


def _bounded(arg: str, value, bound) -> int:
    """An integer argument within the bounds of its command-line flag (a
    :class:`study.cliutil.BoundedInt`)."""
    import argparse
    import numbers

    from study.errors import UsageError

    _check_type(arg, value, numbers.Integral, "must be an integer")
    try:
        return bound(str(int(value)))
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"{arg}: {e}") from None
