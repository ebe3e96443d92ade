"""Grid axes covered exhaustively, sampled axes by Optuna TPE: one Optuna study per grid cell
behind one Ray Tune ``Searcher`` (``OptunaSearch`` rejects ``tune.grid_search``, docs/design.md
§10).  The journal's layout and its ``s3://`` copy: docs/results.md "The Optuna studies"; what
a resume continues: docs/reliability.md "The scheduler and the sampler across a resume"."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import optuna
import pyarrow.fs as pafs
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState
from ray.tune.search import Searcher

JOURNAL_FILE = "optuna.journal"


def optuna_distribution(spec: dict[str, Any]):
    ((kind, args),) = spec.items()
    if kind in ("uniform", "loguniform"):
        return FloatDistribution(float(args[0]), float(args[1]), log=kind == "loguniform")
    if kind == "int":
        return IntDistribution(int(args[0]), int(args[1]))
    return CategoricalDistribution(list(args))


def trial_key(cell: int, sample: int) -> str:
    """The table identity of a trial: its grid cell and sample index (stable across
    retries, restores and lost drivers, unlike Ray's trial ids)."""
    return f"c{cell:03d}-s{sample:03d}"


def _local_journal(journal: str) -> str:
    """Where the driver writes the journal: the path itself, or a local copy of a URI."""
    if "://" not in journal:
        return journal
    from study.data.cache import default_cache_dir

    digest = hashlib.sha256(journal.encode()).hexdigest()[:16]
    return str(default_cache_dir() / "optuna" / digest / JOURNAL_FILE)


class GridOptunaSearcher(Searcher):
    """Suggests the trials ``todo`` (``(cell, sample)`` pairs) as ``{"cell", "sample", "key",
    "sampled", "train": TrainConfig as a dict, "hparams": flat scalar fields}``, resolved
    here from the validated ``spec``; Optuna is told ``best_<metric>`` of each trial."""

    def __init__(
        self,
        *,
        spec,
        todo: list[tuple[int, int]],
        metric: str = "test_acc",
        mode: str = "max",
        tables: str | None = None,
        journal: str | None = None,
    ):
        super().__init__(metric=metric, mode=mode)
        self.spec = spec
        self.todo = [tuple(t) for t in todo]  # the trials not suggested yet
        self.tables = tables
        self.journal = journal  # None: in memory only (tests of the searcher alone)
        self._local = None if journal is None else _local_journal(journal)
        self.seed = min(c.seed for c in spec.cells)
        self.assigned: dict[str, tuple[int, int | None]] = {}  # Ray trial id -> (cell, Optuna number)
        self._studies: dict[int, optuna.Study] = {}
        self._storage = None
        self._synced: tuple[int, int] | None = None

    def __getstate__(self) -> dict:
        # Tune pickles the searcher with its run (never read back); the Optuna storage (file locks) stays out
        return {**self.__dict__, "_studies": {}, "_storage": None, "_synced": None}

    def storage(self):
        if self._storage is None and self.journal is None:
            self._storage = optuna.storages.InMemoryStorage()
        elif self._storage is None:
            from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

            Path(self._local).parent.mkdir(parents=True, exist_ok=True)
            if self._local != self.journal:  # a URI: continue from the journal stored there, if any
                fs, path = pafs.FileSystem.from_uri(self.journal)
                if fs.get_file_info(path).type == pafs.FileType.File:
                    pafs.copy_files(
                        path, self._local, source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem()
                    )
            backend = JournalFileBackend(self._local, lock_obj=JournalFileOpenLock(self._local))
            self._storage = optuna.storages.JournalStorage(backend)
        return self._storage

    def _sync(self) -> None:
        """Upload the local journal to a URI journal when it changed."""
        if self._local == self.journal:
            return
        stat = Path(self._local).stat()
        if (stat.st_size, stat.st_mtime_ns) != self._synced:
            pafs.copy_files(self._local, self.journal, source_filesystem=pafs.LocalFileSystem())
            self._synced = (stat.st_size, stat.st_mtime_ns)

    def _study(self, cell: int) -> optuna.Study:
        if cell not in self._studies:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.create_study(
                study_name=f"{self.spec.study.name}/cell-{cell:03d}",
                storage=self.storage(),
                load_if_exists=True,
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
        asked = [
            t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if t.number not in live
        ]
        if not asked or self.tables is None:
            return
        from study.tuning.runner import ended_rows

        rows = {r["trial_id"]: r for r in ended_rows(self.tables).to_dict("records")}
        for t in asked:
            if t.user_attrs.get("key") in rows:
                self._tell(study, t.number, rows[t.user_attrs["key"]])

    def _tell(self, study: optuna.Study, number: int, result: dict | None) -> None:
        """Tell Optuna ``best_<metric>`` (else ``<metric>``) of ``result``; none or NaN: a failed trial."""
        if study.trials[number].state != TrialState.RUNNING:
            return  # told already (by an earlier driver)
        value = None if result is None else result.get("best_" + self._metric, result.get(self._metric))
        if value is None or value != value:
            study.tell(number, state=TrialState.FAIL)
        else:
            study.tell(number, float(value))
        self._sync()

    def suggest(self, trial_id: str) -> dict | None:
        if not self.todo:
            return Searcher.FINISHED
        cell, sample = self.todo.pop(0)
        key = trial_key(cell, sample)
        sampled, number = {}, None
        if self.spec.sample:
            study = self._study(cell)
            # the latest Optuna trial of this key (None if never asked)
            earlier = next(
                (t for t in reversed(study.get_trials(deepcopy=False)) if t.user_attrs.get("key") == key),
                None,
            )
            if earlier is not None and earlier.state == TrialState.RUNNING:
                # asked by an earlier driver that died: the same Optuna trial
                sampled, number = dict(earlier.params), earlier.number
            else:
                if earlier is not None:  # failed earlier: try the same values again
                    study.enqueue_trial(dict(earlier.params), skip_if_exists=False)
                trial = study.ask({k: optuna_distribution(v) for k, v in self.spec.sample.items()})
                trial.set_user_attr("key", key)
                sampled, number = dict(trial.params), trial.number
                self._sync()
        self.assigned[trial_id] = (cell, number)
        cfg = self.spec.train_config(self.spec.cells[cell], sampled)
        # fields that do not apply (None, e.g. ``isotropic`` of a learned encoding) are left
        # out of hparams: TensorBoard's HParams cannot hold a null
        return {
            "cell": cell,
            "sample": sample,
            "key": key,
            "sampled": sampled,
            "train": cfg.to_dict(),
            "hparams": {k: v for k, v in cfg.flat().items() if isinstance(v, (int, float, str, bool))},
        }

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self.assigned:
            return
        cell, number = self.assigned.pop(trial_id)
        if number is None:
            return
        self._tell(
            self._study(cell), number, result if not error and result and self._metric in result else None
        )
