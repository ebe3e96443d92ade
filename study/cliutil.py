"""Shared command-line plumbing: one-line errors with exit 2 (:class:`UsageError`), model flags."""

from __future__ import annotations

import argparse
import atexit
import gc
import math
import os
import re
import sys
import typing
from pathlib import Path
from typing import NoReturn

from study import limits
from study.errors import EXIT_STORAGE, EXIT_USAGE, UsageError, printable
from study.models.config import ARCHS, ENCODING_FIELDS, ENCODINGS, ConfigError, ModelConfig  # torch-free
from study.models.fields import encoding_field_owners, field_bounds
from study.results.filesystem import local_path_problem

_INTEGER = re.compile(r"[+-]?[0-9]+")


class BoundedInt:
    """An argparse ``type``: an integer from ``low`` to ``high`` (the :mod:`study.limits` constant
    ``limit``), else one line, exit 2; every integer flag has one (tests/study/test_damaged_files.py)."""

    def __init__(self, low: int, high: int, limit: str):
        self.low, self.high, self.limit = low, high, limit
        self.__name__ = "integer"  # argparse names the type in its messages

    def __call__(self, text: str) -> int:
        text = text.strip()
        if not _INTEGER.fullmatch(text):
            raise argparse.ArgumentTypeError(f"must be an integer, got {text[:40]!r}")
        digits = text.lstrip("+-").lstrip("0")
        # more digits than Python converts (4,300) or than any limit has: compared as text
        value = (
            int(text)
            if len(digits) <= limits.MAX_INT_DIGITS
            else (-1 if text.startswith("-") else 1) * 10**100
        )
        if value > self.high:
            raise argparse.ArgumentTypeError(f"must be <= {self.high} ({self.limit}), got {text[:40]}")
        if value < self.low:
            raise argparse.ArgumentTypeError(f"must be >= {self.low}, got {text[:40]}")
        return value


