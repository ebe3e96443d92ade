"""The registry of attention encodings: ``REGISTRY[ModelConfig.encoding]``, a view of the one registry,
:attr:`study.models.fields.ModelConfig.members` (an encoding's configuration registers itself as it is
declared).  An encoding is one file: its behaviour (:class:`~.base.Encoding`: MAC count, label, layer) and
its configuration (a member of :class:`~study.models.fields.AttentionConfig`: fields, bounds, rules).

The paper's and today's encodings are this package's modules; a user's own comes without a fork from an
installed package's entry point in the group :data:`ENTRY_POINTS` (loaded here) or from a module a study
file names under ``encodings:`` (:func:`load`; docs/study-files.md "Your own encoding").
"""

from __future__ import annotations

import importlib
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from study.models.fields import ModelConfig, encoding_field_owners

from .base import ContentEncoding, Encoding

# the registration order: the paper's four first, its Table 1 order, then today's
# isort: off
from . import quadratic, learned, learned_content, gpsa, relative_bias, rope2d  # noqa: F401, E402
# isort: on

#: the entry-point group an installed package declares its encodings in (a module, or its member class)
ENTRY_POINTS = "attention_cnn_study.encodings"
#: the encodings of Cordonnier et al. (2020) itself
PAPER_ENCODINGS = ("quadratic", "learned", "learned_content")


class _Registry(Mapping):
    """name → :class:`~.base.Encoding` of every registered encoding, in registration order (the paper's
    four first, its Table 1 order, then today's, then a user's)."""

    def __getitem__(self, name: str) -> Encoding:
        return ModelConfig.members[name].spec

    def __iter__(self) -> Iterator[str]:
        return iter(ModelConfig.members)

    def __len__(self) -> int:
        return len(ModelConfig.members)


REGISTRY: Mapping[str, Encoding] = _Registry()


def load(modules: typing.Iterable[str]) -> None:
    """Import each module (dotted name) that declares encodings: its members register as they are declared.
    ImportError naming the module whatever its import raised (a user's module: a syntax error, its own
    exception), or TypeError naming it when it declares no encoding or one already registered."""
    for name in modules:
        before = len(ModelConfig.members)
        try:
            module = importlib.import_module(name)
        except Exception as e:
            raise ImportError(f"cannot import {name!r} ({_one_line(e)})") from None
        if len(ModelConfig.members) == before and not _declares(module):
            raise TypeError(
                f"{name} declares no encoding (no subclass of study.models.fields.AttentionConfig)"
            )


def _declares(module: types.ModuleType) -> bool:
    return any(m.__module__ == module.__name__ for m in ModelConfig.members.values())


def _one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:300]


def _load_entry_points() -> None:
    """The encodings installed packages declare (entry points of :data:`ENTRY_POINTS`); one that cannot
    be imported is named on stderr and left out, so a broken package does not stop every command."""
    for ep in entry_points(group=ENTRY_POINTS):
        try:
            ep.load()
        except Exception as e:
            print(
                f"study: warning: encoding entry point {ep.name} ({ep.value}) not loaded: {_one_line(e)}",
                file=sys.stderr,
            )


_load_entry_points()


@dataclass(frozen=True)
class Field:
    """An encoding's own field as flags and documentation read it: its name (a ``runs`` column), type,
    default, description, choices (a ``Literal``), metavar and, for a number, its closed range."""

    name: str
    type: Any
    default: Any
    doc: str
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    bounds: tuple[float, float] | None = None


def encoding_fields() -> dict[str, Field]:
    """Every encoding-specific field, by name (a field several encodings share, such as ``pos_dim``,
    once: its first declaration), in registry order."""
    out = {}
    for name, owners in encoding_field_owners().items():
        info = owners[0].model_fields[name]
        kinds = [a for a in typing.get_args(info.annotation) or (info.annotation,) if a is not type(None)]
        if typing.get_origin(info.annotation) is typing.Literal:
            kinds = [info.annotation]
        literal = [typing.get_args(k) for k in kinds if typing.get_origin(k) is typing.Literal]
        kind = type(literal[0][0]) if literal else kinds[0]
        meta = {type(m).__name__: m for m in info.metadata}
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        out[name] = Field(
            name=name,
            type=kind,
            default=info.default,
            doc=info.description or "",
            choices=literal[0] if literal and kind is str else None,
            metavar=extra.get("metavar"),
            bounds=(meta["Ge"].ge, meta["Le"].le)
            if kind is float and "Ge" in meta and "Le" in meta
            else None,
        )
    return out


def variants() -> list[tuple[str, dict]]:
    """(id, config overrides incl. ``encoding``) of every form of every encoding."""
    return [(vid, {"encoding": e.name, **over}) for e in REGISTRY.values() for vid, over in e.variants]


__all__ = [
    "ENTRY_POINTS",
    "REGISTRY",
    "PAPER_ENCODINGS",
    "ContentEncoding",
    "Encoding",
    "Field",
    "encoding_fields",
    "load",
    "variants",
]
