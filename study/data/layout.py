"""The image-folder layout: ``[wrapper/]train/<class>/<image>`` and ``.../test/<class>/<image>``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from study import limits

from .errors import DataError

SPLITS = ("train", "test")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".tif", ".tiff")
_EXPECTED = "expected train/<class>/<image> and test/<class>/<image>"


def is_image_name(name: str) -> bool:
    """True for a visible file with an image extension (``.jpg``, ``.png``, …)."""
    return name.lower().endswith(IMAGE_EXTENSIONS) and not any(map(_hidden, name.split("/")))


@dataclass(frozen=True)
class Layout:
    """The classes (sorted folder names) and, per split, ``(file name, label)`` pairs
    sorted by label then name; names are as given to :func:`resolve_layout`."""

    classes: tuple[str, ...]
    train: list[tuple[str, int]]
    test: list[tuple[str, int]]


def resolve_layout(*, source: str, files: Iterable[str], dirs: Iterable[str] = ()) -> Layout:
    """Map image ``files`` and ``dirs`` (``/``-separated paths) of ``source``, optionally in one
    wrapping folder, to a :class:`Layout`; non-image and hidden files are ignored.  A source with
    fewer than two classes is refused: it trains nothing (every prediction is right)."""
    entries = [(f, _parts(f)) for f in files if is_image_name(f)]
    dir_parts = [p for p in map(_parts, dirs) if p and not any(map(_hidden, p))]
    tops = {p[0] for _, p in entries if len(p) > 1} | {p[0] for p in dir_parts}
    prefix = ""
    if not tops & set(SPLITS) and len(tops) == 1:  # one wrapping folder: paths below it from here on
        root = next(iter(tops))
        prefix = f"{root}/"
        entries = [(name, p[1:]) for name, p in entries if p[0] == root]
        dir_parts = [p[1:] for p in dir_parts if p[0] == root]

    present = {p[0] for _, p in entries if len(p) > 1} | {p[0] for p in dir_parts if p}
    missing = [s for s in SPLITS if s not in present]
    if missing:
        what = " and ".join(f"{prefix}{s}/" for s in missing)
        plural = "folders" if len(missing) > 1 else "folder"
        raise DataError(f"{source}: no {what} {plural} ({_EXPECTED})")

    per_split: dict[str, dict[str, list[str]]] = {s: {} for s in SPLITS}
    for p in dir_parts:
        if len(p) >= 2 and p[0] in per_split:
            per_split[p[0]].setdefault(p[1], [])
    for name, p in entries:
        if len(p) == 2 and p[0] in per_split:
            raise DataError(
                f"{source}: {name}: image outside a class folder (expected {prefix}{p[0]}/<class>/<image>)"
            )
        if len(p) > 2 and p[0] in per_split:
            per_split[p[0]].setdefault(p[1], []).append(name)

    train_cls, test_cls = set(per_split["train"]), set(per_split["test"])
    if train_cls != test_cls:
        only_train = ", ".join(sorted(train_cls - test_cls)) or "none"
        only_test = ", ".join(sorted(test_cls - train_cls)) or "none"
        raise DataError(
            f"{source}: class folders differ between {prefix}train/ and {prefix}test/ "
            f"(only in train: {only_train}; only in test: {only_test})"
        )
    classes = tuple(sorted(train_cls))
    if len(classes) < limits.MIN_CLASSES:
        found = f"only {prefix}train/{classes[0]}/" if classes else "no class folder"
        raise DataError(f"{source}: needs at least {limits.MIN_CLASSES} class folders, found {found}")
    if len(classes) > limits.MAX_CLASSES:
        raise DataError(
            f"{source}: {len(classes)} class folders, more than {limits.MAX_CLASSES} (MAX_CLASSES)"
        )
    for s in SPLITS:
        for c in classes:
            if not per_split[s][c]:
                raise DataError(f"{source}: {prefix}{s}/{c}/ holds no image files")
    pairs = {
        s: [(name, label) for label, c in enumerate(classes) for name in sorted(per_split[s][c])]
        for s in SPLITS
    }
    return Layout(classes=classes, **pairs)


def _parts(name: str) -> tuple[str, ...]:
    return tuple(p for p in name.split("/") if p not in ("", "."))


def _hidden(part: str) -> bool:
    return part.startswith(".") and part not in (".", "..") or part == "__MACOSX"
