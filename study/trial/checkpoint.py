"""Per-epoch checkpoints: written atomically, loaded with ``weights_only=True``, the previous
one kept for a damaged latest (docs/design.md §9 "Checkpoints", docs/reliability.md).

Torch is imported to write and load one, not to read what its pickle says: :func:`read_head` reads a
``torch.save`` file's configuration and its tensors' shapes (never their data, never running code), so
that a damaged, foreign or mismatched checkpoint is refused before torch is imported
(:func:`checkpoint_head`)."""

from __future__ import annotations

import codecs
import collections
import dataclasses
import io
import os
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from study.errors import CheckpointError, cause
from study.results.atomicio import write_atomic
from study.results.storage import is_remote
from study.results.tables import file_system
from study.trial.config import PROTOCOL_FIELDS, TrainConfig

FILENAME = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"

#: TrainConfig fields that do not change what a checkpoint continues (how the
#: trial is executed or observed, not what it trains).
OPERATIONAL_FIELDS = frozenset(
    {"amp", "compile", "head_stats", "head_images", "map_radius", "eval_batch_size"}
)


def folder_fs(directory: str):
    """(pyarrow file system, path on it) of a checkpoint folder: local (made absolute) or ``s3://…``."""
    return file_system(directory if is_remote(directory) else str(Path(directory).absolute()))


def save_checkpoint(directory: str | os.PathLike, state: dict[str, Any]) -> str:
    """Write ``state`` to ``directory/checkpoint.pt`` in one step; the checkpoint it replaces
    becomes ``checkpoint.prev.pt``.  On object storage the old object is moved aside, then
    one upload appears whole."""
    directory = str(directory)
    fs, base = folder_fs(directory)

    def keep_previous() -> None:
        import pyarrow.fs as pafs

        if fs.get_file_info(f"{base}/{FILENAME}").type == pafs.FileType.File:
            fs.move(f"{base}/{FILENAME}", f"{base}/{PREVIOUS}")

    if is_remote(directory):  # write_atomic calls before_replace on local files only
        keep_previous()
    import torch

    return write_atomic(
        f"{directory}/{FILENAME}", lambda f: torch.save(state, f), suffix=".pt", before_replace=keep_previous
    )


def load_checkpoint(
    directory: str | os.PathLike | None,
    *,
    warn: Callable[[str], None] | None = None,
    check: Callable[[dict, str], None] | None = None,
) -> dict[str, Any] | None:
    """The latest intact checkpoint in ``directory`` (on the CPU), or None if there is none; a damaged
    latest falls back to the previous one (``warn`` names the skipped file), none intact raises
    :class:`CheckpointError`.  ``check(state, path)`` may refuse one that loads: it counts as damaged."""
    import torch

    def load(fs, path: str):
        with fs.open_input_stream(path) as f:
            return torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)

    return _latest(directory, load, warn=warn, check=check)


def checkpoint_head(
    directory: str | os.PathLike | None, *, check: Callable[[dict, str], None] | None = None
) -> dict[str, Any] | None:
    """The checkpoint :func:`load_checkpoint` takes, as :func:`read_head` reads it without torch (its
    tensors :class:`TensorHead`): none intact raises :class:`CheckpointError` as it does.  None where there
    is no checkpoint, or where only ``torch.load`` can tell (:class:`Undecided`): load_checkpoint decides."""

    def load(fs, path: str):
        with fs.open_input_file(path) as f:
            return read_head(f)

    try:
        return _latest(directory, load, check=check)
    except Undecided:
        return None


def _latest(
    directory,
    load: Callable[[Any, str], Any],
    *,
    warn: Callable[[str], None] | None = None,
    check: Callable[[dict, str], None] | None = None,
) -> dict[str, Any] | None:
    import pyarrow.fs as pafs

    if directory is None:
        return None
    directory = str(directory)
    fs, base = folder_fs(directory)
    damaged: list[str] = []
    for name in (FILENAME, PREVIOUS):
        shown = f"{directory}/{name}" if is_remote(directory) else str(Path(directory) / name)
        kind = fs.get_file_info(f"{base}/{name}").type
        if kind == pafs.FileType.NotFound:
            continue
        if kind != pafs.FileType.File:  # a folder, a FIFO, a device: never opened
            damaged.append(f"{shown} (not a regular file)")
            continue
        try:
            state = load(fs, f"{base}/{name}")
            if not isinstance(state, dict) or "epoch" not in state or "model" not in state:
                raise CheckpointError(f"{shown}: not a checkpoint of this project")
            if check is not None:
                check(state, shown)
        except Undecided:
            raise
        except Exception as e:  # truncated, not a zip, refused pickle, wrong content
            damaged.append(f"{shown} ({cause(e)})")
            continue
        if damaged and warn is not None:
            warn(
                f"checkpoint {damaged[0]} is damaged; using the previous one, {shown} "
                f"(epoch {state['epoch']})"
            )
        return state
    if damaged:
        raise CheckpointError(f"checkpoint {damaged[0]} is damaged and no earlier checkpoint is intact")
    return None


# ------------------------------------------------------------------ a torch.save file read without torch
#: bytes of the pickle of a ``torch.save`` file (its structure and configuration; the tensors' data lie beside
#: it in the zip): one larger is left to torch.load
_MAX_PICKLE_BYTES = 64 * 2**20
#: the globals other than torch's own that ``torch.load(weights_only=True)`` allows (its default allowlist)
_PLAIN_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "Counter"): collections.Counter,
    ("_codecs", "encode"): codecs.encode,
    ("builtins", "bytearray"): bytearray,
    ("builtins", "set"): set,
    ("builtins", "complex"): complex,
}


class Undecided(Exception):
    """What the torch-free reading cannot judge (a torch global or a form it does not know, an old
    file format, a number held in a tensor): ``torch.load`` decides."""


