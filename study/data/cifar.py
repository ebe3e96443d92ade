"""The original CIFAR-10 in torchvision's python-version layout (``cifar-10-batches-py``).

WHY a restricted unpickler: torchvision's own reader would run any pickled code.  WHY numpy, and
an own download: the batches are read, and a missing copy fetched, before torch is imported, so
that a damaged batch or a failed download is refused in well under a second (docs/study-files.md,
"Data"); the arrays read are kept for the load that follows in the same process.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from .errors import DataError, one_line
from .splits import Splits

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
META_FILE = "batches.meta"
#: where torchvision's CIFAR10 downloads it from, and that file's md5 (torchvision.datasets.CIFAR10);
#: ``$STUDY_CIFAR10_URL`` names a mirror of the same file (a cluster without internet access)
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
URL_ENV = "STUDY_CIFAR10_URL"
MD5 = "c58f30108f718f92721af3b95e74349a"
_TIMEOUT_S = 30
_READ: dict[Path, tuple[tuple, dict[str, Any]]] = {}  # the last folder read: (its files' stat, arrays)

_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),
}


def load_cifar10(root: str | Path) -> Splits:
    """The splits in ``root/cifar-10-batches-py``, downloading them there if absent."""
    import torch

    arrays = read_cifar10(root)
    out = {k: torch.from_numpy(v) for k, v in arrays.items() if k != "classes"}
    return Splits(**out, classes=arrays["classes"], source=f"CIFAR-10 {Path(root).expanduser() / FOLDER}")


def read_cifar10(root: str | Path) -> dict[str, Any]:
    """The numpy arrays (``train_images``, …) and ``classes`` of ``root/cifar-10-batches-py`` (downloaded if
    absent), read and checked without torch; the last folder read is kept while its files are unchanged, so
    checking a source and loading it read it once."""
    root = Path(root).expanduser()
    folder = root / FOLDER
    names = (*TRAIN_FILES, *TEST_FILES, META_FILE)
    odd = [f for f in names if (folder / f).exists() and not (folder / f).is_file()]
    if odd:
        raise DataError(f"{folder / odd[0]}: not a regular file (expected a CIFAR-10 python batch file)")
    if not all((folder / f).is_file() for f in names):
        _download(root)
    stamp = tuple((st.st_ino, st.st_mtime_ns, st.st_size) for st in (os.stat(folder / f) for f in names))
    key = folder.resolve()
    if key in _READ and _READ[key][0] == stamp:
        return _READ[key][1]
    meta = _unpickle(folder / META_FILE)
    classes = meta.get("label_names") if isinstance(meta, dict) else None
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise DataError(f"{folder / META_FILE}: no label_names list")
    if len(classes) < 2 or len(set(classes)) != len(classes):
        raise DataError(
            f"{folder / META_FILE}: label_names must list at least 2 distinct classes, got {classes[:5]!r}"
        )
    out: dict[str, Any] = {"classes": tuple(classes)}
    for split, files in (("train", TRAIN_FILES), ("test", TEST_FILES)):
        images, labels = zip(*(_batch(folder / f, num_classes=len(classes)) for f in files))
        out[f"{split}_images"] = np.concatenate(images)
        out[f"{split}_labels"] = np.concatenate(labels)
    _READ.clear()
    _READ[key] = (stamp, out)
    return out


def _download(root: Path) -> None:
    """Fetch :data:`URL` (or ``$STUDY_CIFAR10_URL``) into a temporary folder in ``root``, check its md5, and
    move the batch folder into ``root`` (as torchvision's CIFAR10(download=True) does); nothing is left
    behind if any step fails."""
    missing = [p for p in (root, *root.parents) if not p.exists()]  # folders the download would create
    url = os.environ.get(URL_ENV) or URL
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".cifar10-", dir=root) as tmp:
            archive = Path(tmp) / "cifar-10-python.tar.gz"
            md5 = hashlib.md5(usedforsecurity=False)
            with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as r, open(archive, "wb") as f:
                while block := r.read(2**20):
                    md5.update(block)
                    f.write(block)
            if md5.hexdigest() != MD5:
                raise OSError(f"{url}: md5 {md5.hexdigest()}, expected {MD5}")
            with tarfile.open(archive, "r:gz") as tf:
                tf.extractall(
                    tmp,
                    members=[m for m in tf.getmembers() if m.name.startswith(f"{FOLDER}/")],
                    filter="data",
                )
            shutil.rmtree(root / FOLDER, ignore_errors=True)  # a partial copy: replaced whole
            os.replace(Path(tmp) / FOLDER, root / FOLDER)
    except Exception as e:  # URLError, OSError, tarfile errors: report in one line
        for p in missing:  # deepest first: leave no empty folder tree behind
            try:
                p.rmdir()
            except OSError:
                break
        raise DataError(
            f"cifar10: {root / FOLDER} is missing and downloading CIFAR-10 into {root} failed "
            f"(no network?): {one_line(e, limit=150)}"
        ) from None


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
