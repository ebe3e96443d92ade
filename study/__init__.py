"""Self-attention ↔ convolution study framework (Cordonnier, Loukas & Jaggi, ICLR 2020).

``import study`` is cheap (no torch, no Ray): :func:`run` imports what it needs.

>>> import study
>>> s = study.run("search_spaces/smoke.yaml", overrides=["epochs=1", "seeds=[0,1]"],
...               storage="/tmp/studies", data="synthetic")     # doctest: +SKIP
>>> s.runs[["name", "status", "best_test_acc"]]                # the `analysis.Study` of the run
"""

__version__ = "0.1.0"


def run(file, *, overrides=(), storage=None, data=None, name=None, num_cpus=None, address=None,
        shared_storage=False, quiet=False, verbose=False):
    """Run a study file as ``study run FILE [OVERRIDE ...]`` does (one code path,
    :func:`study.commands.studies.run_file`), in this process, and return its tables as
    the :class:`analysis.Study` that ``analysis.load`` gives.  The arguments are the
    command's (``overrides``: Hydra-syntax ``key.sub=VALUE`` strings).

    Where the command prints its one line and exits, this raises :mod:`study.errors`'
    types, each with the command's ``exit_code``.  Interrupted: ``KeyboardInterrupt``,
    state saved for ``study resume``.  Trials that ended in error are rows of ``runs``
    with ``status == "error"`` and their cause in ``runs.error``, not an exception."""
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
