"""Reading the images of a (compressed) tar archive into memory, without extracting it.
What is refused: docs/study-files.md, "Data".

WHY the wrappers: tarfile's own ``"r|*"`` bounds no read's output (a few kB of bzip2 may hold
gigabytes), so :class:`_Uncompressed` decompresses in bounded steps; and tarfile is lenient
(signed or ``_``-separated sizes, malformed pax records, a missing end marker read as fewer
members) and parses headers through internals that change between Python releases, so
:class:`_Headers` checks each raw header strictly in the bytes this module decompressed itself,
before tarfile is handed them, and then matches each member tarfile gives against them through
what tarfile publishes (``offset``, ``offset_data``, ``size``).
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
_GLOBAL = b"g"
_SPARSE = b"S"  # an old GNU sparse member: its map follows in blocks of its own
_OCTAL = b"01234567"
_HIGH_BYTES = bytes(range(128, 256))


@dataclass(frozen=True)
class Listing:
    """A source's image files in memory: ``files[name] = (offset, size)`` into ``buffer``;
    ``dirs`` are the folder names (so empty class folders are seen too); ``tar_headers`` is
    how many raw tar headers were checked (0 for a folder tree)."""

    buffer: bytes
    files: dict[str, tuple[int, int]]
    dirs: tuple[str, ...]
    tar_headers: int = 0


def read_images(f, *, path: str, keep) -> Listing:
    """The regular files of the tar archive ``f`` whose name ``keep(name)`` accepts, within
    :mod:`study.limits` (``MAX_DECOMPRESSED_BYTES``, ``MAX_SOURCE_FILES``, ``MAX_IMAGE_FILE_BYTES``,
    ``MAX_SOURCE_IMAGE_BYTES``): a decompression bomb is refused at a few MB of memory."""
    headers = _Headers(path=path)
    data = _Uncompressed(f, path=path, headers=headers)
    buffer, files, dirs = bytearray(), {}, []
    seen: set[str] = set()
    try:
        with tarfile.open(
            fileobj=data, mode="r|", bufsize=_BUFSIZE, encoding="utf-8", errors="surrogateescape"
        ) as tf:
            for info in tf:
                headers.member_read(info)
                if headers.members > limits.MAX_SOURCE_FILES:
                    raise DataError(
                        f"{path}: more than {limits.MAX_SOURCE_FILES} archive members (MAX_SOURCE_FILES)"
                    )
                if info.issparse():
                    raise DataError(
                        f"{path}: member {info.name[:200]!r} is a sparse file: refusing the archive"
                    )
                if info.isfile() or info.isdir():
                    _check_name(info.name, seen, path=path)
                if info.isdir():
                    dirs.append(info.name)
                elif info.isfile() and keep(info.name):
                    member = tf.extractfile(info)
                    if info.size > limits.MAX_IMAGE_FILE_BYTES:
                        # compressed: refused at its header, a bomb's gigabytes never decompressed; plain:
                        # read to its end (bounded by the file, hashed whole), as a size past the archive's
                        # end is the first thing wrong
                        if data.compressed:
                            data.check_declared(info.offset_data + info.size)
                        while not data.compressed and member.read(2**20):
                            pass
                        raise DataError(
                            f"{path}: {info.name[:200]}: {info.size} bytes, more than the limit of "
                            f"{limits.MAX_IMAGE_FILE_BYTES} (MAX_IMAGE_FILE_BYTES)"
                        )
                    if len(buffer) + info.size > limits.MAX_SOURCE_IMAGE_BYTES:
                        raise DataError(
                            f"{path}: its image files hold more than {limits.MAX_SOURCE_IMAGE_BYTES} "
                            "bytes (MAX_SOURCE_IMAGE_BYTES)"
                        )
                    files[info.name] = (len(buffer), info.size)
                    buffer += member.read(info.size)
    except tarfile.TarError:
        raise headers.refusal() from None
    headers.check_end()
    return Listing(buffer=buffer, files=files, dirs=tuple(dirs), tar_headers=headers.checked)


class _Uncompressed:
    """The uncompressed bytes of the buffered file ``f`` (gzip, bzip2, xz or plain tar, told by its first
    bytes, peeked): ``read(n)`` decompresses at most ``n`` bytes and shows them to ``headers`` first."""

    def __init__(self, f, *, path: str, headers: _Headers):
        self.path, self.headers, self.total = path, headers, 0
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

    def read(self, n: int) -> bytes:
        try:
            data = self._src.read(n)
        except EOFError:
            raise DataError(
                f"{self.path}: cannot decompress archive (compressed data ends early: truncated)"
            ) from None
        except (OSError, zlib.error, lzma.LZMAError, ValueError) as e:
            if not self.compressed:
                raise  # reading the file failed: the caller's "cannot read"
            raise DataError(f"{self.path}: cannot decompress archive ({one_line(e)})") from None
        self.check_declared(self.total + len(data))
        self.total += len(data)
        self.headers.feed(data)
        return data

    def check_declared(self, end: int) -> None:
        """Refuse an archive whose uncompressed bytes reach (or, as its headers declare, would reach) ``end``,
        past ``MAX_DECOMPRESSED_BYTES``."""
        cap = limits.MAX_DECOMPRESSED_BYTES
        if end > cap:
            if self.compressed:
                raise DataError(
                    f"{self.path}: decompresses to more than {cap} bytes (MAX_DECOMPRESSED_BYTES): "
                    "refusing a possible decompression bomb"
                )
            raise DataError(f"{self.path}: archive is more than {cap} bytes (MAX_DECOMPRESSED_BYTES)")


@dataclass(frozen=True)
class _Member:
    """Where one member lies, as its raw headers say: ``offset`` is its first header (an
    extended one, a global pax header aside), ``offset_data`` its data, of ``size`` bytes."""

    offset: int
    offset_data: int
    size: int


class _Headers:
    """The raw headers of one archive (POSIX.1-2001 ustar/pax, and GNU tar's long names and
    base-256 sizes), walked in the uncompressed bytes as they are read and checked where
    tarfile is lenient; then each member tarfile gives must lie where they say (:meth:`member_read`).

    The walk keeps only the bytes from the next header on (and a pax header's body, at most
    :data:`_MAX_HEADER_BODY`): a member's data is skipped by its size."""

    def __init__(self, *, path: str):
        self.path = path
        self.total = 0  # bytes walked
        self.at = 0  # where the next header (or the pax body :attr:`pax`) starts
        self.pending = b""  # the bytes from :attr:`at` to :attr:`total`
        #: (offset, size, global?) of the pax header whose body is at :attr:`at`
        self.pax: tuple[int, int, bool] | None = None
        self.chain = 0  # extended headers since the last member
        self.chain_at: int | None = None  # the first of them, a global pax header aside
        self.pax_size: int | None = None  # the member's size, from a pax header of the chain
        self.walked: collections.deque[_Member] = collections.deque()  # members tarfile has not given yet
        self.checked = 0  # raw headers checked
        self.end: int | None = None  # where the end-of-archive marker is
        self.sparse: int | None = None  # an old GNU sparse member's header: the walk stops there
        self.members = 0  # members tarfile gave
        self.member: str | None = None  # the last of them
        self.member_end = 0  # where its data, padded to a block, end

    def feed(self, data: bytes) -> None:
        """The next uncompressed bytes: check every header (and pax body) they complete."""
        start = self.total
        self.total += len(data)
        if self.end is not None or self.sparse is not None or self.total <= self.at:
            return
        buf = self.pending + data[max(0, self.at - start) :]
        i = 0
        while self.end is None and self.sparse is None:
            need = _BLOCK if self.pax is None else self.pax[1]
            if len(buf) - i < need:
                break
            if self.pax is None:
                step = self._header(buf[i : i + _BLOCK])
            else:
                step = self._pax_body(buf[i : i + need])
            self.at += step
            i += step
        self.pending = buf[i:] if self.end is None and self.sparse is None else b""

    def _header(self, block: bytes) -> int:
        """Check the header ``block`` at :attr:`at`; how far the next header (or pax body) is."""
        off = self.at
        if block.count(0) == _BLOCK:
            if self.chain:
                raise DataError(
                    f"{self.path}: extended header with no member before the end-of-archive "
                    f"marker at byte {off}: refusing the archive"
                )
            self.end = off
            return 0
        if not _checksum_ok(block):
            where = "" if off else " (no tar header at the start)"
            raise DataError(f"{self.path}: not a tar archive or corrupt at byte {off}{where}")
        size = _size(block[124:136], path=self.path, off=off)
        kind = block[156:157]
        self.checked += 1
        if kind in _EXTENDED:
            self.chain += 1
            if size > _MAX_HEADER_BODY:
                raise DataError(
                    f"{self.path}: extended header at byte {off} of {size} bytes, more than "
                    f"{_MAX_HEADER_BODY}: refusing the archive"
                )
            if self.chain > _MAX_CHAIN:
                raise DataError(
                    f"{self.path}: extended header at byte {off}: more than {_MAX_CHAIN} in a row "
                    "before one member: refusing the archive"
                )
            if kind != _GLOBAL and self.chain_at is None:
                self.chain_at = off
            if kind in _PAX:
                self.pax = (off, size, kind == _GLOBAL)
                return _BLOCK
            return _BLOCK + _round_up(size)
        if kind == _SPARSE:
            self.sparse = off
            return 0
        if self.pax_size is not None:
            size = self.pax_size
        self.walked.append(
            _Member(
                offset=self.chain_at if self.chain_at is not None else off,
                offset_data=off + _BLOCK,
                size=size,
            )
        )
        self.chain, self.chain_at, self.pax_size = 0, None, None
        return _BLOCK + _round_up(size)

    def _pax_body(self, body: bytes) -> int:
        """Parse the body of the pax header :attr:`pax` strictly (tarfile skips what it cannot
        parse): a malformed record, a size that is not a number, a sparse map are refused."""
        off, size, is_global = self.pax
        self.pax = None
        records = _pax_records(body, path=self.path, off=off)
        if any(key.startswith("GNU.sparse.") for key in records):  # tarfile would parse its map unchecked
            raise DataError(f"{self.path}: member at byte {off} is a sparse file: refusing the archive")
        value = records.get("size")
        if value is not None:
            if not (value.isascii() and value.isdigit()):
                raise DataError(f"{self.path}: corrupt pax header at byte {off} (size {value[:30]!r})")
            if is_global:  # tarfile would give every later member this size, skipping the header's
                raise DataError(f"{self.path}: corrupt pax header at byte {off} (a global size record)")
            if self.pax_size is None:  # tarfile applies the chain's pax headers last to first
                self.pax_size = int(value)
        return _round_up(size)

    def member_read(self, info: tarfile.TarInfo) -> None:
        """tarfile gave the member ``info``: it must lie where its raw headers say, and a
        member whose data tarfile does not skip (a folder, a link, a device) must have none."""
        self.members += 1
        if not self.walked and self.sparse is not None:
            return  # read_images refuses it by name
        if not self.walked:
            raise DataError(f"{self.path}: not a tar archive or corrupt at byte {info.offset}")
        m = self.walked.popleft()
        if (info.offset, info.offset_data, info.size) != (m.offset, m.offset_data, m.size):
            raise DataError(
                f"{self.path}: corrupt tar header at byte {m.offset} (its member read as "
                f"{info.size} bytes at byte {info.offset_data}, its headers say {m.size} "
                f"at {m.offset_data})"
            )
        if m.size and (info.isdir() or info.issym() or info.islnk() or info.isdev()):
            raise DataError(
                f"{self.path}: corrupt tar header at byte {m.offset} (member "
                f"{info.name[:200]!r} is no regular file but has {m.size} bytes of data)"
            )
        self.member = info.name
        self.member_end = m.offset_data + _round_up(m.size)

    def check_end(self) -> None:
        """tarfile found no more members: refuse unless the end-of-archive marker follows the last."""
        if self.walked:  # tarfile stopped at a header it could not read, as if the archive ended there
            raise self.refusal()
        if self.end is None:
            at = self._next_header()
            raise DataError(
                f"{self.path}: truncated tar archive: no end-of-archive marker after {self.members} "
                f"members at byte {at} (the file was cut short?)"
            )

    def refusal(self) -> DataError:
        """The one line for tarfile's refusal of the archive, told from the bytes walked."""
        if self.total < self.member_end:  # its data end early: tarfile refuses only there
            return DataError(f"{self.path}: truncated tar archive ({self.member[:200]} is cut short)")
        if self.sparse is not None:
            return DataError(
                f"{self.path}: member at byte {self.sparse} is a sparse file: refusing the archive"
            )
        if self.walked or self.end is not None:  # a header tarfile refused, whole
            at = self.walked[0].offset if self.walked else self.member_end
            where = "" if at else " (no tar header at the start)"
            return DataError(f"{self.path}: not a tar archive or corrupt at byte {at}{where}")
        at = self._next_header()
        if at == 0:
            return DataError(f"{self.path}: not a tar archive (only {self.total} bytes)")
        return DataError(f"{self.path}: truncated tar archive (header at byte {at})")

    def _next_header(self) -> int:
        """Where the header the walk waits for starts (after the pax body it may wait for)."""
        return self.at if self.pax is None else self.at + _round_up(self.pax[1])


