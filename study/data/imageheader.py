"""An image's file refused from what Pillow reads of it, before any tensor decoder (or torch) runs.

:func:`refuse_oversized` reads the header only: a "pixel bomb" (a few bytes that decode to
gigabytes) is refused with the size it declares (JPEG and PNG are opened by their PIL plugin
classes directly: ``Image.open`` refuses a bomb with its own DecompressionBombError first).
:func:`refuse_unusable` decodes the file with Pillow and refuses what the tensor decoder
(:mod:`study.data.decode`) would refuse: docs/study-files.md, "Data".
"""

from __future__ import annotations

import io
import re

from study import limits

from .errors import DataError, one_line

IMAGE_SIDE = 32
IMAGE_CHANNELS = 3


def refuse_shape(*, source: str, name: str, channels: int, height: int, width: int) -> None:
    """The one rule on a decoded image's shape: ``channels`` x ``height`` x ``width`` must be 3 x 32 x 32."""
    if (channels, height, width) != (IMAGE_CHANNELS, IMAGE_SIDE, IMAGE_SIDE):
        raise DataError(
            f"{source}: {name}: image is {width}x{height} with {channels} channel(s), "
            f"expected {IMAGE_SIDE}x{IMAGE_SIDE} with {IMAGE_CHANNELS} (RGB)"
        )


def refuse_animation(*, source: str, name: str, shape: tuple[int, ...]) -> None:
    """An animated image (several frames) is refused: one frame per image."""
    raise DataError(
        f"{source}: {name}: image has shape {shape} (an animation?), "
        f"expected one {IMAGE_SIDE}x{IMAGE_SIDE} frame with {IMAGE_CHANNELS} channels (RGB)"
    )


def cannot_decode(e: BaseException, *, source: str, name: str):
    """The :class:`DataError` of an image no decoder reads, with Pillow's reason ``e`` (not the file
    object's repr)."""
    why = re.sub(r" ?<_io\.BytesIO object at 0x[0-9a-fA-F]+>", "", one_line(e, limit=160))
    return DataError(f"{source}: {name}: cannot decode image ({why[:120]})")


def refuse_oversized(data: bytes | memoryview, *, source: str, name: str) -> None:
    """Refuse (:class:`DataError`) an image whose header declares more than
    :data:`study.limits.MAX_IMAGE_PIXELS` pixels; a header PIL cannot read is left to the decoder."""
    from PIL import Image, JpegImagePlugin, PngImagePlugin

    head = bytes(data[:8])
    opener = (
        JpegImagePlugin.JpegImageFile
        if head[:3] == b"\xff\xd8\xff"
        else PngImagePlugin.PngImageFile
        if head == b"\x89PNG\r\n\x1a\n"
        else Image.open
    )
    try:
        with opener(io.BytesIO(bytes(data))) as im:
            (w, h), c = im.size, _channels(im)
    except Image.DecompressionBombError:  # more pixels than PIL allows: as declared
        w, h, c = 1 << 16, 1 << 16, 3
    except Exception:  # not an image PIL knows: the decoder reports it
        return
    if w * h > limits.MAX_IMAGE_PIXELS:
        refuse_shape(source=source, name=name, channels=c, height=h, width=w)


def refuse_unusable(data: bytes | memoryview, *, source: str, name: str) -> None:
    """Refuse (:class:`DataError`) an image file the tensor decoder would refuse, decided by Pillow alone
    (no torch): oversized (:func:`refuse_oversized`), empty, unreadable or cut short, animated (GIF), not
    32x32, or not 3 channels as decoded (a PNG's palette is 1 channel of indices, a GIF is always RGB).
    Only certain refusals: a file Pillow cannot identify but torchvision may (AVIF, HEIC: an ISO-BMFF
    ``ftyp`` box) is left to the decoder, as is damage libjpeg reports but recovers from."""
    from PIL import Image

    refuse_oversized(data, source=source, name=name)
    raw = bytes(data)
    try:
        im = Image.open(io.BytesIO(raw))
    except Image.DecompressionBombError:  # (declared sizes were refused above)
        return
    except Exception as e:  # PIL raises many types for files it does not know
        if raw[4:8] == b"ftyp":
            return
        raise cannot_decode(e, source=source, name=name) from None
    with im:
        try:
            im.load()
        except Exception as e:  # cut short, broken data stream, bad CRC, …
            raise cannot_decode(e, source=source, name=name) from None
        frames = getattr(im, "n_frames", 1)
        # torchvision decodes every frame of a GIF (WebP, APNG: the first)
        if im.format == "GIF" and frames > 1:
            refuse_animation(source=source, name=name, shape=(frames, IMAGE_CHANNELS, im.size[1], im.size[0]))
        refuse_shape(source=source, name=name, channels=_channels(im), height=im.size[1], width=im.size[0])


def _channels(im) -> int:
    """Channels of ``im`` as the tensor decoder gives them: a GIF always decodes to RGB; any other
    image to its own bands (a palette image is one channel of indices, as ``pil_to_tensor`` gives it)."""
    return IMAGE_CHANNELS if im.format == "GIF" else len(im.getbands())
