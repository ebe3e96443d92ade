"""Reading the images of a (compressed) tar archive into memory, without extracting it.
What is refused: docs/study-files.md, "Data".

WHY the wrappers: tarfile's own ``"r|*"`` bounds no read's output (a few kB of bzip2 may hold
gigabytes), so :class:`_Uncompressed` decompresses in bounded steps; and Python 3.11's tarfile
is lenient (signed or ``_``-separated sizes, malformed pax records, a missing end marker read
as fewer members), so :class:`_Headers` checks each raw header strictly.
"""

from __future__ import annotations

import bz2
import collections
import gzip
import lzma
import tarfile
import zlib
from dataclasses import dataclass

from study import limits

from .errors import DataError, one_line

_BLOCK = 512
#: tarfile's read size (uncompressed bytes per read of :class:`_Uncompressed`)
_BUFSIZE = 32 * 2**10
#: bytes of one extended header's body (a name of a few kB is already absurd)
_MAX_HEADER_BODY = 2**20
#: extended headers before one member (real archives use at most two)
_MAX_CHAIN = 8
#: typeflags of extended headers: pax (local, global, Solaris), GNU long name / link
_EXTENDED = (b"x", b"g", b"X", b"L", b"K")
_PAX = (b"x", b"g", b"X")


@dataclass(frozen=True)
class Listing:
    """A source's image files in memory: ``files[name] = (offset, size)`` into ``buffer``;
    ``dirs`` are the folder names (so empty class folders are seen too)."""

    buffer: bytes
    files: dict[str, tuple[int, int]]
    dirs: tuple[str, ...]


def read_images(f, *, path: str, keep) -> Listing:
    """The regular files of the tar archive ``f`` whose name ``keep(name)`` accepts, within
    :mod:`study.limits` (``MAX_DECOMPRESSED_BYTES``, ``MAX_SOURCE_FILES``, ``MAX_IMAGE_FILE_BYTES``,
    ``MAX_SOURCE_IMAGE_BYTES``): a decompression bomb is refused at a few MB of memory."""
    data = _Uncompressed(f, path=path)
    headers = _Headers(data, path=path)
    checked = type("_CheckedInfo", (_CheckedInfo,), {"__slots__": (), "headers": headers})
    buffer, files, dirs = bytearray(), {}, []
    seen: set[str] = set()
    try:
        with tarfile.open(fileobj=data, mode="r|", tarinfo=checked, bufsize=_BUFSIZE, encoding="utf-8",
                          errors="surrogateescape") as tf:
            for info in tf:
                headers.member_read(info)
                if headers.members > limits.MAX_SOURCE_FILES:
                    raise DataError(f"{path}: more than {limits.MAX_SOURCE_FILES} archive members (MAX_SOURCE_FILES)")
                if info.issparse():
                    raise DataError(f"{path}: member {info.name[:200]!r} is a sparse file: refusing the archive")
                if info.isfile() or info.isdir():
                    _check_name(info.name, seen, path=path)
                if info.isdir():
                    dirs.append(info.name)
                elif info.isfile() and keep(info.name):
                    member = tf.extractfile(info)
                    if info.size > limits.MAX_IMAGE_FILE_BYTES:
                        while member.read(2**20):  # a size past the archive's end is the first thing wrong
                            pass
                        raise DataError(f"{path}: {info.name[:200]}: {info.size} bytes, more than the limit of "
                                        f"{limits.MAX_IMAGE_FILE_BYTES} (MAX_IMAGE_FILE_BYTES)")
                    if len(buffer) + info.size > limits.MAX_SOURCE_IMAGE_BYTES:
                        raise DataError(f"{path}: its image files hold more than {limits.MAX_SOURCE_IMAGE_BYTES} "
                                        "bytes (MAX_SOURCE_IMAGE_BYTES)")
                    files[info.name] = (len(buffer), info.size)
                    buffer += member.read(info.size)
    except tarfile.TarError:
        raise headers.refusal() from None
    headers.check_end()
    return Listing(buffer=buffer, files=files, dirs=tuple(dirs))


