"""Reading a study file's YAML safely, before there is a value a schema could check: a regular
UTF-8 file (a FIFO or ``/dev/zero`` refused before it is opened for reading), nodes, depth and
integer digits counted on the event stream so an alias bomb stops before any object is built,
YAML 1.2 core-schema scalars (docs/study-files.md "What `study validate` checks", "Limits").
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Hashable
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, ScalarEvent

from study import limits


class YamlError(ValueError):
    """A study file that cannot be read as a bounded YAML mapping (one line)."""


_INT = r"[-+]?(?:0|[1-9][0-9_]*)"


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser when PyYAML has it
    """SafeLoader with the module docstring's scalars (plus ``<<`` merge keys) and checks."""

    yaml_implicit_resolvers: dict = {}

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else ():
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):  # SafeConstructor reports it
                break
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (line {key_node.start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        """Decimal integers only, also under an explicit ``!!int`` tag (``!!int 0x10``
        and ``!!int 1:30`` would otherwise bring back YAML 1.1's forms)."""
        value = self.construct_scalar(node)
        digits = value.lstrip("+-").replace("_", "")
        line = node.start_mark.line + 1
        if not re.fullmatch(_INT, value):
            raise YamlError(f"line {line}: !!int {value[:20]!r} is not a decimal integer")
        if len(digits) > limits.MAX_INT_DIGITS:
            raise YamlError(
                f"line {line}: an integer of {len(digits)} digits, more than "
                f"{limits.MAX_INT_DIGITS} (MAX_INT_DIGITS)"
            )
        return int(value.replace("_", ""))


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
for _tag, _pattern, _first in (
    ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("int", _INT, "-+0123456789"),
    (
        "float",
        r"""[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+]?[0-9]+)? | [-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
                     | [-+]?\.(?:inf|Inf|INF) | \.(?:nan|NaN|NAN)""",
        "-+0123456789.",
    ),
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("merge", r"<<", "<"),
):
    _Loader.add_implicit_resolver(
        f"tag:yaml.org,2002:{_tag}", re.compile(f"^(?:{_pattern})$", re.X), list(_first)
    )


def read_study_text(path: str | os.PathLike) -> str:
    """The text of the study file at ``path`` (module docstring); never opens a FIFO or device."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise YamlError("is a folder, not a study file")
        if not stat.S_ISREG(st.st_mode):
            raise YamlError("not a regular file")
        if st.st_size > limits.MAX_STUDY_FILE_BYTES:
            raise YamlError(
                f"study file is {st.st_size} bytes, more than the limit of "
                f"{limits.MAX_STUDY_FILE_BYTES} (MAX_STUDY_FILE_BYTES)"
            )
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped since the stat
                raise YamlError("not a regular file")
            data = f.read(limits.MAX_STUDY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise YamlError("no such study file") from None
    except OSError as e:
        raise YamlError(f"cannot read ({e.strerror})") from None
    if len(data) > limits.MAX_STUDY_FILE_BYTES:
        raise YamlError(
            f"study file is more than the limit of {limits.MAX_STUDY_FILE_BYTES} bytes (MAX_STUDY_FILE_BYTES)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlError(f"not UTF-8 text (byte {e.start})") from None


def load_yaml(text: str) -> Any:
    """The Python value of the single YAML document ``text`` (module docstring), else :class:`YamlError`."""
    try:
        check_expansion(text)
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        text = " ".join(str(e).replace('in "<unicode string>", ', "").split())
        raise YamlError("invalid YAML: " + text) from None
    except RecursionError:
        raise YamlError("invalid YAML: nested too deeply") from None


def check_expansion(text: str) -> None:
    """Count the nodes of ``text`` with every alias expanded, from the event stream (nothing
    is composed): :class:`YamlError` past MAX_YAML_NODES, too deep, or on a recursive alias."""
    cap = limits.MAX_YAML_NODES
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (expanded size, nesting height)
    # [expanded size so far, anchor, height of the deepest child] of each open collection
    stack: list[list] = []
    total = 0
    deep = f"collections nested more than {limits.MAX_YAML_DEPTH} deep (MAX_YAML_DEPTH)"
    for ev in yaml.parse(text, Loader=_Loader):
        line = ev.start_mark.line + 1 if ev.start_mark else "?"
        if isinstance(ev, CollectionStartEvent):
            stack.append([1, ev.anchor, 0])  # its size joins its parent's at its end
            if len(stack) > limits.MAX_YAML_DEPTH:
                raise YamlError(f"line {line}: {deep}")
            total += 1
        elif isinstance(ev, (CollectionEndEvent, ScalarEvent, AliasEvent)):
            if isinstance(ev, CollectionEndEvent):
                n, anchor, height = stack.pop()
                height, added = height + 1, 0
            elif isinstance(ev, ScalarEvent):
                n, anchor, height, added = 1, ev.anchor, 0, 1
            elif ev.anchor in sizes:
                (n, height), anchor, added = sizes[ev.anchor], None, sizes[ev.anchor][0]
                if len(stack) + height > limits.MAX_YAML_DEPTH:  # aliases of aliases nest too
                    raise YamlError(f"line {line}: {deep} (aliases expanded)")
            elif any(a == ev.anchor for _, a, _ in stack):
                raise YamlError(
                    f"line {line}: alias *{ev.anchor} refers to a node that contains it (recursive)"
                )
            else:
                continue  # undefined: the loader reports it
            if anchor is not None:
                sizes[anchor] = (n, height)
            if stack:
                stack[-1][0] += n
                stack[-1][2] = max(stack[-1][2], height)
            total += added
        if total > cap:
            raise YamlError(
                f"line {line}: the document expands to more than {cap} YAML nodes (aliases counted "
                "in full; limit MAX_YAML_NODES)"
            )
