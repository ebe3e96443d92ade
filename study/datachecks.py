"""A data source checked before anything starts, for ``study train``, ``study export`` and a study's
run (:mod:`study.driver`): what it promises without torch (its kind, a folder's or archive's layout and
image headers), then its sizes against the subset, validation split and one step's batch, then (where a
run needs it) the training data loaded and its validation split held out; each refusal one line
(:class:`~study.errors.UsageError`).  Below the commands and :mod:`study.cliutil`, so the command-line
plumbing that ``analysis`` shares imports no data code."""

from __future__ import annotations

import os
import re

from study.errors import UsageError, refused


def check_data(option: str, data: str) -> tuple[int, int] | None:
    """What a data source promises that can be checked without importing torch (its kind, a folder's or
    archive's layout and images as Pillow reads them): :class:`UsageError`, well under a second for a
    small source.  A folder's or archive's (train, test) image counts (None for synthetic, cifar10)."""
    from study.spec.check import SpecError, check_data_source

    try:
        check_data_source(data)
    except SpecError as e:
        raise UsageError(f"{option}: {e.message}") from None
    kind, _, arg = data.partition(":")
    if kind in ("synthetic", "cifar10"):
        return None
    if not os.path.exists(os.path.expanduser(data)):  # (an unknown ~user was refused above)
        if re.fullmatch(r"[A-Za-z][\w.-]+", kind) and arg:
            raise UsageError(f"{option}: {data}: unknown data source kind {kind!r}")
        raise UsageError(f"{option}: {data}: no such file or directory")
    from study.data.errors import DataError
    from study.data.sources import check_source

    with refused(DataError, f"{option}: "):  # a folder or archive: its layout and images, still without torch
        return check_source(data)


def check_sizes(data: str, *, sizes=None, subset, validation, batch: int, workers: int, where) -> None:
    """``subset``, ``validation`` and one step's ``batch`` against the source's (train, test) ``sizes``
    (default: counted, :func:`study.data.sources.source_counts`), refused as :func:`checked_splits`
    refuses them after loading, but before anything is decoded or torch is imported (:class:`UsageError`)."""
    from study.data.errors import DataError
    from study.data.sources import source_counts
    from study.data.splits import check_subset
    from study.data.validation import held_out
    from study.trial.config import batch_overflow

    with refused(DataError, f"{where('data')}: "):
        n = (sizes or source_counts(data))[0]
        check_subset(data, subset=subset, n_train=n)
    n = min(n, subset or n)
    with refused(DataError, where("")):  # (its messages begin with the field: validation)
        held = held_out(validation, n)
    if why := batch_overflow(batch, workers, images=n, held=held, subset=subset is not None, data=data):
        raise UsageError(f"{where('batch_size')}: {why}")


def checked_splits(
    data: str, *, subset, validation, seed: int, batch: int, workers: int, progress, where, sizes=None
):
    """The training data loaded (and cached) and its validation split held out before anything starts, so
    a broken archive is one line (:class:`UsageError`); ``where(field)`` names a field in the message.  The
    sizes are checked first (:func:`check_sizes`): a refused source is not decoded and leaves no cache
    entry."""
    from study.data import DataError, hold_out_validation, load_splits
    from study.trial.config import batch_overflow

    check_sizes(
        data, sizes=sizes, subset=subset, validation=validation, batch=batch, workers=workers, where=where
    )
    with refused(DataError, f"{where('data')}: "):  # an archive's first decode prints its progress
        splits = load_splits(data, subset=subset, seed=seed, progress=progress)
    with refused(DataError, where("")):  # (its messages begin with the field: validation)
        splits = hold_out_validation(splits, validation=validation, seed=seed)
    if why := batch_overflow(batch, workers, images=len(splits.train_labels), data=data):  # what trains
        raise UsageError(f"{where('batch_size')}: {why}")
    return splits
