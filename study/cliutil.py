"""Shared command-line plumbing: one-line errors with exit 2, model flags."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from study.models.config import ENCODING_FIELDS, ENCODINGS, ConfigError, ModelConfig  # torch-free

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user; printed as one line, exit status 2."""


class DefaultsMixin:
    """``--help`` shows each option's default, ``(default: X)``, unless the help text
    already says it or there is none to show (None, False, a store_true flag)."""

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and self._shows_default(action):
            action.help = "(default: %(default)s)"  # argparse prints nothing for a flag without help
        return super()._format_action(action)

    @staticmethod
    def _shows_default(action: argparse.Action) -> bool:
        default = action.default
        return not (default is None or default is False or default is argparse.SUPPRESS
                    or not action.option_strings or isinstance(action, argparse._VersionAction))

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (action.help or "").strip()
        if not self._shows_default(action) or "default" in text.lower():
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class DefaultsFormatter(DefaultsMixin, argparse.HelpFormatter):
    pass


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are a single line (no usage dump), exit 2, and
    whose ``--help`` shows the defaults."""

    def __init__(self, *args, **kwargs):
        fc = kwargs.get("formatter_class", argparse.HelpFormatter)
        if not issubclass(fc, DefaultsMixin):  # e.g. RawDescriptionHelpFormatter: keep it, add defaults
            fc = type(f"Defaults{fc.__name__}", (DefaultsMixin, fc), {})
        kwargs["formatter_class"] = fc
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def package_version() -> str:
    """The installed version of this project (``unknown`` from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attention-cnn-study")
    except PackageNotFoundError:
        return "unknown"


def fail(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


MODEL_FLAGS = ("arch", "encoding", "num_heads", *ENCODING_FIELDS, "hidden", "layers", "intermediate")


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """Flags that override fields of a :class:`ModelConfig` (names from the paper); every
    encoding's own fields (``study.models.encodings``) get a flag of their own."""
    g = parser.add_argument_group("model (defaults: the paper's SA quadratic, N_h=9)")
    g.add_argument("--arch", choices=["sa", "resnet18"], help="model family")
    g.add_argument("--encoding", choices=list(ENCODINGS), help="attention encoding")
    g.add_argument("--num-heads", type=int, metavar="N_h", help="heads per layer")
    for f in ENCODING_FIELDS.values():
        if f.type is bool:
            g.add_argument(flag(f.name), action=argparse.BooleanOptionalAction, default=None, help=f.doc)
        else:
            g.add_argument(flag(f.name), type=f.type, choices=f.choices, metavar=f.metavar, help=f.doc)
    g.add_argument("--hidden", type=int, metavar="D", help="hidden size (400)")
    g.add_argument("--layers", type=int, help="encoder layers (6)")
    g.add_argument("--intermediate", type=int, help="feed-forward size (512)")


def model_overrides(args: argparse.Namespace) -> dict:
    return {k: getattr(args, k) for k in MODEL_FLAGS if getattr(args, k, None) is not None}


def model_config(prog: str, base: ModelConfig | None = None, **overrides) -> ModelConfig:
    """Build a config, turning a ConfigError into ``prog: error: --flag: message``."""
    try:
        if base is None:
            return ModelConfig(**overrides)
        return base.replace(**overrides)
    except ConfigError as e:
        fail(prog, f"{flag(e.field)}: {e.message}")
