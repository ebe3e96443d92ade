"""Entry point of the ``study`` command."""

from __future__ import annotations

import sys

from study.cliutil import (
    Parser,
    discard_stdout,
    exit_without_final_collections,
    package_version,
    storage_fault,
)
from study.commands import bench, export, models, plan, schema, slurm, studies, theorem, train
from study.errors import EXIT_USAGE, StorageError, StudyError

COMMANDS = (models, theorem, train, studies, plan, export, bench, slurm, schema)


def build_parser() -> Parser:
    parser = Parser(
        prog="study",
        description="Self-attention vs convolution studies (Cordonnier et al., ICLR 2020) on Ray Tune.",
        epilog="`study COMMAND --help` describes a command. `study` alone prints this list and exits 2.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from study.results.tables import warnings_as_lines

    exit_without_final_collections()
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # `study slurm FILE [options] -- SBATCH_OPTION ...`: everything after the first `--` is sbatch's,
    # never ours
    cut = argv.index("--") if argv[:1] == ["slurm"] and "--" in argv else len(argv)
    args, extra = parser.parse_known_args(argv[:cut])
    args.sbatch = argv[cut + 1 :]
    if extra:  # overrides after the options (`study run FILE --storage S epochs=5`) are overrides too
        if getattr(args, "overrides", None) is None or any(a.startswith("-") for a in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    if args.command is None:  # `study` alone: the list of commands, on stderr, usage status
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    warnings_as_lines(f"study {args.command}")
    try:
        return args.func(args) or 0
    except StudyError as e:  # a command's typed refusal (study.errors): one line, its exit status
        where = "storage: " if isinstance(e, StorageError) else ""
        print(f"study {args.command}: error: {where}{e}", file=sys.stderr, flush=True)
        raise SystemExit(e.exit_code) from None
    except BrokenPipeError:  # `study status … | head`: the reader left; no traceback
        discard_stdout()  # Python's exit flush must not fail again
        return 128 + 13  # as a process ended by SIGPIPE
    except OSError as e:
        storage_fault(f"study {args.command}", e)


if __name__ == "__main__":
    sys.exit(main())
