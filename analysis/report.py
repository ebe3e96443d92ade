"""One self-contained HTML page of a study, from its tables only (docs/figures.md, "The report").

Only a served page polls ``/version`` (:mod:`analysis.serve`); one opened as a file does not.
"""

from __future__ import annotations

import base64
import functools
import html
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd

from analysis.io import Study
from analysis.meta import describe
from analysis.variants import variant_labels

FAILED = ("error", "diverged", "interrupted")
_CAUSE = {
    "diverged": "non-finite training loss (the trial stopped)",
    "interrupted": "the run was interrupted (continue it with `study resume`)",
}

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, 'DejaVu Sans', sans-serif; margin: 1.5em auto;
       max-width: 1100px; padding: 0 1em; color: #1b1b1b; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.6em;
  border-bottom: 1px solid #ddd; padding-bottom: .2em; }
.meta { color: #555; } .summary span { margin-right: 1.2em; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.bar { background: #eee; width: 110px; height: 10px; display: inline-block; vertical-align: middle; }
.bar > div { background: #3b7dd8; height: 10px; }
.status-error, .status-diverged, .status-interrupted { color: #b00020; font-weight: 600; }
.status-finished { color: #1d7a2e; } .status-running { color: #3b7dd8; }
figure { display: inline-block; margin: .5em 1em .8em 0; vertical-align: top; }
figure img { max-width: 520px; width: 100%; border: 1px solid #eee; }
figcaption { font-size: 12px; color: #555; } pre { background: #f6f8fa; padding: .8em; overflow-x: auto; }
.skipped { color: #777; font-size: 12px; }
"""

POLL = """
<script>
(function () {
  if (!location.protocol.startsWith("http")) return;
  var shown = document.documentElement.dataset.version;
  setInterval(function () {
    fetch("version", {cache: "no-store"}).then(function (r) { return r.text(); })
      .then(function (v) { if (v && v !== shown) location.reload(); }).catch(function () {});
  }, %d);
})();
</script>
"""


def _e(v) -> str:
    return html.escape("" if v is None else str(v))


def _num(v, digits: int = 4) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "–"
    return "–" if f != f else f"{f:.{digits}f}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _table(head: list, rows: list[list]) -> str:
    """An HTML table; a cell is its HTML or (class, HTML), a header cell's class its column's (``num``:
    numbers)."""
    cols = [h[0] if isinstance(h, tuple) else "" for h in head]
    html_rows = []
    for tag, cells in [("th", head), *(("td", r) for r in rows)]:
        cells = [c if isinstance(c, tuple) else (k, c) for c, k in zip(cells, cols)]
        html_rows.append(
            "".join(f"<{tag} class='{k}'>{v}</{tag}>" if k else f"<{tag}>{v}</{tag}>" for k, v in cells)
        )
    return "<table>" + "".join(f"<tr>{r}</tr>" for r in html_rows) + "</table>"


def study_file(study: Study) -> str | None:
    """The study file saved next to the tables (``study.yaml``), or None."""
    if not study.folder:
        return None
    from study.results.metafile import read_bytes

    try:
        return read_bytes(f"{study.folder.rstrip('/')}/study.yaml").decode()
    except (OSError, ValueError):  # missing, unreadable, not a file, too big (MetaFileError), not UTF-8
        return None


@functools.cache
def _scratch(root: str) -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="report-figures-")


def figure_cache(study: Study) -> Path:
    """Where the report's figures are drawn and kept between builds (docs/figures.md, "Only what
    changed is redrawn"); the temporary folder is kept for this process, so ``--serve`` rebuilds reuse it."""
    from analysis.figures import default_out

    out = default_out(study)
    try:
        out.mkdir(parents=True, exist_ok=True)
        tempfile.NamedTemporaryFile(prefix=".tmp-", dir=out).close()
        return out
    except OSError:
        return Path(_scratch(study.root).name)


def figures(study: Study) -> tuple[list[tuple[str, str]], list[str]]:
    """(caption, base64 PNG) of every figure the data supports, drawn in :func:`figure_cache`, and the skip
    lines."""
    from analysis.figures import draw_all

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        written, skipped = draw_all(study, figure_cache(study), pdf=False)  # the page embeds PNGs only
        pngs = [(p.stem, base64.b64encode(p.read_bytes()).decode()) for p in written if p.suffix == ".png"]
    return pngs, skipped  # every figure is closed once drawn (analysis.figures.jobs)


def _table1(study: Study) -> str:
    from analysis.figures import table1 as t1
    from analysis.figures.context import Context, Skip

    ctx = Context(study=study, out=Path("."))
    try:
        head, rows = t1.cells(t1.data(ctx))
    except Skip as why:
        return f"<p class='skipped'>{_e(why)}</p>"
    head = [
        head[0],
        *(("num", h) for h in head[1:-1]),
        head[-1],
    ]  # numbers right-aligned, the paper's text not
    return f"<p>{_e(describe(ctx.trials))}</p>" + _table(head, [[_e(c) for c in row] for row in rows])


def _progress(runs: pd.DataFrame, epochs: pd.DataFrame) -> str:
    if runs.empty:
        return "<p class='skipped'>no trial recorded yet</p>"
    last_secs = (
        epochs.sort_values("epoch").groupby("trial_id").tail(1).set_index("trial_id")["seconds"]
        if not epochs.empty and "seconds" in epochs
        else {}
    )
    rows = []
    now = time.time()
    runs = runs.assign(variant=variant_labels(runs))  # named as Table 1 and `study status` name it
    for r in runs.sort_values("trial_id").itertuples(index=False):
        done, total = int(getattr(r, "epochs_done", 0) or 0), int(getattr(r, "epochs", 0) or 0)
        pct = 100 * done / total if total else 0
        updated = getattr(r, "updated_at", None)
        age = f"{now - float(updated):.0f} s ago" if updated is not None and updated == updated else "–"
        rows.append(
            [
                _e(r.trial_id),
                _e(r.variant),
                (f"status-{_e(r.status)}", _e(r.status)),
                f"<span class=bar><div style='width:{pct:.0f}%'></div></span> {done}/{total}",
                _num(r.best_test_acc),
                _num(r.final_test_acc),
                _num(last_secs.get(r.trial_id), 1),
                _num(getattr(r, "device_seconds", None), 0),
                _e(age),
            ]
        )
    return _table(
        [
            "Trial",
            "Model",
            "Status",
            "Epochs",
            ("num", "Best acc."),
            ("num", "Last acc."),
            ("num", "Last epoch (s)"),
            ("num", "Device-s"),
            "Updated",
        ],
        rows,
    )


def _failures(runs: pd.DataFrame) -> str:
    runs = runs.assign(variant=variant_labels(runs))
    failed = runs[runs["status"].isin(FAILED)] if not runs.empty else runs
    if failed.empty:
        return "<p class='skipped'>no failed trial</p>"
    rows = []
    for _, r in failed.sort_values("trial_id").iterrows():
        cause = r.get("error")
        if pd.isna(cause) or not str(cause):
            cause = _CAUSE.get(r["status"], "(no cause recorded in the tables)")
        rows.append(
            [
                _e(r["trial_id"]),
                _e(r["variant"]),
                (f"status-{_e(r['status'])}", _e(r["status"])),
                int(r.get("epochs_done", 0) or 0),
                _e(cause),
            ]
        )
    return _table(["Trial", "Model", "Status", ("num", "Epochs done"), "Cause"], rows)


def render(study: Study, *, version: str = "", poll_ms: int = 0) -> str:
    """The whole page as one string (``poll_ms`` > 0: the page polls ``version``)."""
    runs, epochs = study.runs, study.epochs
    name = study.name
    counts = runs["status"].value_counts().to_dict() if not runs.empty else {}
    status = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no trial yet"
    pngs, skipped = figures(study)
    figs = "".join(
        f'<figure><img alt="{_e(stem)}" src="data:image/png;base64,{b64}">'
        f"<figcaption>{_e(stem)}</figcaption></figure>"
        for stem, b64 in pngs
    )
    if not pngs:
        figs = "<p class='skipped'>no figure yet</p>"
    skips = "".join(f"<li>{_e(s)}</li>" for s in skipped)
    spec = study_file(study)
    generated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    refreshes = " · refreshes while the study runs" if poll_ms else ""
    spec_html = (
        f"<pre>{_e(spec)}</pre>" if spec else "<p class='skipped'>no study.yaml next to the tables</p>"
    )
    return f"""<!DOCTYPE html>
<html lang="en" data-version="{_e(version)}"><head><meta charset="utf-8">
<title>{_e(name)}: study report</title><style>{CSS}</style></head><body>
<h1>Study {_e(name)}</h1>
<p class="meta">Tables: {_e(study.root)} · generated {generated}{refreshes}</p>
<p class="summary"><span id="trials">{_count(len(runs), "trial")}: {_e(status)}</span>
<span id="epochs">{_count(len(epochs), "epoch")} recorded</span></p>
<h2>Trials</h2>{_progress(runs, epochs)}
<h2>Failures</h2>{_failures(runs)}
<h2>Table 1</h2>{_table1(study)}
<h2>Figures</h2>{figs}{f'<ul class="skipped">{skips}</ul>' if skips else ""}
<h2>Study file</h2>{spec_html}
{POLL % poll_ms if poll_ms else ""}</body></html>
"""


__all__ = ["render", "study_file"]
