"""Refusing a "pixel bomb" (a few bytes that decode to gigabytes) from its header, before decoding.

JPEG and PNG are opened by their PIL plugin classes directly, so that a bomb is reported
with the size it declares (``Image.open`` refuses it with its own DecompressionBombError first).
"""

from __future__ import annotations

import io


def refuse_oversized(data: bytes | memoryview, *, source: str, name: str) -> None:
    """Refuse (:class:`DataError`) an image whose header declares more than
    :data:`study.limits.MAX_IMAGE_PIXELS` pixels; a header PIL cannot read is left to the decoder."""
    from PIL import Image, JpegImagePlugin, PngImagePlugin

    from study import limits

    from .errors import DataError

    head = bytes(data[:8])
    opener = (JpegImagePlugin.JpegImageFile if head[:3] == b"\xff\xd8\xff" else
              PngImagePlugin.PngImageFile if head == b"\x89PNG\r\n\x1a\n" else Image.open)
    try:
        with opener(io.BytesIO(bytes(data))) as im:
            (w, h), c = im.size, 3 if im.mode == "P" else len(im.getbands())  # a palette decodes to RGB
    except Image.DecompressionBombError:  # more pixels than PIL allows: as declared
        w, h, c = 1 << 16, 1 << 16, 3
    except Exception:  # not an image PIL knows: the decoder reports it
        return
    if w * h > limits.MAX_IMAGE_PIXELS:
        raise DataError(f"{source}: {name}: image is {w}x{h} with {c} channel(s), expected 32x32 with 3 (RGB)")
