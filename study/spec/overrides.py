"""Command-line overrides of a study file in Hydra's override syntax (``key.sub=VALUE``,
``models[0].x=V``, ``+key=V``, ``++key=V``, ``~key``; docs/study-files.md "Overrides"),
applied in order to the file's mapping before it is checked like the file.  ``VALUE`` is
YAML read by the study file's own reader and limits (:mod:`study.spec.yamlfile`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from study import limits
from study.spec.yamlfile import YamlError, load_yaml

_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_PATH = re.compile(rf"{_KEY}(?:\.{_KEY}|\.[0-9]+|\[[0-9]+\])*")
_FORMS = "key=VALUE, +key=VALUE, ++key=VALUE or ~key"


def parse(text: str) -> tuple[str, list[str | int], str | None]:
    """``(op, path, value text)`` of one override (``op``: ``=``, ``+``, ``++`` or ``~``), else ValueError."""
    op = re.match(r"~|\+\+|\+|", text)[0]  # "": key=VALUE
    key, eq, value = text[len(op) :].partition("=")
    if op == "~" and eq:
        raise ValueError(f"override {text!r}: ~key=VALUE (delete if equal) is not supported: use ~{key}")
    if op != "~" and not eq:
        raise ValueError(f"override {text!r}: expected {_FORMS}")
    if "@" in key:
        raise ValueError(
            f"override {text!r}: key@package is Hydra's config-group syntax; a study file has none"
        )
    if not _PATH.fullmatch(key):
        raise ValueError(f"override {text!r}: {key!r} is not a field path (name.name, list[0].name)")
    path = [int(t) if t.isdigit() else t for t in re.findall(rf"{_KEY}|[0-9]+", key)]
    return op or "=", path, (value if eq else None)


def value_of(text: str) -> Any:
    """The YAML value of an override's ``VALUE`` (the study file's reader and limits)."""
    if text == "":
        return ""
    if re.fullmatch(rf"{_KEY}\(.*\)", text, flags=re.S):
        raise YamlError(
            f"{text[:40]!r} looks like a Hydra function (choice, range, glob, ...): not supported"
        )
    value = load_yaml(text)
    if isinstance(value, str) and "," in value and not text.lstrip().startswith(("'", '"')):
        raise YamlError(f"{text[:40]!r} is a Hydra sweep (a,b): not supported; a list is [a,b]")
    return value


def apply(
    raw: dict[str, Any], overrides: list[str], *, err: Callable[[str, str], Exception]
) -> dict[str, Any]:
    """A copy of ``raw`` with ``overrides`` applied in order; ``err(path, message)`` builds the
    exception for one that cannot apply (``path``: the override's, ``""`` for a malformed one)."""
    if len(overrides) > limits.MAX_OVERRIDES:
        raise err("", f"{len(overrides)} overrides, more than {limits.MAX_OVERRIDES} (MAX_OVERRIDES)")
    out = copy.deepcopy(raw)
    for text in overrides:
        if not isinstance(text, str):
            raise err("", f"an override must be a string KEY=VALUE, got {type(text).__name__}")
        if len(text) > limits.MAX_OVERRIDE_CHARS:
            raise err(
                "",
                f"an override of {len(text)} characters, more than {limits.MAX_OVERRIDE_CHARS} "
                f"(MAX_OVERRIDE_CHARS): {text[:40]!r}...",
            )
        try:
            op, path, value_text = parse(text)
        except ValueError as e:
            raise err("", str(e)) from None
        node: Any = out
        for depth, key in enumerate(path):
            where = ".".join(map(str, path[: depth + 1]))
            parent = ".".join(map(str, path[:depth])) or "the study file"
            last = depth == len(path) - 1
            if isinstance(key, int) and not isinstance(node, list):
                raise err(where, f"{parent} is {_kind(node)}, not a list: no entry [{key}] (override {text})")
            if isinstance(key, str) and not isinstance(node, dict):
                raise err(
                    where, f"{parent} is {_kind(node)}, not a mapping: no field {key!r} (override {text})"
                )
            present = (0 <= key < len(node)) if isinstance(key, int) else key in node
            if op == "+" and last and present:
                raise err(
                    where,
                    f"already set in the study file: +key adds a field the file lacks (use {where}=VALUE) "
                    f"(override {text})",
                )
            if op == "~" and not present and (last or isinstance(key, str)):
                raise err(where, f"not set in the study file, nothing to delete (override {text})")
            if isinstance(key, int) and not present:
                raise err(
                    where, f"index {key} out of range: {parent} has {len(node)} entries (override {text})"
                )
            if not last:
                node = node[key] if present else node.setdefault(key, {})
            elif op == "~":
                del node[key]
            else:
                try:
                    node[key] = value_of(value_text)
                except YamlError as e:
                    raise err(where, f"value {value_text[:40]!r}: {e} (override {text})") from None
    return out


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(value), f"a number ({value!r})" if isinstance(value, (int, float)) else type(value).__name__
    )
