"""An image file's declared size, read from its header without decoding it.

Used to refuse an image that declares more than :data:`study.limits.MAX_IMAGE_PIXELS`
pixels (a "pixel bomb": a few bytes that decode to gigabytes) before any decoder
allocates its output.  PIL reads only the header when it opens a file; JPEG and PNG
are opened by their PIL plugin classes directly, so that a bomb is reported with the
size it declares (``Image.open`` refuses it with its own DecompressionBombError first).
"""

from __future__ import annotations

import io


def refuse_oversized(data: bytes | memoryview, *, source: str, name: str) -> None:
    """Refuse (:class:`DataError`) an image whose header declares more than
    :data:`study.limits.MAX_IMAGE_PIXELS` pixels, before anything decodes it."""
    from study import limits

    from .errors import DataError

    shape = declared_shape(data)
    if shape is not None and shape[0] * shape[1] > limits.MAX_IMAGE_PIXELS:
        w, h, c = shape
        raise DataError(f"{source}: {name}: image is {w}x{h} with {c} channel(s), expected 32x32 with 3 (RGB)")


def declared_shape(data: bytes | memoryview) -> tuple[int, int, int] | None:
    """``(width, height, channels)`` the header of ``data`` declares, or None when it
    cannot be read (the decoder then reports the file)."""
    from PIL import Image, JpegImagePlugin, PngImagePlugin

    head = bytes(data[:8])
    opener = (JpegImagePlugin.JpegImageFile if head[:3] == b"\xff\xd8\xff" else
              PngImagePlugin.PngImageFile if head == b"\x89PNG\r\n\x1a\n" else Image.open)
    try:
        with opener(io.BytesIO(bytes(data))) as im:
            return *im.size, 3 if im.mode == "P" else len(im.getbands())  # a palette decodes to RGB
    except Image.DecompressionBombError:  # more pixels than PIL allows: as declared
        return 1 << 16, 1 << 16, 3
    except Exception:  # not an image PIL knows: the decoder reports it
        return None
