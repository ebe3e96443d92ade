"""A validation split held out from the training images (stratified, deterministic),
so that model selection never looks at the test set: docs/study-files.md, "Data"."""

from __future__ import annotations

import dataclasses

from .errors import DataError
from .splits import Splits, stratified_subset  # torch-free at import: the size rules serve torch-free checks


def validation_size(validation: int | float, n_train: int) -> int:
    """Images to hold out: ``validation`` itself if an integer (0: none), or that
    fraction of ``n_train`` (a float in (0, 1), rounded down, at least 1); its form was
    validated with the config (:func:`study.trial.config.validation_split`)."""
    return max(1, int(validation * n_train)) if isinstance(validation, float) else validation


def held_out(validation: int | float, n_train: int) -> int:
    """:func:`validation_size` of ``n_train`` training images, refused (:class:`DataError`) if it leaves
    none to train on."""
    n_val = validation_size(validation, n_train)
    if n_val and n_val >= n_train:
        raise DataError(
            f"validation: {n_val} held-out images leave none of the {n_train} training images "
            f"to train on (use fewer, or validation: 0)"
        )
    return n_val


def hold_out_validation(splits: Splits, *, validation: int | float, seed: int) -> Splits:
    """``splits`` with a class-stratified validation split of :func:`validation_size` images moved
    out of the training split, chosen by the training labels and ``seed`` only (the same on every
    rank and retry); unchanged if already held out or none is asked for."""
    if splits.val_labels is not None:
        return splits
    import torch

    from .pipeline import seeded  # torch: only where a split is made

    n_train = len(splits.train_labels)
    n_val = held_out(validation, n_train)
    if n_val == 0:
        return splits
    val = stratified_subset(splits.train_labels, k=n_val, generator=seeded(f"study.data.validation:{seed}"))
    keep = torch.ones(n_train, dtype=torch.bool)
    keep[val] = False
    return dataclasses.replace(
        splits,
        train_images=splits.train_images[keep],
        train_labels=splits.train_labels[keep],
        val_images=splits.train_images[val],
        val_labels=splits.train_labels[val],
        source=f"{splits.source}, {n_val} of the training images held out for validation",
    )
