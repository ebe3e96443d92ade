"""Self-attention ↔ convolution study framework (Cordonnier, Loukas & Jaggi, ICLR 2020).

``import study`` is cheap (no torch, no Ray): :func:`run` imports what it needs.
"""

__version__ = "0.1.0"


def run(file, *, overrides=(), storage=None, data=None, name=None, num_cpus=None, address=None,
        shared_storage=False, quiet=False, verbose=False):
    """``study run FILE [OVERRIDE ...]`` in this process; returns the :class:`analysis.Study`.

    Errors, interruption and failed trials: docs/study-files.md, "From Python (a notebook)"."""
    import sys

    from study.errors import EXIT_SIGINT, UsageError

    if isinstance(overrides, (str, bytes)):
        raise UsageError(f"overrides: a list of KEY=VALUE strings, got the string {str(overrides)[:40]!r}")
    from study.commands.studies import run_file

    try:
        runs = run_file(str(file), overrides=list(overrides), storage=storage, data=data, name=name,
                        address=address, shared_storage=shared_storage, num_cpus=num_cpus, quiet=quiet,
                        verbose=verbose, prog="study.run")
    finally:
        if "study.tuning.raylog" in sys.modules:  # Ray's lines print as Ray prints them again
            sys.modules["study.tuning.raylog"].restore()
    if runs.attrs.get("exit_code") == EXIT_SIGINT:
        raise KeyboardInterrupt(f"study interrupted; continue it with `study resume {runs.attrs['root']}`")
    import analysis

    return analysis.load(runs.attrs["root"])
