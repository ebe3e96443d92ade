"""``analysis``: query a study's tables and draw its figures (``analysis COMMAND --help``).

Errors (missing study, bad SQL, unknown table) are one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import warnings
from pathlib import Path

from analysis import query
from analysis.io import AnalysisError, load
from study.cliutil import (  # torch-free
    BoundedFloat,
    BoundedInt,
    exit_without_final_collections,
    local_path,
    storage_fault,
)
from study.cliutil import Parser as _Parser
from study.cliutil import fail as _fail
from study.cliutil import package_version as _version
from study.limits import MAX_CPUS_PER_TRIAL, MAX_EPOCHS, MAX_PORT, MAX_SERVE_INTERVAL_S, MIN_SERVE_INTERVAL_S
from study.results.tables import TABLES, TableWarning, warnings_as_lines


def _target(p: argparse.ArgumentParser, out: str | None = None) -> None:
    """The study and ``--storage``; ``out``: the help of ``--out``, for a command that writes."""
    p.add_argument(
        "study",
        metavar="NAME|PATH",
        help="a study name under --storage, or a path: a study folder, its tables folder "
        "or a `study train --out` folder (local or s3://…)",
    )
    p.add_argument(
        "--storage",
        default=None,
        help="where studies live, a folder or s3://bucket/prefix (default: $STUDY_STORAGE, else ./results)",
    )
    if out:
        p.add_argument("--out", type=local_path, default=None, help=out)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="analysis",
        description="Query a study's result tables and draw the paper's "
        "figures (Cordonnier et al., ICLR 2020) from them.",
        epilog="`analysis COMMAND --help` describes a command. `analysis` alone prints this "
        "list and exits 2.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    q = sub.add_parser(
        "query",
        help="run SQL over the tables runs, epochs, heads, maps",
        description="Run one DuckDB SQL query over the study's tables: runs (one row per "
        "trial), epochs (trial_id, epoch), heads (trial_id, epoch, layer, head) "
        "and maps (the same keys, window, probs). Works while the study runs.",
        epilog='example: analysis query smoke "SELECT name, max(test_acc) FROM epochs '
        'JOIN runs USING (trial_id) GROUP BY name"',
    )
    _target(q)
    q.add_argument("sql", metavar="SQL", help="the query")
    q.add_argument("--format", choices=query.FORMATS, default="table", help="output format (default table)")
    q.set_defaults(func=_query)

    f = sub.add_parser(
        "figures",
        help="draw every figure and table the data supports",
        description="Draw the paper's Fig. 2 (accuracy), Figs. 4/12/14 (head centres and "
        "contours), Figs. 5/6 (attention maps) and Table 1, plus a sweep "
        "heat-map, head-centre trajectories, convolution-likeness and the "
        "locality figures (attention distance, locality over training, gates), "
        "as PNG, PDF and a CSV of the plotted data: one figure per model variant "
        "(its seeds aggregated, or its median seed, said in the title). Figures "
        "whose tables did not change since they were drawn into --out are kept, "
        "not redrawn; the rest are drawn on --jobs processes. Prints the files "
        "and one line per figure skipped, with the reason.",
    )
    _target(f, out="output folder (default: <study folder>/figures; ./figures/<name> for a URI)")
    f.add_argument(
        "--epoch",
        type=BoundedInt(-1, MAX_EPOCHS - 1, "MAX_EPOCHS"),
        default=None,
        metavar="N",
        help="epoch of head and map figures as stored in the tables (0-based: 0 is after the "
        "first epoch, -1 the untrained model); trajectories and convolution-likeness stop there "
        "(default: each trial's last)",
    )
    f.add_argument(
        "--per-seed",
        action="store_true",
        help="also one head, map, trajectory and convolution-likeness figure per trial (seed), "
        "instead of one per model variant",
    )
    f.add_argument(
        "--jobs",
        type=BoundedInt(1, MAX_CPUS_PER_TRIAL, "MAX_CPUS_PER_TRIAL"),
        default=None,
        metavar="N",
        help="processes drawing figures (default: the cores this process may use)",
    )
    f.add_argument(
        "--pdf",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a PDF beside each PNG (default; --no-pdf: PNG and CSV only, in about half the time)",
    )
    f.set_defaults(func=_figures)

    sc = sub.add_parser(
        "schema",
        help="what every column of the tables means (type, unit, convention)",
        description="Document every column of runs, epochs, heads and maps: type, unit and "
        "convention (shifts in grid pixels with y down, entropy in nats, 0-based "
        "epoch/layer/head, the maps window layout, …).",
    )
    sc.add_argument(
        "table",
        nargs="?",
        choices=TABLES,
        metavar="TABLE",
        help="one table (runs, epochs, heads, maps); default: all",
    )
    sc.set_defaults(func=_schema)

    r = sub.add_parser(
        "report",
        help="one self-contained HTML page of a study (--serve: live)",
        description="Write one HTML page with every figure (embedded), Table 1, per-trial "
        "progress, the failures with their cause and the study file. With "
        "--serve, serve it on 127.0.0.1 and rebuild it whenever the tables "
        "change while the study runs (the page reloads itself).",
    )
    _target(
        r,
        out="the HTML file (default: <study folder>/report.html; ./<name>-report.html for a "
        "URI); with --serve, written only when given",
    )
    r.add_argument("--serve", action="store_true", help="serve the page on 127.0.0.1 and keep it current")
    r.add_argument(
        "--port",
        type=BoundedInt(0, MAX_PORT, "MAX_PORT"),
        default=8765,
        help="port of --serve (0: any free port)",
    )
    r.add_argument(
        "--interval",
        type=BoundedFloat(MIN_SERVE_INTERVAL_S, MAX_SERVE_INTERVAL_S, "MIN/MAX_SERVE_INTERVAL_S"),
        default=3.0,
        help="seconds between checks of the tables (--serve)",
    )
    r.set_defaults(func=_report)
    return parser


def _schema(args: argparse.Namespace) -> int:
    """Every column of ``args.table`` (all tables when None): type, unit and meaning."""
    from analysis.schema import COLUMNS, NOTES

    out = []
    for t in [args.table] if args.table else TABLES:
        out.append(f"{t}: {NOTES[t]}")
        width = max(len(c) for c, _, _ in COLUMNS[t])
        types = max(len(ty) for _, ty, _ in COLUMNS[t])
        for c, ty, meaning in COLUMNS[t]:
            out.append(f"  {c:<{width}}  {ty:<{types}}  {meaning}")
        out.append("")
    sys.stdout.write("\n".join(out))
    return 0


def _query(args: argparse.Namespace) -> int:
    study = load(args.study, args.storage)
    sys.stdout.write(query.render(*study.sql_records(args.sql), args.format))
    return 0


def _figures(args: argparse.Namespace) -> int:
    from analysis.figures import default_out, draw_all

    study = load(args.study, args.storage)
    out = args.out if args.out is not None else default_out(study)
    with _writing(Path(out), folder=True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("always", TableWarning)  # skipped files are named, always
        written, skipped = draw_all(
            study, out, epoch=args.epoch, per_seed=args.per_seed, pdf=args.pdf, jobs=args.jobs
        )
    for line in skipped:
        print(line)
    for path in written:
        print(path)
    return 0


def _report(args: argparse.Namespace) -> int:
    if args.serve:
        from analysis.serve import serve

        serve(args.study, args.storage, port=args.port, interval=args.interval, out=args.out)
        return 0
    from analysis.report import render
    from analysis.serve import write_page

    study = load(args.study, args.storage)
    out = args.out or (
        Path(f"{study.name}-report.html") if study.remote else Path(study.folder) / "report.html"
    )
    with _writing(Path(out), folder=False):
        write_page(out, render(study))
    print(out)
    return 0


@contextlib.contextmanager
def _writing(out: Path, *, folder: bool):
    """Write to ``--out`` (a folder of figures, or one report file) inside: a path that cannot be
    that is one line before anything is drawn, an OSError writing it one line, not a traceback."""
    from study.results.storage import file_in_the_way

    if out.exists() and out.is_dir() != folder:
        raise AnalysisError(f"--out: {out} is {'a file, not a folder' if folder else 'a folder, not a file'}")
    if (blocker := file_in_the_way(out)) is not None:
        raise AnalysisError(f"--out: {blocker} is not a folder")
    try:
        if not folder and out.parent.is_dir():
            # a report file is written last, after figures were drawn into the study's cache:
            # try its folder first (/proc, a read-only mount), so a refusal leaves nothing behind
            tempfile.NamedTemporaryFile(dir=out.parent, prefix=".tmp-").close()
        yield
    except OSError as exc:
        raise AnalysisError(f"--out: cannot write {out} ({exc.strerror or exc})") from None


def _check_storage(args: argparse.Namespace) -> None:
    """Storage URIs checked as ``study`` checks them (docs/results.md, "Storage URIs are inputs")."""
    from study.results.storage import NoBucket, StorageUnreachable, check_study_target

    try:
        check_study_target(str(args.study), args.storage)
    except (ValueError, NoBucket) as e:
        raise AnalysisError(str(e)) from None
    except StorageUnreachable as e:
        print(f"analysis {args.command}: error: storage: {e}", file=sys.stderr, flush=True)
        raise SystemExit(3) from None


def main(argv: list[str] | None = None) -> int:
    exit_without_final_collections()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # `analysis` alone: the list of commands, on stderr, usage status
        parser.print_help(sys.stderr)
        return 2
    prog = f"analysis {args.command}"
    warnings_as_lines(prog)
    # SIGTERM (`kill`, a service manager) stops a command as Ctrl-C does: a figure pool drawing
    # at that moment is shut down with it (Python's default dies at once, its workers blocked for good)
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)  # raises KeyboardInterrupt
    try:
        if hasattr(args, "storage"):
            _check_storage(args)
        return args.func(args)
    except AnalysisError as exc:
        _fail(prog, str(exc))
    except BrokenPipeError:
        return 0
    except OSError as e:
        storage_fault(prog, e)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while it works: one line
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, before)
