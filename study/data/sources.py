"""Image-folder sources (a directory tree or a tar archive), read into memory.

A source is fingerprinted by its content (the cache key) before anything is
decoded: sha256 of the archive file's bytes, or for a directory sha256 over the
sorted relative paths and bytes of its image files.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from .archive import decompress, tar_members
from .errors import DataError, one_line
from .layout import is_image_name


@dataclass(frozen=True)
class Listing:
    """A source's image files in memory: ``files[name] = (offset, size)`` into ``buffer``;
    ``dirs`` are the folder names (so empty class folders are seen too)."""

    buffer: bytes
    files: dict[str, tuple[int, int]]
    dirs: tuple[str, ...]


class ImageFolderSource:
    """An image-folder tree or tar archive at ``path``.  Construction reads the bytes
    and computes :attr:`digest`; :meth:`listing` gives the files without decoding."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        if not self.path.exists():
            raise DataError(f"{path}: no such file or directory")
        self.is_dir = self.path.is_dir()
        try:
            if self.is_dir:
                self._listing: Listing | None = _read_tree(self.path)
                self.digest = _tree_digest(self._listing)
                self._archive = b""
            else:
                self._archive = self.path.read_bytes()
                self.digest = hashlib.sha256(self._archive).hexdigest()
                self._listing = None
        except OSError as e:
            raise DataError(f"{path}: cannot read ({one_line(e.strerror or e)})") from None

    def listing(self) -> Listing:
        """The image files (parsing the archive on first use)."""
        if self._listing is None:
            raw = decompress(self._archive, path=str(self.path))
            members = tar_members(raw, path=str(self.path))
            files = {m.name: (m.offset, m.size) for m in members if not m.is_dir and is_image_name(m.name)}
            dirs = tuple(m.name for m in members if m.is_dir)
            self._listing = Listing(buffer=raw, files=files, dirs=dirs)
            self._archive = b""
        return self._listing


def _read_tree(root: Path) -> Listing:
    names: list[str] = []
    dirs: list[str] = []
    for cur, subdirs, filenames in os.walk(root):
        rel = Path(cur).relative_to(root).as_posix()
        rel = "" if rel == "." else rel + "/"
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d != "__MACOSX")
        dirs.extend(rel + d for d in subdirs)
        names.extend(rel + f for f in sorted(filenames) if is_image_name(rel + f))
    chunks: list[bytes] = []
    files: dict[str, tuple[int, int]] = {}
    off = 0
    for name in sorted(names):
        b = (root / name).read_bytes()
        files[name] = (off, len(b))
        chunks.append(b)
        off += len(b)
    return Listing(buffer=b"".join(chunks), files=files, dirs=tuple(dirs))


def _tree_digest(listing: Listing) -> str:
    h = hashlib.sha256()
    view = memoryview(listing.buffer)
    for name in sorted(listing.files):
        off, size = listing.files[name]
        encoded = name.encode("utf-8", "surrogateescape")
        h.update(len(encoded).to_bytes(8, "little") + encoded + size.to_bytes(8, "little"))
        h.update(view[off : off + size])
    return h.hexdigest()
