"""Image-folder sources (a directory tree or a tar archive), read into memory within
:mod:`study.limits`; what is refused: docs/study-files.md, "Data".  The cache key is the
sha256 of an archive's bytes, or of a folder's sorted relative paths and image bytes.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
from pathlib import Path

from study import limits

from .archive import Listing, read_images
from .cache import cache_path, default_cache_dir
from .errors import DataError, one_line
from .imageheader import refuse_oversized, refuse_unusable
from .layout import is_image_name, resolve_layout


class ImageFolderSource:
    """An image-folder tree or tar archive at ``path``, fingerprinted (:attr:`digest`) on construction."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        try:
            st = os.stat(self.path)
            self.is_dir = stat.S_ISDIR(st.st_mode)
            if not self.is_dir and not stat.S_ISREG(st.st_mode):
                from study.results.metafile import file_kind  # (pyarrow: only for a refusal)

                raise DataError(f"{path}: not a folder or a regular file ({file_kind(st.st_mode)})")
            self._listing: Listing | None = None
            if self.is_dir:
                self._listing, self.digest = _read_tree(self.path, source=str(path))
            else:
                with _open_regular(
                    self.path, source=str(path), name=None, limit=limits.MAX_SOURCE_BYTES
                ) as f:
                    self.digest = hashlib.file_digest(f, "sha256").hexdigest()
        except FileNotFoundError:
            raise DataError(f"{path}: no such file or directory") from None
        except OSError as e:
            raise DataError(f"{path}: cannot read ({one_line(e.strerror or e)})") from None

    def listing(self) -> Listing:
        """The image files (an archive is streamed on first use and must still match :attr:`digest`)."""
        if self._listing is None:
            source = str(self.path)
            try:
                with _open_regular(self.path, source=source, name=None, limit=limits.MAX_SOURCE_BYTES) as f:
                    hashed = io.BufferedReader(hashing := _Hashing(f))  # read_images peeks
                    listing = read_images(hashed, path=source, keep=is_image_name)
                    while hashed.read(2**20):  # the bytes after the archive's end
                        pass
            except OSError as e:
                raise DataError(f"{source}: cannot read ({one_line(e.strerror or e)})") from None
            if hashing.sha256.hexdigest() != self.digest:
                raise DataError(f"{source}: the archive changed while it was read; read it again")
            self._listing = listing
        return self._listing


def _read_tree(root: Path, *, source: str) -> tuple[Listing, str]:
    names: list[str] = []
    dirs: list[str] = []
    for cur, subdirs, filenames in os.walk(root):
        rel = Path(cur).relative_to(root).as_posix()
        rel = "" if rel == "." else rel + "/"
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d != "__MACOSX")
        dirs.extend(rel + d for d in subdirs)
        names.extend(rel + f for f in sorted(filenames) if is_image_name(rel + f))
        if len(names) > limits.MAX_SOURCE_FILES:
            raise DataError(f"{source}: more than {limits.MAX_SOURCE_FILES} image files (MAX_SOURCE_FILES)")
    buffer, files, h = bytearray(), {}, hashlib.sha256()
    for name in sorted(names):
        with _open_regular(root / name, source=source, name=name, limit=limits.MAX_IMAGE_FILE_BYTES) as f:
            b = f.read(limits.MAX_IMAGE_FILE_BYTES + 1)
        if len(b) > limits.MAX_IMAGE_FILE_BYTES:  # it grew since it was opened: refused, not read on
            raise DataError(f"{source}: {name}: more than the limit of {limits.MAX_IMAGE_FILE_BYTES} bytes")
        if len(buffer) + len(b) > limits.MAX_SOURCE_IMAGE_BYTES:
            raise DataError(
                f"{source}: its image files hold more than {limits.MAX_SOURCE_IMAGE_BYTES} bytes "
                "(MAX_SOURCE_IMAGE_BYTES)"
            )
        files[name] = (len(buffer), len(b))
        buffer += b
        encoded = name.encode("utf-8", "surrogateescape")
        h.update(len(encoded).to_bytes(8, "little") + encoded + len(b).to_bytes(8, "little") + b)
    return Listing(buffer=buffer, files=files, dirs=tuple(dirs)), h.hexdigest()


class _Hashing(io.RawIOBase):
    """A binary file whose bytes are hashed (sha256) as they are read."""

    def __init__(self, f):
        self._f, self.sha256 = f, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._f.readinto(b)
        self.sha256.update(memoryview(b)[:n])
        return n


def _open_regular(path: Path, *, source: str, name: str | None, limit: int):
    """``path`` opened (binary) if it is, or links to, a regular file of at most ``limit`` bytes;
    opened non-blocking and checked with ``fstat``, so a FIFO or a device is never read."""
    where = f"{source}: {name}" if name else source
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise DataError(f"{where}: cannot read ({one_line(e.strerror or e)})") from None
    f = os.fdopen(fd, "rb")
    try:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            from study.results.metafile import file_kind  # (pyarrow: only for a refusal)

            raise DataError(f"{where}: not a regular file ({file_kind(st.st_mode)}): refusing to read it")
        if st.st_size > limit:
            raise DataError(
                f"{where}: {st.st_size} bytes, more than the limit of {limit} "
                f"({'MAX_IMAGE_FILE_BYTES' if name else 'MAX_SOURCE_BYTES'})"
            )
    except BaseException:
        f.close()
        raise
    return f


def check_source(data: str, *, cache_dir: Path | None = None) -> tuple[int, int] | None:
    """Refuse (:class:`DataError`) a folder or archive source that :func:`study.data.load_splits` would
    refuse, without importing torch: its layout, and each image as Pillow decodes it
    (:func:`~study.data.imageheader.refuse_unusable`; only the headers once the source is in the cache
    under ``cache_dir``, default ``$STUDY_CACHE_DIR``, as its images passed then).  Its (train, test)
    image counts, as listed (None for ``synthetic``/``cifar10``: :func:`source_counts`)."""
    if data.partition(":")[0] in ("synthetic", "cifar10"):
        return None
    src = ImageFolderSource(data)
    listing = src.listing()
    layout = resolve_layout(source=data, files=listing.files, dirs=listing.dirs)
    cached = cache_path(cache_dir or default_cache_dir(), kind="imagefolder", digest=src.digest).is_file()
    refuse = refuse_oversized if cached else refuse_unusable
    view = memoryview(listing.buffer)
    for name, _ in layout.train + layout.test:
        off, size = listing.files[name]
        refuse(view[off : off + size], source=data, name=name)
    return len(layout.train), len(layout.test)


def source_counts(data: str, *, cache_dir: Path | None = None) -> tuple[int, int]:
    """(train, test) images of the source ``data`` before a subset, without torch: ``synthetic[:N]`` by its
    definition, ``cifar10[:ROOT]`` read (downloaded if missing) and checked, a folder or archive checked by
    :func:`check_source`; refused (:class:`DataError`) as :func:`study.data.load_splits` would refuse it."""
    kind, _, arg = data.partition(":")
    if kind == "synthetic":
        from .synthetic import DEFAULT_TEST, DEFAULT_TRAIN

        return (int(arg) if arg else DEFAULT_TRAIN), DEFAULT_TEST
    if kind == "cifar10":
        from .cifar import read_cifar10

        arrays = read_cifar10(Path(arg) if arg else (cache_dir or default_cache_dir()) / "cifar10")
        return len(arrays["train_labels"]), len(arrays["test_labels"])
    return check_source(data, cache_dir=cache_dir)  # a folder or an archive: never None
