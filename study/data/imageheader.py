"""An image file's declared size, read from its header without decoding it.

Used to refuse an image that declares more than :data:`study.limits.MAX_IMAGE_PIXELS`
pixels (a "pixel bomb": a few bytes that decode to gigabytes) before any decoder
allocates its output.  JPEG (SOF segment) and PNG (IHDR) are parsed here; other
formats by PIL, which reads only the header on ``Image.open``.
"""

from __future__ import annotations

import io

# JPEG start-of-frame markers (SOF0..SOF15 without DHT C4, JPG C8, DAC CC)
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}


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
    head = bytes(data[:8])
    if head[:3] == b"\xff\xd8\xff":
        return _jpeg(data)
    if head == _PNG_MAGIC:
        ihdr = bytes(data[8:33])
        if len(ihdr) < 25 or ihdr[4:8] != b"IHDR":
            return None
        w, h = int.from_bytes(ihdr[8:12], "big"), int.from_bytes(ihdr[12:16], "big")
        return w, h, _PNG_CHANNELS.get(ihdr[17], 3)
    from PIL import Image

    try:
        with Image.open(io.BytesIO(bytes(data))) as im:
            w, h = im.size
            return w, h, len(im.getbands())
    except Image.DecompressionBombError:  # more pixels than PIL allows: as declared
        return 1 << 16, 1 << 16, 3
    except Exception:  # not an image PIL knows: the decoder reports it
        return None


def _jpeg(data: bytes | memoryview) -> tuple[int, int, int] | None:
    n = len(data)
    pos = 2
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # no length field
            pos += 2
            continue
        length = (data[pos + 2] << 8) | data[pos + 3]
        if marker in _SOF:
            if pos + 10 > n:
                return None
            h = (data[pos + 5] << 8) | data[pos + 6]
            w = (data[pos + 7] << 8) | data[pos + 8]
            return w, h, data[pos + 9]
        if marker == 0xDA or length < 2:  # scan data before a frame header: malformed
            return None
        pos += 2 + length
    return None
