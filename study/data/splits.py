"""A data source's train/test tensors (:class:`Splits`) and the subset rules: which training and test
images a ``subset`` keeps (torch-free at import: ``study plan`` counts the same test subset)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import DataError

if TYPE_CHECKING:  # torch is imported on first use: check_subset serves torch-free checks of a source
    import torch
    from torch import Tensor

#: test images a ``subset`` keeps at least (:func:`subset_test_size`)
MIN_SUBSET_TEST = 100


@dataclass(frozen=True)
class Splits:
    """A data source's splits (CPU): ``*_images`` uint8 (N, 3, 32, 32), ``*_labels`` int64 (N,);
    ``val_*``: held out from the training images (:func:`~study.data.validation.hold_out_validation`)."""

    train_images: Tensor
    train_labels: Tensor
    test_images: Tensor
    test_labels: Tensor
    classes: tuple[str, ...]
    source: str
    val_images: Tensor | None = None
    val_labels: Tensor | None = None


def subset_test_size(subset: int, n_test: int) -> int:
    """Test images kept with a ``subset`` of the training images, of the source's ``n_test``: a fifth
    of the subset, at least :data:`MIN_SUBSET_TEST`."""
    return min(n_test, max(subset // 5, MIN_SUBSET_TEST))


def check_subset(spec: str, *, subset: int | None, n_train: int) -> None:
    """Refuse a ``subset`` larger than the ``n_train`` training images of ``spec``: refused, not capped
    (docs/study-files.md, "Data")."""
    if subset is not None and subset > n_train:
        raise DataError(f"{spec}: subset {subset} is more than the {n_train} training images of this source")


def stratified_subset(labels: Tensor, *, k: int, generator: torch.Generator) -> Tensor:
    """Sorted indices of ``k`` samples (all if ``k >= len(labels)``) spread evenly over
    the classes: a random order within each class, then round-robin over the classes
    (in a random class order) until ``k`` are taken; classes that run out are skipped."""
    import torch

    n = len(labels)
    if k >= n:
        return torch.arange(n)
    perm = torch.randperm(n, generator=generator)
    lab = labels[perm]
    num_classes = int(lab.max()) + 1
    by_class = torch.argsort(lab, stable=True)
    counts = torch.bincount(lab, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty(n, dtype=torch.int64)
    rank[by_class] = torch.arange(n) - starts[lab[by_class]]
    class_order = torch.randperm(num_classes, generator=generator)
    key = rank * num_classes + class_order[lab]
    return perm[torch.argsort(key)[:k]].sort().values
