"""Entry point of the ``study`` command."""

from __future__ import annotations

import sys

from study.cliutil import Parser
from study.commands import bench, models, studies, theorem, train

COMMANDS = (models, theorem, train, studies, bench)


def build_parser() -> Parser:
    parser = Parser(
        prog="study",
        description="Self-attention vs convolution studies (Cordonnier et al., ICLR 2020) on Ray Tune.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from study.tables import warnings_as_lines

    args = build_parser().parse_args(argv)
    warnings_as_lines(f"study {args.command}")
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
