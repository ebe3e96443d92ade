"""Decoding in-memory image files into one uint8 tensor (N, 3, 32, 32).

JPEG files are decoded in batches by ``torchvision.io.decode_jpeg``; other formats
(PNG, …) by ``decode_image`` and, failing that, PIL.  Chunks run on a small
thread pool (the decoders release the GIL for part of their work).  An image whose
header declares more than :data:`study.limits.MAX_IMAGE_PIXELS` pixels is refused
before it is decoded (:mod:`.imageheader`), so a pixel bomb never allocates.
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

from study import limits

from .errors import DataError, one_line
from .imageheader import declared_shape

IMAGE_SHAPE = (3, 32, 32)
_CHUNK = 2048


def default_workers() -> int:
    """Decoder threads: the CPUs this process may use, at most 4."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    return max(1, min(4, n))


def decode_images(
    buffer: bytes,
    items: Sequence[tuple[str, int, int]],
    *,
    source: str,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Tensor:
    """Decode ``items`` = ``(name, offset, size)`` slices of ``buffer`` into a uint8
    tensor (N, 3, 32, 32), in order.  Raises :class:`DataError` naming ``source`` and
    the file for an undecodable image or one that is not 32×32 RGB.  ``progress``,
    if given, is called with (images done, total) after each chunk."""
    n = len(items)
    out = torch.empty((n, *IMAGE_SHAPE), dtype=torch.uint8)
    if n == 0:
        return out
    import torchvision.io  # noqa: F401  (once, before the threads need it)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # frombuffer on read-only bytes
        flat = torch.frombuffer(buffer, dtype=torch.uint8) if len(buffer) else torch.empty(0, dtype=torch.uint8)

    def run(lo: int) -> int:
        hi = min(lo + _CHUNK, n)
        out[lo:hi] = torch.stack(_decode_chunk(flat, buffer, items[lo:hi], source=source))
        return hi - lo

    workers = workers or default_workers()
    starts = range(0, n, _CHUNK)
    done = 0

    def advance(k: int) -> None:
        nonlocal done
        done += k
        if progress:
            progress(done, n)

    if workers == 1:
        for lo in starts:
            advance(run(lo))
        return out
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="decode")
    try:
        for future in [pool.submit(run, lo) for lo in starts]:
            advance(future.result())  # in order: the first bad file is reported
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after an error, skip the rest
    return out


def _decode_chunk(flat: Tensor, buffer: bytes, items: Sequence[tuple[str, int, int]], *, source: str) -> list[Tensor]:
    from torchvision.io import ImageReadMode, decode_jpeg

    mv = memoryview(buffer)
    for name, off, size in items:
        shape = declared_shape(mv[off : off + size])
        if shape is not None and shape[0] * shape[1] > limits.MAX_IMAGE_PIXELS:
            w, h, c = shape
            raise DataError(f"{source}: {name}: image is {w}x{h} with {c} channel(s), expected 32x32 with 3 (RGB)")
    views = [flat[off : off + size] for _, off, size in items]
    images: list[Tensor] | None = None
    if all(buffer[off : off + 3] == b"\xff\xd8\xff" for _, off, _ in items):
        try:
            images = decode_jpeg(views, mode=ImageReadMode.UNCHANGED)
        except (RuntimeError, ValueError):
            images = None  # find the culprit file by file below
    if images is None:
        images = [_decode_one(name, v, source=source) for (name, _, _), v in zip(items, views)]
    for (name, _, _), img in zip(items, images):
        if img.ndim != 3:  # an animated GIF/WebP decodes to (frames, C, H, W)
            raise DataError(f"{source}: {name}: image has shape {tuple(img.shape)} (an animation?), "
                            "expected one 32x32 frame with 3 channels (RGB)")
        if tuple(img.shape) != IMAGE_SHAPE:
            c, h, w = img.shape
            raise DataError(
                f"{source}: {name}: image is {w}x{h} with {c} channel(s), expected 32x32 with 3 (RGB)"
            )
    return images


def _decode_one(name: str, data: Tensor, *, source: str) -> Tensor:
    from torchvision.io import ImageReadMode, decode_image

    try:
        return decode_image(data, mode=ImageReadMode.UNCHANGED)
    except (RuntimeError, ValueError):
        pass
    try:
        from PIL import Image

        with Image.open(io.BytesIO(data.numpy().tobytes())) as im:
            arr = np.asarray(im)
    except Exception as e:  # PIL raises many types for bad files
        raise DataError(f"{source}: {name}: cannot decode image ({one_line(e, limit=120)})") from None
    arr = arr[:, :, None] if arr.ndim == 2 else arr
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
