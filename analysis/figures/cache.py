"""Figures are redrawn only when their inputs changed (docs/figures.md, "Only what changed is redrawn")."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

MANIFEST = ".figures-manifest.json"
VERSION = 1


@lru_cache(maxsize=1)
def code_version() -> str:
    """Hash of the ``analysis`` package's sources and the matplotlib version."""
    import matplotlib

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha1(matplotlib.__version__.encode())
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def table_files(root: str) -> dict[str, list[tuple[str, int, int]]]:
    """trial_id -> [(path under the tables root, size, mtime in ns)] of its table files
    (writes in progress, ``.tmp-*``, excluded); one listing of the whole root."""
    import pyarrow.fs as pafs

    from study.results.filesystem import file_system
    from study.results.tables import SKIPPED_PREFIXES

    fs, base = file_system(root if "://" in root else str(Path(root).resolve()))
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except OSError:
        return {}
    prefix = base.rstrip("/") + "/"
    out: dict[str, list[tuple[str, int, int]]] = {}
    for i in infos:
        if i.type != pafs.FileType.File or not i.path.startswith(prefix):
            continue
        rel = i.path[len(prefix) :]
        parts = rel.split("/")
        if any(p.startswith(SKIPPED_PREFIXES) for p in parts):
            continue
        if len(parts) == 2 and parts[0] == "runs":
            trial = parts[1].rsplit(".", 1)[0]
        elif len(parts) == 3:
            trial = parts[1]
        else:
            trial = ""  # a foreign file: every study-wide figure depends on it (it is warned about)
        out.setdefault(trial, []).append((rel, int(i.size or 0), int(i.mtime_ns or 0)))
    return out


def fingerprint(
    *, kind: str, key: str, options: dict, files: dict, trials, tables: tuple[str, ...], every_trial: bool
) -> str:
    """The fingerprint of one figure job; ``every_trial``: a study-wide figure, which also
    depends on table files no runs row names yet."""
    wanted = ("runs",) + tuple(tables)
    ids = {str(t) for t in trials["trial_id"]} | (set(files) if every_trial else set())
    inputs = [
        [tid, sorted(f for f in files.get(tid, []) if f[0].split("/", 1)[0] in wanted)] for tid in sorted(ids)
    ]
    names = ("trial_id", "label", "variant_slug", "slug")
    rows = [[*(str(r.get(k)) for k in names), bool(r.get("representative"))] for _, r in trials.iterrows()]
    payload = json.dumps(
        [VERSION, code_version(), kind, key, options, rows, inputs], sort_keys=True, default=str
    )
    return hashlib.sha1(payload.encode()).hexdigest()


@dataclass
class Entry:
    fingerprint: str
    files: list[str]
    skipped: list[str]
    pdf: bool
    per_seed: bool


@dataclass
class Manifest:
    """The jobs drawn into one output folder (job key -> :class:`Entry`)."""

    out: Path
    entries: dict[str, Entry] = field(default_factory=dict)

    @classmethod
    def load(cls, out: Path) -> Manifest:
        m = cls(out=out)
        try:
            doc = json.loads((out / MANIFEST).read_text())
            if doc.get("version") == VERSION:
                m.entries = {k: Entry(**v) for k, v in doc.get("jobs", {}).items()}
        except (OSError, ValueError, TypeError):
            pass  # none yet, or unreadable: everything is drawn
        return m

    def fresh(self, key: str, fp: str, *, pdf: bool) -> bool:
        """Whether the files of ``key`` can be reused as they are."""
        e = self.entries.get(key)
        return (
            e is not None
            and e.fingerprint == fp
            and (e.pdf or not pdf)
            and all((self.out / f).is_file() for f in e.files)
        )

    def record(self, key: str, entry: Entry) -> None:
        old = self.entries.get(key)
        if old is not None:
            self._remove(set(old.files) - set(entry.files))
        self.entries[key] = entry

    def forget_others(self, keep: set[str], *, per_seed: bool) -> None:
        """Remove the files of this mode's jobs not drawn this time (and their entries)."""
        for key in [k for k, e in self.entries.items() if k not in keep and e.per_seed == per_seed]:
            e = self.entries.pop(key)
            still = {f for other in self.entries.values() for f in other.files}
            self._remove(set(e.files) - still)

    def _remove(self, names: set[str]) -> None:
        for name in names:
            (self.out / name).unlink(missing_ok=True)

    def save(self) -> None:
        from study.results.atomicio import write_atomic

        doc = {"version": VERSION, "jobs": {k: vars(e) for k, e in sorted(self.entries.items())}}
        # mode 0644: mkstemp's 0600 would hide it from the folder's other readers
        write_atomic(self.out / MANIFEST, json.dumps(doc, indent=1).encode(), suffix=".json", mode=0o644)