class _Uncompressed:
    """The uncompressed bytes of the buffered file ``f`` (gzip, bzip2, xz or plain tar, told by its first
    bytes, peeked): ``read(n)`` decompresses at most ``n`` bytes; the last ones stay at hand (:meth:`bytes_at`)."""

    def __init__(self, f, *, path: str):
        self.path, self.total = path, 0
        head = f.peek(6)[:6]
        if head[:2] == b"\x1f\x8b":
            self._src = gzip.GzipFile(fileobj=f)
        elif head[:3] == b"BZh":
            self._src = bz2.BZ2File(f)
        elif head == b"\xfd7zXZ\x00":
            self._src = lzma.LZMAFile(f, format=lzma.FORMAT_XZ)  # then stream padding ends it, as xz(1)
        else:
            self._src = f
        self.compressed = self._src is not f
        self._recent: collections.deque[tuple[int, bytes]] = collections.deque()
        self._recent_bytes = 0

    def read(self, n: int) -> bytes:
        try:
            data = self._src.read(n)
        except EOFError:
            raise DataError(f"{self.path}: cannot decompress archive (compressed data ends early: truncated)") from None
        except (OSError, zlib.error, lzma.LZMAError, ValueError) as e:
            if not self.compressed:
                raise  # reading the file failed: the caller's "cannot read"
            raise DataError(f"{self.path}: cannot decompress archive ({one_line(e)})") from None
        cap = limits.MAX_DECOMPRESSED_BYTES
        if self.total + len(data) > cap:
            if self.compressed:
                raise DataError(f"{self.path}: decompresses to more than {cap} bytes (MAX_DECOMPRESSED_BYTES): "
                                "refusing a possible decompression bomb")
            raise DataError(f"{self.path}: archive is more than {cap} bytes (MAX_DECOMPRESSED_BYTES)")
        self._recent.append((self.total, data))
        self._recent_bytes += len(data)
        while self._recent_bytes - len(self._recent[0][1]) > _MAX_HEADER_BODY + 4 * _BUFSIZE:
            self._recent_bytes -= len(self._recent.popleft()[1])
        self.total += len(data)
        return data

    def bytes_at(self, start: int, end: int) -> bytes:
        """Bytes ``start:end`` of the uncompressed archive (among the last
        :data:`_MAX_HEADER_BODY` + a few reads: an extended header just parsed)."""
        return b"".join(d[max(0, start - at) : end - at] for at, d in self._recent if at < end and at + len(d) > start)


class _CheckedInfo(tarfile.TarInfo):
    """Each raw header goes through ``headers`` before and after tarfile parses it
    (:meth:`frombuf` is a classmethod: each archive gets a subclass holding its own)."""

    __slots__ = ()
    headers: _Headers

    @classmethod
    def frombuf(cls, buf, encoding, errors):
        cls.headers.before(buf)
        info = super().frombuf(buf, encoding, errors)
        cls.headers.after(buf, info)
        return info


