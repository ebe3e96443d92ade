"""``study schema``: print the study file's JSON Schema (:class:`study.spec.StudyFile`,
pydantic's ``model_json_schema()``).

How editors use it: the YAML language server (VS Code's "YAML" extension by Red Hat,
Neovim/Helix/Emacs through ``yaml-language-server``) reads a first line
``# yaml-language-server: $schema=study.schema.json`` (a path relative to the study
file, or a URL) and then completes keys, shows each field's type, default and bounds
on hover, and underlines unknown keys, wrong types and out-of-range numbers as you
type.  Every ``search_spaces/*.yaml`` carries that line; the committed
``search_spaces/study.schema.json`` is this command's output (``study schema >
search_spaces/study.schema.json`` after a change to the schema; a test checks they
agree).  JetBrains IDEs map the schema to files under Settings | Languages &
Frameworks | Schemas and DTDs | JSON Schema Mappings.  What a schema cannot say (the
data source exists, every grid cell builds a valid model, the batch fits the data)
``study validate FILE`` checks.
"""

from __future__ import annotations

import argparse
import json


def register(sub) -> None:
    p = sub.add_parser(
        "schema", help="print the study file's JSON Schema (for editors: completion and checks as you type)",
        description="Print the JSON Schema of a study file (search_spaces/*.yaml) on stdout: keys, types, "
        "defaults and bounds. Editors with the YAML language server use it through a first line "
        "`# yaml-language-server: $schema=study.schema.json`; search_spaces/study.schema.json is this output. "
        "`study validate FILE` checks what a schema cannot (data, models, batch vs data).",
    )
    p.set_defaults(func=run)


def schema_text() -> str:
    """The study file's JSON Schema as the text ``study schema`` prints."""
    from study.spec import StudyFile

    return json.dumps(StudyFile.model_json_schema(), indent=2) + "\n"


def run(args: argparse.Namespace) -> int:
    print(schema_text(), end="")
    return 0
