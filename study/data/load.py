"""``load_splits(spec)``: one data source (synthetic, CIFAR-10, an image folder or archive) →
train/test tensors (:class:`~study.data.splits.Splits`), a subset kept where asked."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from study import limits

from .cache import default_cache_dir
from .cifar import load_cifar10
from .errors import DataError
from .splits import Splits, check_subset, stratified_subset, subset_test_size
from .synthetic import CLASSES, DEFAULT_TEST, DEFAULT_TRAIN, make_synthetic

SPEC_HELP = (
    "synthetic[:N_TRAIN], cifar10[:ROOT], an image-folder directory or a .tar/.tar.gz/.tgz archive of one"
)


def load_splits(
    spec: str,
    *,
    subset: int | None = None,
    cache_dir: str | Path | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Splits:
    """Load the data source ``spec`` and keep a ``subset`` drawn with ``seed`` (docs/study-files.md,
    "Data"; synthetic data does not depend on ``seed``); ``progress`` gets a line before and after
    a long decode."""
    if subset is not None and (isinstance(subset, bool) or not isinstance(subset, int) or subset < 1):
        raise DataError(f"subset must be a positive number of training images, got {subset!r}")
    import torch  # here, not at the top: study.datachecks imports this module before its torch-free refusals

    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    splits = _load(spec, cache_dir=cache_dir, progress=progress)
    if subset is None:
        return splits
    check_subset(spec, subset=subset, n_train=len(splits.train_labels))
    gen = torch.Generator().manual_seed(seed)
    train = stratified_subset(splits.train_labels, k=subset, generator=gen)
    n_test = subset_test_size(subset, len(splits.test_labels))
    test = stratified_subset(splits.test_labels, k=n_test, generator=gen)
    return replace(
        splits,
        train_images=splits.train_images[train],
        train_labels=splits.train_labels[train],
        test_images=splits.test_images[test],
        test_labels=splits.test_labels[test],
        source=f"{splits.source}, subset {len(train)} train / {len(test)} test (seed {seed})",
    )


def _load(spec: str, *, cache_dir: Path, progress: Callable[[str], None] | None) -> Splits:
    if not isinstance(spec, str) or not spec.strip():
        raise DataError(f"empty data source (use {SPEC_HELP})")
    kind, _, arg = spec.partition(":")
    if kind == "synthetic":
        n_train = DEFAULT_TRAIN
        if arg or spec.endswith(":"):
            if not (arg.isascii() and arg.isdigit()) or not 1 <= int(arg) <= limits.MAX_SYNTHETIC_TRAIN:
                raise DataError(
                    f"{spec}: N_TRAIN must be an integer from 1 to {limits.MAX_SYNTHETIC_TRAIN} "
                    f"(MAX_SYNTHETIC_TRAIN), got {arg!r}"
                )
            n_train = int(arg)
        return Splits(
            *make_synthetic(n_train=n_train),
            classes=CLASSES,
            source=f"synthetic ({n_train} train / {DEFAULT_TEST} test)",
        )
    if kind == "cifar10":  # a folder named cifar10 is "./cifar10"
        if arg and not Path(arg).expanduser().is_dir():  # never create a folder tree the user mistyped
            raise DataError(f"{spec}: {arg} is not a folder (create it to download CIFAR-10 into it)")
        return load_cifar10(Path(arg) if arg else cache_dir / "cifar10")
    path = Path(spec).expanduser()
    if not path.exists():
        if re.fullmatch(r"[A-Za-z][\w.-]+", kind) and arg:
            raise DataError(f"{spec}: unknown data source kind {kind!r} (use {SPEC_HELP})")
        raise DataError(f"{spec}: no such file or directory (use {SPEC_HELP})")
    from .imagefolder import load_image_folder  # torch

    return load_image_folder(path, cache_dir=cache_dir, progress=progress)
