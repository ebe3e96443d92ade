"""``analysis query``'s output: the rows of a query printed as a table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
import math
from decimal import Decimal
from typing import Any

FORMATS = ("table", "csv", "json")


def _plain(value: Any) -> Any:
    """JSON-safe value: numbers stay numbers (DuckDB's exact DECIMAL results, e.g. of
    ``sum`` over integers, become int when integral, else float), NaN/inf become null,
    lists recurse, other objects (dates, …) become text."""
    if isinstance(value, (Decimal, float)) and not math.isfinite(value):
        return None
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _cell(value: Any) -> str:
    """A CSV cell: NULL and NaN empty, ±inf as ``inf``, lists JSON."""
    if isinstance(value, float) and math.isinf(value):
        return str(value)
    plain = _plain(value)
    return (
        json.dumps(plain) if isinstance(value, (list, tuple, dict)) else ("" if plain is None else str(plain))
    )


def _short(value: Any) -> str:
    """A cell for the human-readable table (long lists elided)."""
    if value is None:
        return "NULL"
    if isinstance(value, Decimal):
        value = _plain(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        head = ", ".join(_short(v) for v in value[:4])
        return f"[{head}, …] ({len(value)})" if len(value) > 4 else f"[{head}]"
    return str(value)


def render(columns: list[str], rows: list[tuple], fmt: str) -> str:
    """The query result as text in ``fmt`` (``table``, ``csv`` or ``json``)."""
    if fmt == "json":
        return (
            json.dumps([{c: _plain(v) for c, v in zip(columns, r)} for r in rows], ensure_ascii=False) + "\n"
        )
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows([_cell(v) for v in r] for r in rows)
        return buf.getvalue()
    if not columns:
        return ""
    cells = [[_short(v) for v in r] for r in rows]
    numeric = [
        all(
            isinstance(r[i], (int, float, Decimal)) and not isinstance(r[i], bool)
            for r in rows
            if r[i] is not None
        )
        for i in range(len(columns))
    ]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)
        ).rstrip()

    out = [line(columns)] + [line(row) for row in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out) + "\n"
