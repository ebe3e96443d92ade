"""Reading the images of a (compressed) tar archive into memory, without extracting it.

:func:`read_images` streams the archive: it decompresses in bounded steps and
parses the 512-byte tar headers directly (ustar, GNU long names and pax path/size
records; ~8x faster than :mod:`tarfile` on an archive of 60 000 small images),
keeping only the image members' bytes, back to back in one buffer.  Memory is
bounded by what is kept, never by the archive's size.

Hostile or damaged archives end in one :class:`DataError` line, never a hang or a
traceback: decompression stops at :data:`study.limits.MAX_DECOMPRESSED_BYTES` (a
decompression bomb), sizes are checked (negative, malformed, past the end), pax
records are parsed strictly, and an archive must end with tar's end-of-archive
marker — a plain tar cut on a 512-byte boundary is refused as truncated instead of
silently giving fewer images.  A file or folder member named by an absolute path,
with a ``..`` component, or twice is refused (nothing is extracted, but such an
archive is hostile or ambiguous); links, devices and FIFOs are skipped, never followed.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from dataclasses import dataclass

from study import limits

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


#: uncompressed bytes produced per decompression step, compressed bytes read per step
_CHUNK = 4 * 2**20
_READ = 2**20
#: bytes of one pax / GNU long-name header (a name of a few kB is already absurd)
_MAX_HEADER_BODY = 2**20


@dataclass
class Images:
    """What :func:`read_images` keeps of an archive: the bytes of the members ``keep``
    accepted, back to back in ``buffer`` (``files[name] = (offset, size)`` into it),
    and every folder member's name."""

    buffer: bytearray
    files: dict[str, tuple[int, int]]
    dirs: list[str]


def read_images(f, *, path: str, keep) -> Images:
    """Stream the (compressed) tar archive of the binary file ``f``: decompression in
    bounded steps (:data:`_CHUNK`), at most :data:`study.limits.MAX_DECOMPRESSED_BYTES`
    in all, and only the members whose name ``keep(name)`` accepts are held in memory
    (each at most ``MAX_IMAGE_FILE_BYTES``, all together ``MAX_SOURCE_IMAGE_BYTES``).
    Memory is bounded by what is kept, never by the archive's (claimed) size, so a
    decompression bomb is refused in one line at a few MB of memory."""
    sink = Images(buffer=bytearray(), files={}, dirs=[])
    members = _parse(_chunks(f, path=path), path=path, keep=keep, sink=sink)
    sink.dirs = [m.name for m in members if m.is_dir]
    return sink


def decompress(data: bytes, *, path: str, limit: int | None = None) -> bytes:
    """The uncompressed tar bytes of ``data`` (gzip, bzip2, xz or plain tar, by magic),
    decompressed in bounded steps: more than ``limit`` bytes (default
    :data:`study.limits.MAX_DECOMPRESSED_BYTES`) is refused as a decompression bomb."""
    import io

    return b"".join(_chunks(io.BytesIO(data), path=path, limit=limit))


def _chunks(f, *, path: str, limit: int | None = None):
    """The uncompressed bytes of the archive file ``f``, as a generator of pieces of at
    most :data:`_CHUNK` bytes (read :data:`_READ` compressed bytes at a time)."""
    cap = limits.MAX_DECOMPRESSED_BYTES if limit is None else limit
    head = f.read(_READ)
    if head[:2] == b"\x1f\x8b":
        make = lambda: _Zlib(zlib.decompressobj(wbits=31))  # noqa: E731
    elif head[:3] == b"BZh":
        make = bz2.BZ2Decompressor
    elif head[:6] == b"\xfd7zXZ\x00":
        make = lzma.LZMADecompressor
    else:
        total = 0
        while head:
            total += len(head)
            if total > cap:
                raise DataError(f"{path}: archive is more than {cap} bytes (MAX_DECOMPRESSED_BYTES)")
            yield head
            head = f.read(_READ)
        return
    total = 0
    try:
        d, data = make(), head
        while True:  # one compressed stream after another (gzip/bzip2 allow several)
            piece = d.decompress(data, max_length=_CHUNK)
            data = b""
            if piece:
                total += len(piece)
                if total > cap:
                    raise DataError(f"{path}: decompresses to more than {cap} bytes (MAX_DECOMPRESSED_BYTES): "
                                    "refusing a possible decompression bomb")
                yield piece
            if d.eof:
                rest = d.unused_data or f.read(_READ)
                while rest and not rest.strip(b"\0"):  # zero padding after the last stream
                    rest = f.read(_READ)
                if not rest:
                    return
                d, data = make(), rest
            elif d.needs_input and not piece:
                data = f.read(_READ)
                if not data:
                    raise DataError(f"{path}: cannot decompress archive (compressed data ends early: truncated)")
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as e:
        raise DataError(f"{path}: cannot decompress archive ({one_line(e)})") from None
    except ValueError as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"{path}: cannot decompress archive ({one_line(e)})") from None


