"""Reading a (compressed) tar archive into memory, without extracting it.

:func:`tar_members` parses the 512-byte tar headers directly (ustar, GNU long
names and pax path/size records), which is ~8x faster than :mod:`tarfile` on an
archive of 60 000 small images; the member bytes stay views of one buffer.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from dataclasses import dataclass

from .errors import DataError, one_line

_BLOCK = 512
_REGULAR = {b"0", b"\0", b"7"}


@dataclass(frozen=True)
class Member:
    """One archive entry: ``name`` (``/``-separated) and, for files, where its bytes
    lie in the uncompressed archive: ``data[offset:offset + size]``."""

    name: str
    offset: int
    size: int
    is_dir: bool


def decompress(data: bytes, *, path: str) -> bytes:
    """The uncompressed tar bytes of ``data`` (gzip, bzip2, xz or plain tar, by magic)."""
    try:
        if data[:2] == b"\x1f\x8b":
            return gzip.decompress(data)
        if data[:3] == b"BZh":
            return bz2.decompress(data)
        if data[:6] == b"\xfd7zXZ\x00":
            return lzma.decompress(data)
    except (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError) as e:
        raise DataError(f"{path}: cannot decompress archive ({one_line(e)})") from None
    return data


def tar_members(raw: bytes, *, path: str) -> list[Member]:
    """Every member of the uncompressed tar archive ``raw`` (GNU/pax extensions applied)."""
    n = len(raw)
    if n < _BLOCK:
        raise DataError(f"{path}: not a tar archive (only {n} bytes)")
    out: list[Member] = []
    off = 0
    next_name: str | None = None
    next_size: int | None = None
    while off + _BLOCK <= n:
        h = raw[off : off + _BLOCK]
        if h[0] == 0 and h == bytes(_BLOCK):
            break  # end-of-archive marker
        if h[257:262] != b"ustar" and not _checksum_ok(h):
            where = "" if off else " (no tar header at the start)"
            raise DataError(f"{path}: not a tar archive or corrupt at byte {off}{where}")
        size = _number(h[124:136], path=path, off=off)
        typ = h[156:157]
        name = _string(h[0:100])
        prefix = _string(h[345:500]) if h[257:263] == b"ustar\x00" else ""
        if prefix:
            name = f"{prefix}/{name}"
        data_off = off + _BLOCK
        if typ in (b"x", b"g", b"L"):
            if data_off + size > n:
                raise DataError(f"{path}: truncated tar archive (header at byte {off})")
            body = raw[data_off : data_off + size]
            if typ == b"L":
                next_name = _string(body)
            elif typ == b"x":
                records = _pax_records(body)
                if "path" in records:
                    next_name = records["path"]
                if "size" in records:
                    next_size = int(records["size"])
            off = data_off + _round_up(size)
            continue
        if next_name is not None:
            name, next_name = next_name, None
        if next_size is not None:
            size, next_size = next_size, None
        if typ in _REGULAR:
            if data_off + size > n:
                raise DataError(f"{path}: truncated tar archive ({name} is cut short)")
            out.append(Member(name=name, offset=data_off, size=size, is_dir=False))
        elif typ == b"5":
            out.append(Member(name=name.rstrip("/"), offset=data_off, size=0, is_dir=True))
        off = data_off + _round_up(size)  # links, devices, fifos: skipped
    return out


def _round_up(size: int) -> int:
    return (size + _BLOCK - 1) // _BLOCK * _BLOCK


def _string(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _number(field: bytes, *, path: str, off: int) -> int:
    if field[0] & 0x80:  # GNU base-256
        return int.from_bytes(field[1:], "big")
    s = field.split(b"\0", 1)[0].strip()
    try:
        return int(s, 8) if s else 0
    except ValueError:
        raise DataError(f"{path}: corrupt tar header at byte {off}") from None


def _checksum_ok(h: bytes) -> bool:
    try:
        stored = int(h[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return False
    return stored == sum(h[:148]) + 8 * 32 + sum(h[156:])


def _pax_records(body: bytes) -> dict[str, str]:
    """``"%d key=value\\n"`` records of a pax extended header."""
    out: dict[str, str] = {}
    i = 0
    while i < len(body):
        sp = body.find(b" ", i)
        if sp < 0:
            break
        length = int(body[i:sp])
        if length <= 0:
            break
        key, _, value = body[sp + 1 : i + length - 1].partition(b"=")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        i += length
    return out
