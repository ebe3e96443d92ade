"""Grid axes covered exhaustively, sampled axes by Optuna TPE: one Optuna study per grid cell,
asked for each pending trial and told its result (docs/design.md §10; Ray Tune's
``OptunaSearch`` rejects ``tune.grid_search``).  The journal's layout and its ``s3://`` copy:
docs/results.md "The Optuna studies"; what a resume continues: docs/reliability.md "The
scheduler and the sampler across a resume"."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import optuna
import pyarrow.fs as pafs
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from study.scheduling.trials import ended_rows, trial_key

JOURNAL_FILE = "optuna.journal"


def optuna_distribution(spec: dict[str, Any]):
    """The Optuna distribution of a study file's ``sample`` entry (``{kind: args}``)."""
    ((kind, args),) = spec.items()
    if kind in ("uniform", "loguniform"):
        return FloatDistribution(float(args[0]), float(args[1]), log=kind == "loguniform")
    if kind == "int":
        return IntDistribution(int(args[0]), int(args[1]))
    return CategoricalDistribution(list(args))


def _local_journal(journal: str) -> str:
    """Where the driver writes the journal: the path itself, or a local copy of a URI."""
    if "://" not in journal:
        return journal
    from study.data.cache import default_cache_dir

    digest = hashlib.sha256(journal.encode()).hexdigest()[:16]
    return str(default_cache_dir() / "optuna" / digest / JOURNAL_FILE)


class GridSampler:
    """Hands out the trials ``todo`` (``(cell, sample)`` pairs, in order) as ``{"cell", "sample", "key",
    "sampled", "train": TrainConfig as a dict, "hparams": flat scalar fields}``, resolved here from the
    validated ``spec``; Optuna is told ``best_<metric>`` of each trial.  ``journal``: the Optuna journal
    (a path or URI; None: in memory only); ``tables``: the study's tables, read to tell Optuna the
    trials an earlier driver finished without telling it.  The Optuna storage opens at the first ask."""

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
        self.spec, self.metric, self.mode = spec, metric, mode
        self.todo = [tuple(t) for t in todo]  # the trials not asked yet
        self.tables = tables
        self.journal = journal
        self._local = None if journal is None else _local_journal(journal)
        self.seed = min(c.seed for c in spec.cells)
        self.assigned: dict[str, tuple[int, int | None]] = {}  # scheduler's trial id -> (cell, Optuna number)
        self._studies: dict[int, optuna.Study] = {}
        self._storage = None
        self._synced: tuple[int, int] | None = None

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

    def study(self, cell: int) -> optuna.Study:
        """The Optuna study of grid cell ``cell`` (created, or continued from the journal)."""
        if cell not in self._studies:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.create_study(
                study_name=f"{self.spec.study.name}/cell-{cell:03d}",
                storage=self.storage(),
                load_if_exists=True,
                direction="maximize" if self.mode != "min" else "minimize",
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
        rows = {r["trial_id"]: r for r in ended_rows(self.tables).to_dict("records")}
        for t in asked:
            if t.user_attrs.get("key") in rows:
                self._tell(study, t.number, rows[t.user_attrs["key"]])

    def _tell(self, study: optuna.Study, number: int, result: dict | None) -> None:
        """Tell Optuna ``best_<metric>`` (else ``<metric>``) of ``result``; none or NaN: a failed trial."""
        if study.trials[number].state != TrialState.RUNNING:
            return  # told already (by an earlier driver)
        value = None if result is None else result.get("best_" + self.metric, result.get(self.metric))
        if value is None or value != value:
            study.tell(number, state=TrialState.FAIL)
        else:
            study.tell(number, float(value))
        self._sync()

    def ask(self, trial_id: str) -> dict | None:
        """The next pending trial's configuration, for the scheduler's trial ``trial_id``; None when
        every trial was handed out."""
        if not self.todo:
            return None
        cell, sample = self.todo.pop(0)
        key = trial_key(cell, sample)
        sampled, number = {}, None
        if self.spec.sample:
            study = self.study(cell)
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

    def tell(self, trial_id: str, result: dict | None = None, *, error: bool = False) -> None:
        """The scheduler's trial ``trial_id`` ended with its last ``result`` (``error``: it failed):
        Optuna is told its value, or that it failed (no result, no metric, NaN)."""
        if trial_id not in self.assigned:
            return
        cell, number = self.assigned.pop(trial_id)
        if number is None:
            return
        self._tell(
            self.study(cell), number, result if not error and result and self.metric in result else None
        )
