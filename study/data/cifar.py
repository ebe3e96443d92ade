"""The original CIFAR-10 in torchvision's python-version layout (``cifar-10-batches-py``).

WHY a restricted unpickler: torchvision's own reader would run any pickled code.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import DataError, one_line
from .splits import Splits

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
META_FILE = "batches.meta"

_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"), ("_codecs", "encode"),
}


def load_cifar10(root: str | Path) -> Splits:
    """The splits in ``root/cifar-10-batches-py``, downloading them there if absent."""
    root = Path(root).expanduser()
    folder = root / FOLDER
    names = (*TRAIN_FILES, *TEST_FILES, META_FILE)
    odd = [f for f in names if (folder / f).exists() and not (folder / f).is_file()]
    if odd:
        raise DataError(f"{folder / odd[0]}: not a regular file (expected a CIFAR-10 python batch file)")
    if not all((folder / f).is_file() for f in names):
        _download(root)
    meta = _unpickle(folder / META_FILE)
    classes = meta.get("label_names") if isinstance(meta, dict) else None
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise DataError(f"{folder / META_FILE}: no label_names list")
    if len(classes) < 2 or len(set(classes)) != len(classes):
        raise DataError(f"{folder / META_FILE}: label_names must list at least 2 distinct classes, got {classes[:5]!r}")
    out = {}
    for split, files in (("train", TRAIN_FILES), ("test", TEST_FILES)):
        images, labels = zip(*(_batch(folder / f, num_classes=len(classes)) for f in files))
        out[f"{split}_images"] = torch.from_numpy(np.concatenate(images))
        out[f"{split}_labels"] = torch.from_numpy(np.concatenate(labels))
    return Splits(**out, classes=tuple(classes), source=f"CIFAR-10 {folder}")


def _download(root: Path) -> None:
    missing = [p for p in (root, *root.parents) if not p.exists()]  # folders the download would create
    try:
        from torchvision.datasets import CIFAR10

        CIFAR10(str(root), train=True, download=True)
    except Exception as e:  # URLError, OSError, RuntimeError: report in one line
        for p in missing:  # deepest first: leave no empty folder tree behind
            try:
                p.rmdir()
            except OSError:
                break
        raise DataError(f"cifar10: {root / FOLDER} is missing and downloading CIFAR-10 into {root} failed "
                        f"(no network?): {one_line(e, limit=150)}") from None


def _batch(path: Path, *, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    entry = _unpickle(path)
    data, labels = (entry.get("data"), entry.get("labels")) if isinstance(entry, dict) else (None, None)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(f"{path}: 'data' is not a uint8 array (N, 3072)")
    labels = np.asarray(labels, dtype=np.int64) if labels is not None else None
    in_range = labels is not None and (not len(labels) or 0 <= labels.min() <= labels.max() < num_classes)
    if labels is None or labels.shape != (len(data),) or not in_range:
        raise DataError(f"{path}: 'labels' is not {len(data)} class indices below {num_classes}")
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32)), labels


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _unpickle(path: Path) -> Any:
    try:
        with open(path, "rb") as f:
            return _Unpickler(f, encoding="latin1").load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
        raise DataError(f"{path}: not a CIFAR-10 python batch file ({one_line(e, limit=120)})") from None