class BoundedFloat:
    """An argparse ``type``: a finite number from ``low`` to ``high`` (the limit ``limit``; a positive
    one where ``low`` > 0):
    ``5e-324`` or ``1e300`` as a rate or a period would overflow what is computed from it."""

    def __init__(self, low: float, high: float, limit: str):
        self.low, self.high, self.limit = low, high, limit
        self.__name__ = "number"

    def __call__(self, text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or (self.low > 0 and v <= 0):
            kind = "positive" if self.low > 0 else "finite"
            raise argparse.ArgumentTypeError(f"must be a {kind} number, got {text[:40]!r}")
        if not self.low <= v <= self.high:
            raise argparse.ArgumentTypeError(
                f"must be from {self.low:g} to {self.high:g} ({self.limit}), got {text[:40]}"
            )
        return v


def local_path(text: str) -> Path:
    """An argparse ``type`` for a local file or folder (``--out``): one the file system could not take
    (:func:`study.results.filesystem.local_path_problem`) is refused before anything is read or written."""
    if why := local_path_problem(text):
        raise argparse.ArgumentTypeError(why)
    return Path(text)


def field_int(cls, field: str) -> BoundedInt:
    """The flag of an integer field of a pydantic configuration (``ModelConfig``, a member, ``TrainConfig``):
    parsed within the bounds the field declares (their one home), which its refusals name."""
    ge, le, (limit, _), _ = field_bounds(cls.model_fields[field])
    return BoundedInt(ge, le, limit)


def add_config_flag(group, cls, field: str, metavar: str | None, text: str | None, kind=None) -> None:
    """The flag of a field of a pydantic configuration, parsed, bounded and defaulted as the field declares
    (an integer within its bounds, a number, a text), or by ``kind``; a ``Literal``'s values are shown and
    the model refuses any other, as it refuses one in a study file; a bool is a switch: ``--FIELD`` where
    the field is off by default, ``--no-FIELD`` where it is on."""
    info = cls.model_fields[field]
    declared = field_bounds(info)[3]
    if declared is bool:
        action = "store_false" if info.default else "store_true"
        name = flag(f"no_{field}" if info.default else field)
        group.add_argument(name, dest=field, action=action, help=text)
        return
    if kind is None and declared in (int, float):
        kind = field_int(cls, field) if declared is int else float
    if typing.get_origin(declared) is typing.Literal and metavar is None:  # shown; the model refuses others
        metavar = "{" + ",".join(typing.get_args(declared)) + "}"
    group.add_argument(flag(field), type=kind, default=info.default, metavar=metavar, help=text)


def model_int(field: str) -> BoundedInt:
    """The flag of a model size: the bounds :class:`ModelConfig` (or the encoding declaring it) gives it."""
    owners = encoding_field_owners()
    return field_int(owners[field][0] if field in owners else ModelConfig, field)


SEED = BoundedInt(0, limits.MAX_SEED, "MAX_SEED")


class DefaultsMixin:
    """``--help`` shows each option's default, ``(default: X)``, unless the help text
    already says it or there is none to show (None, False, a store_true flag)."""

    def _format_action(self, action: argparse.Action) -> str:
        # default: SUPPRESS for --help and --version; (argparse prints nothing for a flag without help)
        default, text = action.default, (action.help or "").strip()
        if (
            action.option_strings
            and not (default is None or default is False or default is argparse.SUPPRESS)
            and "default" not in text.lower()
        ):
            action.help = f"{text} (default: %(default)s)".lstrip()
        return super()._format_action(action)


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are a single line (no usage dump), exit 2, and
    whose ``--help`` shows the defaults."""

    def __init__(self, *args, formatter_class=argparse.HelpFormatter, **kwargs):
        # e.g. RawDescriptionHelpFormatter: keep it, add defaults
        if not issubclass(formatter_class, DefaultsMixin):
            formatter_class = type(
                f"Defaults{formatter_class.__name__}", (DefaultsMixin, formatter_class), {}
            )
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {printable(message)}\n")  # an argument's newline, escaped


def exit_without_final_collections() -> None:
    """Freeze the heap once every other exit handler has run (Ray's shutdown, logging's flush): Python's
    final garbage collections then skip the millions of objects torch and Ray leave behind, which took
    1.7 s of every `study run`'s exit (0.3 s frozen).  Registered first, so it runs last."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attention-cnn-study")
    except PackageNotFoundError:
        return "unknown"


def discard_stdout() -> None:
    """Standard output to /dev/null: its reader left or its device failed, and Python's exit flush of
    what is still buffered must not fail a second time."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def storage_fault(prog: str, e: OSError) -> NoReturn:
    """A file-system fault no check foresaw (a full disk, standard output on /dev/full): one line,
    :data:`~study.errors.EXIT_STORAGE`, and Python's exit flush kept from failing a second time."""
    try:
        sys.stdout.flush()
    except OSError:  # the output itself: what is still buffered goes nowhere, not into a second error
        discard_stdout()
    where = f"{e.filename}: " if e.filename else ""
    print(f"{prog}: error: storage: {where}{printable(e.strerror or str(e))}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_STORAGE)


def fail(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {printable(message)}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """Flags that override fields of a :class:`ModelConfig` (names from the paper); every
    encoding's own fields (``study.models.encodings``) get a flag of their own."""
    g = parser.add_argument_group("model (defaults: the paper's SA quadratic, N_h=9)")
    g.add_argument("--arch", choices=ARCHS, help="model family")
    g.add_argument("--encoding", choices=list(ENCODINGS), help="attention encoding")
    g.add_argument("--num-heads", type=model_int("num_heads"), metavar="N_h", help="heads per layer")
    for f in ENCODING_FIELDS.values():
        if f.type is bool:
            g.add_argument(flag(f.name), action=argparse.BooleanOptionalAction, help=f.doc)
        else:
            kind = model_int(f.name) if f.type is int else f.type  # a float's bounds: the model's
            doc = f.doc + (f" ({f.bounds[0]:g} to {f.bounds[1]:g})" if f.bounds else "")
            g.add_argument(flag(f.name), type=kind, choices=f.choices, metavar=f.metavar, help=doc)
    g.add_argument("--hidden", type=model_int("hidden"), metavar="D", help="hidden size (400)")
    g.add_argument("--layers", type=model_int("layers"), help="encoder layers (6)")
    g.add_argument("--intermediate", type=model_int("intermediate"), help="feed-forward size (512)")


def check_model_params(config: ModelConfig) -> None:
    """Refuse a model of more than ``MAX_MODEL_PARAMS`` parameters, counted on PyTorch's meta device: each
    size within its limit can still multiply into terabytes (``--hidden 16384 --layers 256``)."""
    from study.models.trained import state_shapes

    try:
        n = sum(math.prod(s) for s in state_shapes(config).values())
    except (ConfigError, RuntimeError, ValueError) as e:
        raise UsageError(f"model: {' '.join(str(e).split())[:160]}") from None
    if n > limits.MAX_MODEL_PARAMS:
        raise UsageError(
            f"model: {n:,} parameters, more than {limits.MAX_MODEL_PARAMS:,} (MAX_MODEL_PARAMS); "
            "use a smaller --hidden/--layers/--intermediate/--num-heads"
        )


def model_overrides(args: argparse.Namespace) -> dict:
    """The model flags given; an attention flag with ``--arch resnet18`` is refused (a study file's grid
    may cross ``arch`` with them, and the baseline then drops them; a flag names one run)."""
    flags = ("arch", "encoding", "num_heads", *ENCODING_FIELDS, "hidden", "layers", "intermediate")
    given = {k: getattr(args, k) for k in flags if getattr(args, k, None) is not None}
    attention = [k for k in ("encoding", "num_heads", *ENCODING_FIELDS) if k in given]
    if given.get("arch") == "resnet18" and attention:
        raise UsageError(f"{flag(attention[0])}: applies only to --arch sa (the baseline has no attention)")
    return given


def config_from_flags(cls=ModelConfig, **fields):
    """``cls(**fields)`` (a ModelConfig or TrainConfig), a ConfigError as ``--flag: message``
    (:class:`UsageError`)."""
    try:
        return cls(**fields)
    except ConfigError as e:
        raise UsageError(f"{flag(e.field)}: {e.message}") from None
