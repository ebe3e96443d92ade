"""Decoding in-memory image files into one uint8 tensor (N, 3, 32, 32).

WHY descriptor 2 is redirected: docs/study-files.md, "Data" (damaged images); text no
image reproduces (another thread's) is passed on to stderr.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

from study.device.cpus import local_cpus

from .errors import DataError, one_line
from .imageheader import (
    IMAGE_CHANNELS,
    IMAGE_SIDE,
    cannot_decode,
    refuse_animation,
    refuse_oversized,
    refuse_shape,
)

IMAGE_SHAPE = (IMAGE_CHANNELS, IMAGE_SIDE, IMAGE_SIDE)
_CHUNK = 2048


def decode_images(
    buffer: bytes,
    items: Sequence[tuple[str, int, int]],
    *,
    source: str,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Tensor:
    """Decode ``items`` = ``(name, offset, size)`` slices of ``buffer`` into a uint8 tensor
    (N, 3, 32, 32), in order, on ``workers`` threads (default: the CPUs this process may use, at most 4);
    ``progress(done, total)`` after each chunk."""
    n = len(items)
    out = torch.empty((n, *IMAGE_SHAPE), dtype=torch.uint8)
    if n == 0:
        return out
    import torchvision.io  # noqa: F401  (once, before the threads need it)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # frombuffer on read-only bytes
        flat = (
            torch.frombuffer(buffer, dtype=torch.uint8) if len(buffer) else torch.empty(0, dtype=torch.uint8)
        )

    def run(lo: int) -> int:
        hi = min(lo + _CHUNK, n)
        out[lo:hi] = torch.stack(_decode_chunk(flat, buffer, items[lo:hi], source=source))
        return hi - lo

    done = 0
    with _decoder_messages() as said, ThreadPoolExecutor(workers or min(4, local_cpus()), "decode") as pool:
        # in order: the first bad file is reported, and map's iterator cancels the chunks not started
        for k in pool.map(run, range(0, n, _CHUNK)):
            done += k
            if progress:
                progress(done, n)
    if said():
        _refuse_the_file_decoders_complain_about(flat, buffer, items, source=source, said=said())
    return out


_FD2_LOCK = threading.Lock()  # one redirection of descriptor 2 at a time in this process


@contextlib.contextmanager
def _decoder_messages() -> Iterator[Callable[[], str]]:
    """Descriptor 2 → a temporary file for the block; yields a function returning what was
    written there.  ``sys.stderr`` keeps going to the terminal (progress lines are not swallowed)."""
    with _FD2_LOCK, tempfile.TemporaryFile() as tmp:
        text = ""
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        saved = os.dup(2)
        swapped, python_on_fd2 = None, False
        try:
            os.dup2(tmp.fileno(), 2)
            with contextlib.suppress(AttributeError, OSError, ValueError):  # pytest's capture, a StringIO
                python_on_fd2 = sys.stderr.fileno() == 2
            if python_on_fd2:
                swapped, sys.stderr = (
                    sys.stderr,
                    open(
                        os.dup(saved),
                        "w",
                        buffering=1,
                        closefd=True,
                        encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
                        errors="backslashreplace",
                    ),
                )
            yield lambda: text
        finally:
            if swapped is not None:
                sys.stderr.close()
                sys.stderr = swapped
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read(64 * 1024).decode("utf-8", "replace")


def _refuse_the_file_decoders_complain_about(
    flat: Tensor, buffer: bytes, items: Sequence[tuple[str, int, int]], *, source: str, said: str
) -> None:
    """Decode each image alone until one makes a decoder write, and refuse it; none does: pass ``said`` on."""
    for item in items:
        with _decoder_messages() as told, contextlib.suppress(DataError):
            _decode_chunk(flat, buffer, [item], source=source)
        if told().strip():
            quoted = one_line("; ".join(ln.strip() for ln in told().splitlines() if ln.strip()), limit=160)
            raise DataError(
                f"{source}: {item[0]}: damaged image, its decoder reports: {quoted} "
                "(re-encode or remove the file)"
            )
    sys.stderr.write(said)


def _decode_chunk(
    flat: Tensor, buffer: bytes, items: Sequence[tuple[str, int, int]], *, source: str
) -> list[Tensor]:
    from torchvision.io import ImageReadMode, decode_jpeg

    mv = memoryview(buffer)
    for name, off, size in items:
        refuse_oversized(mv[off : off + size], source=source, name=name)
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
        if img.ndim != 3:  # an animated GIF decodes to (frames, C, H, W)
            refuse_animation(source=source, name=name, shape=tuple(img.shape))
        c, h, w = img.shape
        refuse_shape(source=source, name=name, channels=c, height=h, width=w)
    return images


def _decode_one(name: str, data: Tensor, *, source: str) -> Tensor:
    from torchvision.io import ImageReadMode, decode_image

    try:
        return decode_image(data, mode=ImageReadMode.UNCHANGED)
    except (RuntimeError, ValueError):
        pass
    try:
        from PIL import Image
        from torchvision.transforms.functional import pil_to_tensor

        with Image.open(io.BytesIO(data.numpy().tobytes())) as im:
            return pil_to_tensor(im)  # (C, H, W), one channel for a grey image
    except Exception as e:  # PIL raises many types for bad files
        raise cannot_decode(e, source=source, name=name) from None