class _Zlib:
    """zlib's decompressobj with the bz2/lzma decompressor interface."""

    def __init__(self, d):
        self._d, self._tail = d, b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        piece = self._d.decompress(self._tail + data if data else self._tail, max_length)
        self._tail = self._d.unconsumed_tail
        return piece

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def needs_input(self) -> bool:
        return not self._tail

    @property
    def unused_data(self) -> bytes:
        return self._d.unused_data


class _Stream:
    """Sequential reads over an iterator of byte pieces; ``offset`` counts bytes read."""

    def __init__(self, pieces):
        self._it = iter(pieces)
        self._buf = b""
        self._pos = 0
        self.offset = 0

    def _next(self) -> bool:
        for piece in self._it:
            if piece:
                self._buf, self._pos = piece, 0
                return True
        return False

    def read(self, n: int, into: bytearray | None = None) -> int | bytes:
        """Up to ``n`` bytes (fewer at the end): returned, or appended to ``into`` (then
        their number is returned)."""
        parts: list[bytes] = []
        got = 0
        while got < n:
            if self._pos >= len(self._buf) and not self._next():
                break
            take = min(n - got, len(self._buf) - self._pos)
            view = memoryview(self._buf)[self._pos : self._pos + take]
            if into is not None:
                into += view
            else:
                parts.append(bytes(view))
            self._pos += take
            got += take
        self.offset += got
        return got if into is not None else b"".join(parts)

    def skip(self, n: int) -> int:
        got = 0
        while got < n:
            if self._pos >= len(self._buf) and not self._next():
                break
            take = min(n - got, len(self._buf) - self._pos)
            self._pos += take
            got += take
        self.offset += got
        return got


def tar_members(raw: bytes, *, path: str) -> list[Member]:
    """Every member of the uncompressed tar archive ``raw`` (GNU/pax extensions applied)."""
    return _parse([raw], path=path, keep=lambda name: True, sink=None)


