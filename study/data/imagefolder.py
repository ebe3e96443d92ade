"""An image-folder source (tree or tar archive) → tensors, decoded once and cached."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import decode
from .cache import build_lock, cache_path, load_cached, save_atomic
from .layout import Layout, resolve_layout
from .sources import ImageFolderSource, Listing
from .splits import Splits

# sha256 of well-known archives → how to report them (docs/study-files.md, "Data")
KNOWN_ARCHIVES = {
    "58c58e3af3ec7ed2054f439f35ad3c83dc1ab019f4af6037f60612ea098c8fa1": "CIFAR-10 (JPEG copy)",
}
_KEYS = ("train_images", "train_labels", "test_images", "test_labels", "classes")


def load_image_folder(
    path: str | Path, *, cache_dir: Path, progress: Callable[[str], None] | None = None
) -> Splits:
    """The splits of the image folder or archive at ``path``, decoded once and cached under ``cache_dir``."""
    src = ImageFolderSource(path)
    name = str(path)
    label = KNOWN_ARCHIVES.get(src.digest, "image folder" if src.is_dir else "image archive")
    target = cache_path(cache_dir, kind="imagefolder", digest=src.digest)
    data = load_cached(target, keys=_KEYS)
    if data is None:
        # a malformed archive or layout is refused before anything is written to the cache
        listing = src.listing()
        layout = resolve_layout(source=name, files=listing.files, dirs=listing.dirs)
        with build_lock(target):  # another process may have built it meanwhile
            data = load_cached(target, keys=_KEYS) or _decode(
                listing, layout, name=name, target=target, progress=progress
            )
    return Splits(**{k: data[k] for k in _KEYS[:4]}, classes=tuple(data["classes"]), source=f"{label} {path}")


#: sources with fewer images decode silently, in well under a second (no progress lines before a
#: one-line error)
PROGRESS_MIN_IMAGES = 5000


def _decode(
    listing: Listing, layout: Layout, *, name: str, target: Path, progress: Callable[[str], None] | None
) -> dict[str, Any]:
    t0 = time.perf_counter()
    data: dict[str, Any] = {"classes": list(layout.classes)}
    if len(layout.train) + len(layout.test) < PROGRESS_MIN_IMAGES:
        progress = None
    for split, pairs in (("train", layout.train), ("test", layout.test)):
        items = [(n, *listing.files[n]) for n, _ in pairs]
        if progress:
            progress(f"decoding {len(items)} {split} images of {name}")
        data[f"{split}_images"] = decode.decode_images(
            listing.buffer, items, source=name, progress=_percent(progress, f"{split} images")
        )
        data[f"{split}_labels"] = torch.tensor([lab for _, lab in pairs], dtype=torch.int64)
    saved = save_atomic(data, target)
    if progress:
        where = f"cached in {target}" if saved else f"not cached ({target.parent} not writable)"
        progress(f"decoded {name} in {time.perf_counter() - t0:.1f} s; {where}")
    return data


def _percent(progress: Callable[[str], None] | None, what: str):
    """A ``decode_images`` progress callback printing one line per 10 % done (100 % at the end)."""
    if progress is None:
        return None
    last = 0

    def report(done: int, total: int) -> None:  # total > 0: decode_images reports no empty split
        nonlocal last
        if (pct := 100 * done // total) // 10 > last // 10:
            last = pct
            progress(f"  {what}: {pct}% ({done}/{total})")

    return report
