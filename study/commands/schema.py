"""``study schema``: print the study file's JSON Schema (pydantic's ``model_json_schema()`` of
:func:`study.spec.studyfile.study_file`: every model field typed and bounded as its configuration declares
it, every registered encoding's included) for editors (docs/study-files.md "The study file")."""

from __future__ import annotations

import argparse
import json

from study.errors import refused


def register(sub) -> None:
    p = sub.add_parser(
        "schema",
        help="print the study file's JSON Schema (for editors: completion and checks as you type)",
        description="Print the JSON Schema of a study file (search_spaces/*.yaml) on stdout: keys, types, "
        "defaults and bounds. Editors with the YAML language server use it through a first line "
        "`# yaml-language-server: $schema=study.schema.json`; search_spaces/study.schema.json is this "
        "output. "
        "`study validate FILE` checks what a schema cannot (data, models, batch vs data).",
    )
    p.add_argument(
        "--encodings",
        nargs="+",
        default=[],
        metavar="MODULE",
        help="modules declaring encodings of your own, as a study file's `encodings:` names them "
        "(installed packages' are always included)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from study.models.encodings import load
    from study.spec.studyfile import study_file

    with refused((ImportError, TypeError), "--encodings: "):
        load(args.encodings)
    print(json.dumps(study_file().model_json_schema(), indent=2))
    return 0
