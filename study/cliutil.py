"""Shared command-line plumbing: one-line errors with exit 2, model flags."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from study.models.config import ConfigError, ModelConfig  # torch-free

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user; printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are a single line (no usage dump), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def fail(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


MODEL_FLAGS = ("arch", "encoding", "isotropic", "num_heads", "pos_dim", "positional_score", "hidden", "layers",
               "intermediate")


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """Flags that override fields of a :class:`ModelConfig` (names from the paper)."""
    g = parser.add_argument_group("model (defaults: the paper's SA quadratic, N_h=9)")
    g.add_argument("--arch", choices=["sa", "resnet18"], help="model family")
    g.add_argument("--encoding", choices=["quadratic", "learned", "learned_content"],
                   help="relative positional encoding")
    g.add_argument("--isotropic", action=argparse.BooleanOptionalAction, default=None,
                   help="isotropic Gaussian heads (quadratic only)")
    g.add_argument("--num-heads", type=int, metavar="N_h", help="heads per layer")
    g.add_argument("--pos-dim", type=int, metavar="D_p", help="positional encoding dimension")
    g.add_argument("--positional-score", choices=["query", "head"],
                   help="learned encodings: score r_delta with the query (learned_content default, "
                   "pos_dim = hidden) or with learned head keys (learned)")
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