class _Headers:
    """The raw headers of one archive as tarfile reads them, checked where tarfile is
    lenient, and where the archive's members and headers lie (for one-line errors)."""

    def __init__(self, data: _Uncompressed, *, path: str):
        self.data, self.path = data, path
        self.pos = 0  # where the header tarfile reads next starts
        self.members = 0
        self.last = b""  # the last header block tarfile read
        self.chain = 0  # extended headers since the last member
        self.pax: tuple[int, int] | None = None  # (offset, size) of a pax header not yet checked
        self.member: str | None = None  # a member whose data is being read

    def before(self, buf: bytes) -> None:
        """A header block at :attr:`pos`: the pax header before it, now read whole, is checked."""
        self.member = None
        self._check_pax()
        self.last = buf

    def after(self, buf: bytes, info: tarfile.TarInfo) -> None:
        """A header block tarfile accepted: refuse a size tarfile would read leniently,
        and an extended header too large or in too long a chain."""
        off = self.pos
        size = buf[124:136]
        if size[0] == 0xFF:  # GNU base-256 in two's complement: negative
            raise DataError(f"{self.path}: corrupt tar header at byte {off} (negative size)")
        digits = size.split(b"\0", 1)[0].strip()
        if not size[0] & 0x80 and digits.translate(None, b"01234567"):  # int() would take '-', '+', '_'
            raise DataError(f"{self.path}: corrupt tar header at byte {off} (size {digits[:12]!r})")
        if buf[156:157] not in _EXTENDED:
            self.chain = 0
            return
        self.chain += 1
        if info.size > _MAX_HEADER_BODY:
            raise DataError(f"{self.path}: extended header at byte {off} of {info.size} bytes, more than "
                            f"{_MAX_HEADER_BODY}: refusing the archive")
        if self.chain > _MAX_CHAIN:
            raise DataError(f"{self.path}: extended header at byte {off}: more than {_MAX_CHAIN} in a row "
                            "before one member: refusing the archive")
        if buf[156:157] in _PAX:
            self.pax = (off, info.size)
        self.pos += _BLOCK + _round_up(info.size)

    def member_read(self, info: tarfile.TarInfo) -> None:
        """tarfile gave the member ``info``: the next header follows its data."""
        self.members += 1
        self.member = info.name
        skipped = info.isreg() or not (info.isdir() or info.issym() or info.islnk() or info.isdev())
        self.pos = info.offset_data + (_round_up(info.size) if skipped else 0)

    def check_end(self) -> None:
        """tarfile found no more members: refuse unless the end-of-archive marker ended it."""
        self._check_pax()
        if len(self.last) == _BLOCK and self.last.count(0) != _BLOCK:
            raise self.refusal()
        if len(self.last) < _BLOCK:
            raise DataError(f"{self.path}: truncated tar archive: no end-of-archive marker after {self.members} "
                            f"members at byte {self.pos} (the file was cut short?)")

    def refusal(self) -> DataError:
        """The one line for tarfile's refusal of the archive at :attr:`pos`."""
        self._check_pax()
        if self.member is not None:  # its data end early: tarfile refuses only that there
            return DataError(f"{self.path}: truncated tar archive ({self.member[:200]} is cut short)")
        if len(self.last) < _BLOCK:
            if self.pos == 0:
                return DataError(f"{self.path}: not a tar archive (only {self.data.total} bytes)")
            return DataError(f"{self.path}: truncated tar archive (header at byte {self.pos})")
        where = "" if self.pos else " (no tar header at the start)"
        return DataError(f"{self.path}: not a tar archive or corrupt at byte {self.pos}{where}")

    def _check_pax(self) -> None:
        """Parse the body of the pax header :attr:`pax` strictly (tarfile skips what it
        cannot parse): a malformed record, or a size that is not a number, is refused."""
        if self.pax is None:
            return
        off, size = self.pax
        self.pax = None
        body = self.data.bytes_at(off + _BLOCK, off + _BLOCK + size)
        if len(body) < size:
            return  # cut short: tarfile refuses it
        records = _pax_records(body, path=self.path, off=off)
        if any(key.startswith("GNU.sparse.") for key in records):  # tarfile would parse its map unchecked
            raise DataError(f"{self.path}: member at byte {off} is a sparse file: refusing the archive")
        value = records.get("size")
        if value is not None and not (value.isascii() and value.isdigit()):
            raise DataError(f"{self.path}: corrupt pax header at byte {off} (size {value[:30]!r})")


def _check_name(name: str, seen: set[str], *, path: str) -> None:
    """Refuse a member named outside the archive (absolute, ``..``) or twice: nothing is
    extracted, but such an archive is hostile or ambiguous."""
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or "\0" in name:
        raise DataError(f"{path}: member {name[:200]!r} points outside the archive (absolute path or '..'): "
                        "refusing the archive")
    key = "/".join(p for p in parts if p not in ("", ".")) if "" in parts or "." in parts else name
    if key in seen:
        raise DataError(f"{path}: member {name[:200]!r} appears twice in the archive")
    seen.add(key)


def _round_up(size: int) -> int:
    return (size + _BLOCK - 1) // _BLOCK * _BLOCK


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
