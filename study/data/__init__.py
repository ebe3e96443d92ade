"""The data layer of one trial: a data source → :class:`Splits` → :class:`DeviceData`.

``load_splits("synthetic" | "cifar10[:ROOT]" | PATH, subset=..., cache_dir=..., seed=...)``
gives CPU uint8 tensors (decoded image folders are cached by content);
``DeviceData(images, labels, device=...)`` keeps a split on the training device and
yields normalised, augmented batches with DDP-consistent sharding;
``hold_out_validation(splits, validation=N, seed=...)`` moves a stratified
validation split out of the training images.
"""

from .cache import default_cache_dir
from .errors import DataError
from .pipeline import CIFAR_MEAN, CIFAR_STD, DeviceData, EpochPlan, augment, epoch_plan
from .splits import Splits, load_splits, stratified_subset
from .synthetic import make_synthetic
from .validation import DEFAULT_VALIDATION_FRACTION, hold_out_validation, validation_size

__all__ = [
    "CIFAR_MEAN", "CIFAR_STD", "DataError", "DeviceData", "EpochPlan", "Splits", "augment",
    "default_cache_dir", "epoch_plan", "load_splits", "make_synthetic", "stratified_subset",
    "DEFAULT_VALIDATION_FRACTION", "hold_out_validation", "validation_size",
]