def _parse(pieces, *, path: str, keep, sink: Images | None) -> list[Member]:
    """The members of the tar stream ``pieces``: folders, and the files ``keep`` accepts
    (with ``sink``: their bytes appended to ``sink.buffer``, the rest skipped unread)."""
    src = _Stream(pieces)
    out: list[Member] = []
    count = 0
    next_name: str | None = None
    next_size: int | None = None
    seen: set[str] = set()
    kept_cap = limits.MAX_SOURCE_IMAGE_BYTES
    while True:
        off = src.offset
        h = src.read(_BLOCK)
        if len(h) < _BLOCK:
            if off + len(h) < _BLOCK:
                raise DataError(f"{path}: not a tar archive (only {off + len(h)} bytes)")
            raise DataError(f"{path}: truncated tar archive: no end-of-archive marker after {len(out)} members "
                            f"at byte {off} (the file was cut short?)")
        if h[0] == 0 and h == bytes(_BLOCK):
            return out  # end-of-archive marker
        if count >= limits.MAX_SOURCE_FILES:
            raise DataError(f"{path}: more than {limits.MAX_SOURCE_FILES} archive members (MAX_SOURCE_FILES)")
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
        pad = _round_up(size) - size
        if typ in (b"x", b"g", b"L"):
            if size > _MAX_HEADER_BODY:
                raise DataError(f"{path}: extended header at byte {off} of {size} bytes, more than "
                                f"{_MAX_HEADER_BODY}: refusing the archive")
            body = src.read(size)
            if len(body) < size:
                raise DataError(f"{path}: truncated tar archive (header at byte {off})")
            src.skip(pad)
            if typ == b"L":
                next_name = _string(body)
            elif typ == b"x":
                records = _pax_records(body, path=path, off=off)
                if "path" in records:
                    next_name = records["path"]
                if "size" in records:
                    value = records["size"]
                    if not (value.isascii() and value.isdigit()):
                        raise DataError(f"{path}: corrupt pax header at byte {off} (size {value[:30]!r})")
                    next_size = int(value)
            continue
        count += 1
        if next_name is not None:
            name, next_name = next_name, None
        if next_size is not None:
            size, next_size = next_size, None
            pad = _round_up(size) - size
        if typ in _REGULAR or typ == b"5":
            _check_name(name, seen, path=path)
        if typ in _REGULAR and keep(name):
            if sink is None:
                got = src.skip(size)
            else:
                if size > limits.MAX_IMAGE_FILE_BYTES:
                    if src.skip(size) < size:  # a size past the archive's end is the first thing wrong
                        raise DataError(f"{path}: truncated tar archive ({name} is cut short)")
                    raise DataError(f"{path}: {name[:200]}: {size} bytes, more than the limit of "
                                    f"{limits.MAX_IMAGE_FILE_BYTES} (MAX_IMAGE_FILE_BYTES)")
                start = len(sink.buffer)
                if start + size > kept_cap:
                    raise DataError(f"{path}: its image files hold more than {kept_cap} bytes "
                                    "(MAX_SOURCE_IMAGE_BYTES)")
                got = src.read(size, into=sink.buffer)
                sink.files[name] = (start, got)
            if got < size:
                raise DataError(f"{path}: truncated tar archive ({name} is cut short)")
            out.append(Member(name=name, offset=data_off, size=size, is_dir=False))
        else:
            if typ == b"5":
                out.append(Member(name=name.rstrip("/"), offset=data_off, size=0, is_dir=True))
            if src.skip(size) < size and typ in _REGULAR:  # links, devices, fifos: skipped
                raise DataError(f"{path}: truncated tar archive ({name} is cut short)")
        src.skip(pad)


def _check_name(name: str, seen: set[str], *, path: str) -> None:
    """Refuse a member that names a place outside the archive (absolute, ``..``) or
    that repeats an earlier member's name (which of the two would be meant?).
    Nothing is ever extracted, but such an archive is hostile or broken."""
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or "\0" in name:
        raise DataError(f"{path}: member {name[:200]!r} points outside the archive (absolute path or '..'): "
                        "refusing the archive")
    key = "/".join(p for p in parts if p not in ("", "."))
    if key in seen:
        raise DataError(f"{path}: member {name[:200]!r} appears twice in the archive")
    seen.add(key)


def _round_up(size: int) -> int:
    return (size + _BLOCK - 1) // _BLOCK * _BLOCK


def _string(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _number(field: bytes, *, path: str, off: int) -> int:
    """A header's octal (or GNU base-256) size; negative or malformed is an error."""
    if field[0] & 0x80:  # GNU base-256, two's complement: 0xff first means negative
        if field[0] == 0xFF:
            raise DataError(f"{path}: corrupt tar header at byte {off} (negative size)")
        return int.from_bytes(field[1:], "big")
    s = field.split(b"\0", 1)[0].strip()
    if s and not all(48 <= c <= 55 for c in s):  # only octal digits (int() would take '-', '+', '_')
        raise DataError(f"{path}: corrupt tar header at byte {off} (size {s[:12]!r})")
    return int(s, 8) if s else 0


def _checksum_ok(h: bytes) -> bool:
    try:
        stored = int(h[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return False
    return stored == sum(h[:148]) + 8 * 32 + sum(h[156:])


def _pax_records(body: bytes, *, path: str, off: int) -> dict[str, str]:
    """``"%d key=value\\n"`` records of a pax extended header (strictly: a record
    whose length is not a positive number within the header is an error)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(body):
        if body[i] == 0:
            break  # padding
        sp = body.find(b" ", i)
        digits = body[i:sp] if sp > i else b""
        if not digits.isdigit() or sp - i > 20:
            raise DataError(f"{path}: corrupt pax header at byte {off} (record at {i})")
        length = int(digits)
        if length <= sp - i or i + length > len(body) or body[i + length - 1 : i + length] != b"\n":
            raise DataError(f"{path}: corrupt pax header at byte {off} (record length {length})")
        key, eq, value = body[sp + 1 : i + length - 1].partition(b"=")
        if not eq:
            raise DataError(f"{path}: corrupt pax header at byte {off} (record without '=')")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        i += length
    return out