class UnreadableFile(ValueError):
    """A file ``torch.load(weights_only=True)`` refuses, told without torch: the reason."""


@dataclasses.dataclass(frozen=True)
class TensorHead:
    """A tensor as a file's pickle describes it: its storage type (``FloatStorage``) and shape, not
    its data."""

    storage: str
    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __float__(self) -> float:  # a 0-d tensor's value is in its data
        raise Undecided("a number held in a tensor")

    __int__ = __float__


@dataclasses.dataclass(frozen=True)
class _StorageType:
    name: str


@dataclasses.dataclass(frozen=True)
class _Storage:
    kind: _StorageType


def _rebuild_tensor(storage=None, offset=None, size=None, *rest) -> TensorHead:
    ok = isinstance(size, tuple) and all(type(n) is int and n >= 0 for n in size)
    if not isinstance(storage, _Storage) or not ok:
        raise Undecided("a tensor of another form")
    return TensorHead(storage.kind.name, size)


def _rebuild_parameter(data=None, *rest) -> TensorHead:
    if not isinstance(data, TensorHead):
        raise Undecided("a parameter of another form")
    return data


_TORCH_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch", "Size"): tuple,
}


class _HeadUnpickler(pickle.Unpickler):
    """Builds only plain containers, :class:`TensorHead` and what torch's weights-only unpickler allows
    outside torch: any other global is refused before it is looked up (no code named in a pickle runs)."""

    def __init__(self, data: bytes, records: set[str], prefix: str):
        super().__init__(io.BytesIO(data))
        self.records, self.prefix = records, prefix

    def find_class(self, module: str, name: str):
        module = "builtins" if module == "__builtin__" else module
        if (module, name) in _PLAIN_GLOBALS:
            return _PLAIN_GLOBALS[module, name]
        if module == "torch" and name.endswith("Storage") and name.isidentifier():
            return _StorageType(name)
        if (module, name) in _TORCH_GLOBALS:
            return _TORCH_GLOBALS[module, name]
        if module == "torch" or module.startswith("torch."):
            raise Undecided(f"{module}.{name}")
        raise UnreadableFile("refused by the weights-only unpickler: holds more than tensors")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise UnreadableFile("refused by the weights-only unpickler: holds more than tensors")
        if not isinstance(pid[1], _StorageType) or not isinstance(pid[2], str):
            raise Undecided("a storage of another form")
        if f"{self.prefix}/data/{pid[2]}" not in self.records:
            raise UnreadableFile(f"its tensor data {pid[2]!r} are missing (a damaged or foreign file)")
        return _Storage(pid[1])


def read_head(f) -> Any:
    """What the ``torch.save`` file ``f`` (binary, seekable) holds, its tensors as :class:`TensorHead`,
    read without torch: from the zip's directory and its pickle, never the tensors' data, never calling a
    global the pickle names beyond plain containers.  :class:`UnreadableFile` (the reason) for a file
    ``torch.load(weights_only=True)`` refuses; :class:`Undecided` where only it can tell."""
    head = f.read(262)
    if head[:4] != b"PK\x03\x04":
        if head[:1] == b"\x80" or head[257:262] == b"ustar":  # torch's legacy formats (a pickle, a tar)
            raise Undecided("a file in torch's legacy format")
        raise UnreadableFile("not a PyTorch file: not a zip archive" if head else "an empty file")
    f.seek(0)
    try:
        with zipfile.ZipFile(f) as z:
            names = z.namelist()
            prefix, slash, _ = (names or [""])[0].partition("/")
            if not slash or f"{prefix}/data.pkl" not in names:
                raise UnreadableFile("not a PyTorch file: a zip archive without its data.pkl")
            if z.getinfo(f"{prefix}/data.pkl").file_size > _MAX_PICKLE_BYTES:
                raise Undecided("a large pickle")
            with z.open(f"{prefix}/data.pkl") as member:
                data = member.read(_MAX_PICKLE_BYTES + 1)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as e:
        if isinstance(e, UnreadableFile):
            raise
        raise UnreadableFile(
            f"a damaged or truncated zip archive ({' '.join(str(e).split())[:120]})"
        ) from None
    if len(data) > _MAX_PICKLE_BYTES:
        raise Undecided("a large pickle")
    try:
        return _HeadUnpickler(data, set(names), prefix).load()
    except (Undecided, UnreadableFile):
        raise
    except Exception as e:  # a malformed pickle: what torch's unpickler refuses too
        raise UnreadableFile(
            f"a damaged pickle ({type(e).__name__}: {' '.join(str(e).split())[:120]})"
        ) from None


def check_config(
    state: dict[str, Any], *, model_config: dict[str, Any], train_config: dict[str, Any], where: str
) -> None:
    """Refuse to continue ``state`` under another configuration (instead of silently reusing
    it or failing inside ``load_state_dict``): one line naming every differing field.
    Checkpoints older than these keys are not checked; the training protocol's fields, added
    since, compare as their defaults (all off), which they had then."""
    saved_train = state.get("train_config")
    if isinstance(saved_train, dict):
        saved_train = {**{k: TrainConfig.model_fields[k].default for k in PROTOCOL_FIELDS}, **saved_train}
    diffs = [
        f"{k}: {saved.get(k)!r} -> {v!r}"
        for saved, current in ((state.get("model_config"), model_config), (saved_train, train_config))
        if isinstance(saved, dict)
        for k, v in current.items()
        if k != "model" and k not in OPERATIONAL_FIELDS and saved.get(k) != v
    ]
    if diffs:
        raise CheckpointError(
            f"{where} holds a checkpoint of another configuration ({'; '.join(diffs)}); "
            "use another output folder or the same settings"
        )