def _checksum_ok(block: bytes) -> bool:
    """The header checksum (POSIX.1 ustar: the octal sum of the header's bytes, its checksum
    field read as spaces; summed as unsigned or, as some old tars did, signed bytes)."""
    field = block[148:156].split(b"\0", 1)[0].strip()
    if not field or field.translate(None, _OCTAL):
        return False
    rest = block[:148] + block[156:]
    stored = int(field, 8)
    unsigned = 8 * ord(" ") + sum(rest)
    if stored == unsigned:
        return True
    high = len(rest) - len(rest.translate(None, _HIGH_BYTES))  # bytes that are negative when signed
    return stored == unsigned - 256 * high


def _size(field: bytes, *, path: str, off: int) -> int:
    """The size field of the header at ``off``: octal digits (POSIX.1 ustar) or GNU tar's
    base-256, strictly (``int`` would take ``-``, ``+``, ``_``; a base-256 ``0xff`` is negative)."""
    if field[0] == 0x80:
        return int.from_bytes(field[1:], "big")
    if field[0] == 0xFF:
        raise DataError(f"{path}: corrupt tar header at byte {off} (negative size)")
    digits = field.split(b"\0", 1)[0].strip()
    if digits.translate(None, _OCTAL):
        raise DataError(f"{path}: corrupt tar header at byte {off} (size {digits[:12]!r})")
    return int(digits or b"0", 8)


def _check_name(name: str, seen: set[str], *, path: str) -> None:
    """Refuse a member named outside the archive (absolute, ``..``) or twice: nothing is
    extracted, but such an archive is hostile or ambiguous."""
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or "\0" in name:
        raise DataError(
            f"{path}: member {name[:200]!r} points outside the archive (absolute path or '..'): "
            "refusing the archive"
        )
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
