"""Tiny image-folder trees and tar archives for the data-layer tests (PIL, no network)."""

from __future__ import annotations

import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image


def image_array(seed: int, *, size: tuple[int, int] = (32, 32), channels: int = 3) -> np.ndarray:
    """A deterministic random uint8 image (H, W, C) — or (H, W) for one channel."""
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0], channels) if channels > 1 else (size[1], size[0])
    return rng.integers(0, 256, shape, dtype=np.uint8)


def write_image(path: Path, array: np.ndarray) -> None:
    """Save ``array`` with the format given by ``path``'s extension (PNG is lossless)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def make_tree(
    root: Path,
    *,
    classes: dict[str, tuple[str, ...]] | tuple[str, ...] = ("cat", "dog", "frog"),
    n_train: int = 4,
    n_test: int = 2,
    ext: str = "png",
) -> dict[str, np.ndarray]:
    """Write ``root/{train,test}/<class>/NN.<ext>``; ``classes`` may map a split to its
    own class tuple.  Returns {relative path: array (H, W, 3)} of what was written."""
    per_split = classes if isinstance(classes, dict) else {"train": classes, "test": classes}
    written: dict[str, np.ndarray] = {}
    seed = 0
    for split, n in (("train", n_train), ("test", n_test)):
        for cls in per_split.get(split, ()):
            for i in range(n):
                rel = f"{split}/{cls}/{i:02d}.{ext}"
                arr = image_array(seed)
                seed += 1
                write_image(root / rel, arr)
                written[rel] = arr
    return written


def make_tar(
    tree: Path,
    archive: Path,
    *,
    wrapper: str | None = None,
    mode: str = "w:gz",
    format: int = tarfile.PAX_FORMAT,
) -> Path:
    """Archive the contents of ``tree`` (optionally under one ``wrapper`` folder)."""
    with tarfile.open(archive, mode, format=format) as tf:
        for p in sorted(tree.rglob("*")):
            rel = p.relative_to(tree).as_posix()
            tf.add(p, arcname=f"{wrapper}/{rel}" if wrapper else rel, recursive=False)
    return archive


def make_cifar_python(root: Path, *, per_batch: int = 3, classes: tuple[str, ...] = tuple("abcdefghij")):
    """A tiny ``root/cifar-10-batches-py`` in the real pickle format (5 train batches + test).
    Returns (train_data (N, 3072), train_labels, test_data, test_labels)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    parts: dict[str, list] = {"train": [], "test": []}
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(x) for x in rng.integers(0, len(classes), per_batch)]
        files = [f"{name}_{i}.png" for i in range(per_batch)]
        entry = {"batch_label": name, "labels": labels, "data": data, "filenames": files}
        (folder / name).write_bytes(pickle.dumps(entry, protocol=2))
        parts["test" if name == "test_batch" else "train"].append((data, labels))
    (folder / "batches.meta").write_bytes(
        pickle.dumps(
            {"label_names": list(classes), "num_cases_per_batch": per_batch, "num_vis": 3072}, protocol=2
        )
    )
    tr_x = np.concatenate([d for d, _ in parts["train"]])
    tr_y = np.concatenate([labels for _, labels in parts["train"]])
    te_x, te_y = parts["test"][0][0], np.asarray(parts["test"][0][1])
    return tr_x, tr_y, te_x, te_y


def jpeg_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def tar_bytes(
    members: dict[str, bytes],
    *,
    fmt: int = tarfile.PAX_FORMAT,
    pax: dict | None = None,
    links: dict[str, tuple[bytes, str]] | None = None,
) -> bytes:
    """An uncompressed tar archive in memory: regular files ``members`` (name → bytes),
    then ``links`` (name → (typeflag, target)), each member with the ``pax`` records."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.pax_headers = dict(pax or {})
            tf.addfile(info, io.BytesIO(data))
        for name, (kind, target) in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tf.addfile(info)
    return buf.getvalue()
