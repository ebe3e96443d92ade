"""What every column of every table means: type, unit, convention (``analysis schema``): the columns
:mod:`study.results.columns` describes, and every encoding's own fields as ``runs`` columns.

Conventions shared by all tables: docs/results.md, "What the columns mean".
"""

from __future__ import annotations

from study.models.config import ENCODING_FIELDS  # torch-free
from study.results import columns
from study.results.columns import NOTES

__all__ = ["COLUMNS", "NOTES"]

#: every encoding's own fields (``study.models.encodings``: declared with their
#: documentation by the encoding's file) are ``runs`` columns too
_SQL_TYPE = {bool: "bool", int: "int", float: "float", str: "text"}
#: table → [(column, type, meaning)]
COLUMNS = {
    **columns.COLUMNS,
    "runs": [
        *columns.COLUMNS["runs"],
        *(
            (f.name, _SQL_TYPE.get(f.type, "text"), f"{f.doc}; null for other encodings")
            for f in ENCODING_FIELDS.values()
            if f.name not in {c for c, _, _ in columns.COLUMNS["runs"]}
        ),
    ],
}
