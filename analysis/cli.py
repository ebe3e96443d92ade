"""``analysis``: query a study's tables and draw its figures.

    analysis query NAME|PATH "SQL" [--format table|csv|json] [--storage DIR]
    analysis figures NAME|PATH [--out DIR] [--epoch N] [--storage DIR]
    analysis schema [TABLE]

Errors (missing study, bad SQL, unknown table) are one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from analysis.io import DEFAULT_STORAGE, AnalysisError, load
from analysis.query import FORMATS, run_query

from study.cliutil import Parser as _Parser, fail as _fail  # torch-free


def _target(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", metavar="NAME|PATH",
                   help="a study name under --storage, or a path: a study folder, its tables folder "
                        "or a `study train --out` folder (local or s3://…)")
    p.add_argument("--storage", default=DEFAULT_STORAGE,
                   help="where studies live, a folder or s3://bucket/prefix (default ./results)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="analysis", description="Query a study's result tables and draw the paper's "
                                                  "figures (Cordonnier et al., ICLR 2020) from them.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    q = sub.add_parser("query", help="run SQL over the tables runs, epochs, heads, maps",
                       description="Run one DuckDB SQL query over the study's tables: runs (one row per "
                                   "trial), epochs (trial_id, epoch), heads (trial_id, epoch, layer, head) "
                                   "and maps (the same keys, window, probs). Works while the study runs.",
                       epilog='example: analysis query smoke "SELECT name, max(test_acc) FROM epochs '
                              'JOIN runs USING (trial_id) GROUP BY name"')
    _target(q)
    q.add_argument("sql", metavar="SQL", help="the query")
    q.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")
    q.set_defaults(func=_query)

    f = sub.add_parser("figures", help="draw every figure and table the data supports",
                       description="Draw the paper's Fig. 2 (accuracy), Figs. 4/12/14 (head centres and "
                                   "contours), Figs. 5/6 (attention maps) and Table 1, plus a sweep "
                                   "heat-map, head-centre trajectories and convolution-likeness, as PNG, "
                                   "PDF and a CSV of the plotted data. Prints the files written and one "
                                   "line per figure skipped, with the reason.")
    _target(f)
    f.add_argument("--out", type=Path, default=None,
                   help="output folder (default: <study folder>/figures; ./figures/<name> for a URI)")
    f.add_argument("--epoch", type=int, default=None, metavar="N",
                   help="epoch of head and map figures as stored in the tables (0-based: 0 is after the "
                        "first epoch); trajectories and convolution-likeness stop there "
                        "(default: each trial's last)")
    f.set_defaults(func=_figures)

    sc = sub.add_parser("schema", help="what every column of the tables means (type, unit, convention)",
                        description="Document every column of runs, epochs, heads and maps: type, unit and "
                                    "convention (shifts in grid pixels with y down, entropy in nats, 0-based "
                                    "epoch/layer/head, the maps window layout, …).")
    sc.add_argument("table", nargs="?", choices=["runs", "epochs", "heads", "maps"], metavar="TABLE",
                    help="one table (runs, epochs, heads, maps); default: all")
    sc.set_defaults(func=_schema)
    return parser


def _schema(args: argparse.Namespace) -> int:
    from analysis.schema import describe

    sys.stdout.write(describe(args.table))
    return 0


def _query(args: argparse.Namespace) -> int:
    study = load(args.study, args.storage)
    sys.stdout.write(run_query(study, args.sql, args.format))
    return 0


def _figures(args: argparse.Namespace) -> int:
    from analysis.figures import draw_all

    if args.epoch is not None and args.epoch < 0:
        raise AnalysisError(f"--epoch: must be >= 0, got {args.epoch}")
    study = load(args.study, args.storage)
    out = args.out
    if out is None:
        out = Path("figures") / study.name if study.remote else Path(study.folder) / "figures"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        written, skipped = draw_all(study, out, epoch=args.epoch)
    for line in skipped:
        print(line)
    for path in written:
        print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    prog = f"analysis {args.command}"
    try:
        return args.func(args)
    except AnalysisError as exc:
        _fail(prog, str(exc))
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
