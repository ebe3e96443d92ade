"""Grid axes covered exhaustively, sampled axes by Optuna TPE: one Optuna study per
grid cell behind one Ray Tune ``Searcher`` (``OptunaSearch`` cannot take
``tune.grid_search``, DESIGN §8).

Every cell receives exactly ``num_samples`` trials.  They are handed to Tune
longest-predicted first (:func:`study.plan.launch_order`: MACs × epochs × images,
known before launch), so the most expensive trial never starts last; equal costs
keep the grid's round-robin order (trial k: cell k mod n_cells).  The order is part
of the searcher's state, so a resumed study keeps it.

The Optuna studies live in Optuna's own storage, a ``JournalStorage`` file
``<study>/optuna.journal`` next to the tables (study names ``<name>/cell-000``, …;
each Optuna trial carries the user attribute ``key`` = the table's ``trial_id``), so
``optuna-dashboard``, ``trials_dataframe()`` and ``optuna.visualization`` open it
directly and a resumed study continues the same Optuna studies.  For ``s3://``
storage the journal is written to a local file (``$STUDY_CACHE_DIR/optuna/…``) and
uploaded to ``<study>/optuna.journal`` after every change (the driver is its only
writer); a resume on another machine downloads it first.

The searcher's own state (what Tune saves with its experiment) is JSON: cell
assignments of live trials and the suggestion counter, never a pickle.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState
from ray.tune.search import Searcher

JOURNAL_FILE = "optuna.journal"
STATE_VERSION = 1


def optuna_distribution(spec: dict[str, Any]):
    (kind, args), = spec.items()
    if kind == "uniform":
        return FloatDistribution(float(args[0]), float(args[1]))
    if kind == "loguniform":
        return FloatDistribution(float(args[0]), float(args[1]), log=True)
    if kind == "int":
        return IntDistribution(int(args[0]), int(args[1]))
    return CategoricalDistribution(list(args))


def trial_key(cell: int, sample: int) -> str:
    """The table identity of a trial: its grid cell and sample index (stable across
    retries, restores and lost drivers, unlike Ray's trial ids)."""
    return f"c{cell:03d}-s{sample:03d}"


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def hparams(spec: dict[str, Any] | None, cell: int, sampled: dict[str, Any]) -> dict[str, Any]:
    """The trial's whole resolved configuration as flat scalars (every model and
    training field, the seed, data and subset, grid and sampled values), for Ray's
    trial config: Ray's results DataFrame (``config/hparams/<field>``), ``params.json``
    and TensorBoard's HParams show them.  ``spec``: ``{"raw", "file", "name"}`` of the
    study file (plain data, so the searcher's state stays plain)."""
    study = _validated(spec)
    if study is None:  # e.g. the data vanished since `study run` checked it: the trial
        return {}      # itself fails with that cause (runs.error); no hparams
    cfg = study.train_config(study.cells[cell], sampled)
    # fields that do not apply (None, e.g. ``isotropic`` of a learned encoding) are left
    # out: TensorBoard's HParams cannot hold a null
    return {k: v for k, v in cfg.flat().items() if isinstance(v, (int, float, str, bool))}


_SPECS: dict[int, tuple[dict, Any]] = {}


def _validated(spec: dict[str, Any] | None):
    """The ``StudySpec`` of ``{"raw", "file", "name"}`` (cached), None if it no
    longer validates or there is none."""
    if not spec:
        return None
    from study.spec import validate

    study = _SPECS.get(id(spec))
    if study is None or study[0] is not spec:
        try:
            study = (spec, validate(spec["raw"], file=spec["file"], default_name=spec["name"]))
        except Exception:  # noqa: BLE001
            return None
        _SPECS[id(spec)] = study
    return study[1]


def cell_study_name(name: str, cell: int) -> str:
    """The Optuna study of grid cell ``cell`` in study ``name``."""
    return f"{name}/cell-{cell:03d}"


def _local_journal(journal: str) -> str:
    """Where the driver writes the journal: the path itself, or a local copy of a URI."""
    if "://" not in journal:
        return journal
    cache = Path(os.environ.get("STUDY_CACHE_DIR") or Path.home() / ".cache" / "attention-cnn-study")
    digest = hashlib.sha256(journal.encode()).hexdigest()[:16]
    return str(cache / "optuna" / digest / JOURNAL_FILE)


class GridOptunaSearcher(Searcher):
    """Suggests ``{"cell": index, "sample": i, "key": trial key, "sampled": {...},
    "hparams": {...}}`` for ``n_cells × num_samples`` trials (``hparams``: see
    :func:`hparams`).  Optuna is told ``best_<metric>`` of each finished trial (the
    metric is ``val_acc`` when the study holds out a validation split)."""

    def __init__(self, *, n_cells: int, sample: dict[str, dict], num_samples: int, seed: int = 0,
                 metric: str = "test_acc", mode: str = "max", tables: str | None = None,
                 journal: str | None = None, name: str = "study",
                 spec: dict[str, Any] | None = None):
        super().__init__(metric=metric, mode=mode)
        self.tables = tables
        self.spec = spec
        self.journal = journal  # None: in memory only (tests of the searcher alone)
        self.name = name
        self.n_cells = n_cells
        self.sample = sample
        self.num_samples = num_samples
        self.seed = seed
        self.suggested = 0
        self.order: list[list[int]] | None = None  # [cell, sample] per suggestion; None: not yet computed
        self.assigned: dict[str, tuple[int, int | None]] = {}  # Ray trial id -> (cell, Optuna number)
        self._studies: dict[int, optuna.Study] = {}
        self._storage = None
        self._synced: tuple[int, int] | None = None

    def __getstate__(self) -> dict:
        # Tune pickles the searcher with the Tuner; the Optuna storage (file locks) stays out
        return {k: v for k, v in self.__dict__.items() if k not in ("_studies", "_storage", "_synced")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._studies, self._storage, self._synced = {}, None, None

    @property
    def total(self) -> int:
        return self.n_cells * self.num_samples

    # --- Optuna storage ------------------------------------------------------------
    def storage(self):
        if self._storage is None:
            if self.journal is None:
                self._storage = optuna.storages.InMemoryStorage()
            else:
                from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

                local = _local_journal(self.journal)
                Path(local).parent.mkdir(parents=True, exist_ok=True)
                if local != self.journal:
                    self._download(local)
                self._storage = optuna.storages.JournalStorage(
                    JournalFileBackend(local, lock_obj=JournalFileOpenLock(local)))
        return self._storage

    def _download(self, local: str) -> None:
        import pyarrow.fs as pafs

        fs, path = pafs.FileSystem.from_uri(self.journal)
        if fs.get_file_info(path).type != pafs.FileType.File:
            return
        with fs.open_input_stream(path) as src:
            data = src.read()
        Path(local).write_bytes(data)

    def _sync(self) -> None:
        """Upload the local journal to a URI journal when it changed."""
        if self.journal is None or "://" not in self.journal:
            return
        import pyarrow.fs as pafs

        local = Path(_local_journal(self.journal))
        stat = local.stat()
        mark = (stat.st_size, stat.st_mtime_ns)
        if mark == self._synced:
            return
        fs, path = pafs.FileSystem.from_uri(self.journal)
        with fs.open_output_stream(path) as out:
            out.write(local.read_bytes())
        self._synced = mark

    def _study(self, cell: int) -> optuna.Study:
        if cell not in self._studies:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.create_study(
                study_name=cell_study_name(self.name, cell), storage=self.storage(), load_if_exists=True,
                direction="maximize" if self._mode != "min" else "minimize",
                sampler=optuna.samplers.TPESampler(seed=self.seed + cell),
            )
            study.set_user_attr("cell", cell)
            self._studies[cell] = study
            self._reconcile(cell)
        return self._studies[cell]

    def _reconcile(self, cell: int) -> None:
        """Tell Optuna the result of trials an earlier driver finished but died before
        telling (their rows say finished/diverged, Optuna still says RUNNING)."""
        live = {number for c, number in self.assigned.values() if c == cell and number is not None}
        study = self._studies[cell]
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.number in live:
                continue
            row = self._finished_row(t.user_attrs.get("key"))
            if row is not None:
                value = row.get(f"best_{self._metric}", row.get(self._metric))
                self._tell(study, t.number, None if value is None or value != value else float(value))

    def _trial_of(self, study: optuna.Study, key: str):
        """The latest Optuna trial of table trial ``key`` (None if never asked)."""
        found = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("key") == key]
        return found[-1] if found else None

    def _tell(self, study: optuna.Study, number: int, value: float | None) -> None:
        if study.trials[number].state != TrialState.RUNNING:
            return  # told already (by an earlier driver)
        if value is None:
            study.tell(number, state=TrialState.FAIL)
        else:
            study.tell(number, value)
        self._sync()

    # --- launch order ----------------------------------------------------------------
    def _grid_order(self) -> list[list[int]]:
        return [[k % self.n_cells, k // self.n_cells] for k in range(self.total)]

    def launch_order(self) -> list[list[int]]:
        """[cell, sample] of each suggestion: longest-predicted first (grid order
        without a study file, or where its cost cannot be computed)."""
        if self.order is None:
            self.order = self._grid_order()
            study = _validated(self.spec)
            if study is not None and len(study.cells) == self.n_cells and study.num_samples == self.num_samples:
                from study.plan import launch_order, plan_trials

                try:
                    self.order = [[t.cell, t.sample] for t in launch_order(plan_trials(study))]
                except Exception:  # noqa: BLE001 - a cost model failure must not stop the study: grid order
                    pass
        return self.order

    # --- Searcher API ----------------------------------------------------------------
    def suggest(self, trial_id: str) -> dict | None:
        if self.suggested >= self.total:
            return Searcher.FINISHED
        cell, sample = self.launch_order()[self.suggested]
        self.suggested += 1
        key = trial_key(cell, sample)
        study = self._study(cell) if self.sample else None
        earlier = self._trial_of(study, key) if study is not None else None
        running = earlier.number if earlier is not None and earlier.state == TrialState.RUNNING else None
        row = self._finished_row(key)
        if row is not None:
            # the key already finished in an earlier driver's life (its Ray trial was
            # lost with that driver): replay it, its trainable will not train again
            self.assigned[trial_id] = (cell, running)
            sampled = {k: _plain(row[f"sampled_{k}"]) for k in self.sample if f"sampled_{k}" in row}
            return {"cell": cell, "sample": sample, "key": key, "sampled": sampled,
                    "hparams": hparams(self.spec, cell, sampled)}
        sampled, number = {}, None
        if study is not None:
            if running is not None:  # asked by an earlier driver that died: the same Optuna trial
                sampled, number = dict(earlier.params), running
            else:
                if earlier is not None:  # failed earlier: try the same values again
                    study.enqueue_trial(dict(earlier.params), skip_if_exists=False)
                trial = study.ask({k: optuna_distribution(v) for k, v in self.sample.items()})
                trial.set_user_attr("key", key)
                sampled, number = dict(trial.params), trial.number
                self._sync()
        self.assigned[trial_id] = (cell, number)
        return {"cell": cell, "sample": sample, "key": key, "sampled": sampled,
                "hparams": hparams(self.spec, cell, sampled)}

    def _finished_row(self, key: str | None) -> dict | None:
        # the driver names the study's tables where the study is now (a moved study's
        # restored searcher still holds the old path)
        tables = os.environ.get("STUDY_ACTIVE_TABLES") or self.tables
        if tables is None or key is None:
            return None
        from study.tables import read_table

        runs = read_table(tables, "runs")
        row = runs[(runs.trial_id == key) & runs.status.isin(["finished", "diverged", "stopped"])]
        return None if row.empty else row.iloc[0].to_dict()

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self.assigned:
            return
        cell, number = self.assigned.pop(trial_id)
        if number is None:
            return
        value = None
        if not error and result and self._metric in result:
            value = float(result.get("best_" + self._metric, result[self._metric]))
            value = value if value == value else None  # NaN: a failed trial for Optuna
        self._tell(self._study(cell), number, value)

    # --- persistence (Tuner.restore): JSON, no pickle ----------------------------------
    def get_state(self) -> dict:
        return {"version": STATE_VERSION, "n_cells": self.n_cells, "sample": self.sample,
                "num_samples": self.num_samples, "seed": self.seed, "suggested": self.suggested,
                "order": self.order,
                "tables": self.tables, "spec": self.spec, "journal": self.journal, "name": self.name,
                "assigned": {k: list(v) for k, v in self.assigned.items()},
                "metric": self._metric, "mode": self._mode}

    def set_state(self, state: dict) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"searcher state version {state.get('version')!r}, expected {STATE_VERSION}")
        for k in ("n_cells", "sample", "num_samples", "seed", "suggested", "tables", "journal", "name"):
            setattr(self, k, state[k])
        self.spec = state.get("spec")
        # the order the suggestions so far followed; a state from before launch orders
        # was in grid order, and ``suggested`` counts in it
        order = state.get("order")
        self.order = [[int(c), int(n)] for c, n in order] if order is not None else (
            self._grid_order() if self.suggested else None)
        # a moved or copied study: the driver names where its tables and journal are now
        self.tables = os.environ.get("STUDY_ACTIVE_TABLES") or self.tables
        if self.journal is not None:
            self.journal = os.environ.get("STUDY_ACTIVE_JOURNAL") or self.journal
        self._metric, self._mode = state["metric"], state["mode"]
        # in-flight trials keep their Optuna numbers: the journal holds those trials
        self.assigned = {k: (int(c), None if n is None else int(n)) for k, (c, n) in state["assigned"].items()}
        self._studies, self._storage, self._synced = {}, None, None

    def save(self, checkpoint_path: str) -> None:
        tmp = f"{checkpoint_path}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.get_state(), f)
        os.replace(tmp, checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path) as f:
            self.set_state(json.load(f))
