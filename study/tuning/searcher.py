"""Grid axes covered exhaustively, sampled axes by Optuna TPE: one Optuna study per
grid cell behind one Ray Tune ``Searcher`` (``OptunaSearch`` cannot take
``tune.grid_search``, DESIGN §8).

Trial k goes to cell k mod n_cells, so every cell receives exactly ``num_samples``
trials and all cells progress together.  The searcher's state is plain data (cell
assignments and finished (params, value) pairs); the Optuna studies are rebuilt from
it on restore, so a resumed study keeps its TPE history.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from ray.tune.search import Searcher


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
    if not spec:
        return {}
    from study.spec import validate

    study = _SPECS.get(id(spec))
    if study is None or study[0] is not spec:
        study = (spec, validate(spec["raw"], file=spec["file"], default_name=spec["name"]))
        _SPECS[id(spec)] = study
    cfg = study[1].train_config(study[1].cells[cell], sampled)
    return {k: v for k, v in cfg.flat().items() if isinstance(v, (int, float, str, bool)) or v is None}


_SPECS: dict[int, tuple[dict, Any]] = {}


class GridOptunaSearcher(Searcher):
    """Suggests ``{"cell": index, "sample": i, "key": trial key, "sampled": {...},
    "hparams": {...}}`` for ``n_cells × num_samples`` trials (``hparams``: see
    :func:`hparams`).  Optuna is told ``best_<metric>`` of each finished trial (the
    metric is ``val_acc`` when the study holds out a validation split)."""

    def __init__(self, *, n_cells: int, sample: dict[str, dict], num_samples: int, seed: int = 0,
                 metric: str = "test_acc", mode: str = "max", tables: str | None = None,
                 spec: dict[str, Any] | None = None):
        super().__init__(metric=metric, mode=mode)
        self.tables = tables
        self.spec = spec
        self.n_cells = n_cells
        self.sample = sample
        self.num_samples = num_samples
        self.seed = seed
        self.suggested = 0
        self.assigned: dict[str, tuple[int, int | None]] = {}  # trial id -> (cell, optuna number)
        self.finished: dict[int, list[tuple[dict, float | None]]] = {}
        self._studies: dict[int, optuna.Study] = {}

    @property
    def total(self) -> int:
        return self.n_cells * self.num_samples

    def _study(self, cell: int) -> optuna.Study:
        if cell not in self._studies:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.create_study(
                direction="maximize" if self._mode != "min" else "minimize",
                sampler=optuna.samplers.TPESampler(seed=self.seed + cell),
            )
            dists = {k: optuna_distribution(v) for k, v in self.sample.items()}
            for params, value in self.finished.get(cell, []):
                state = optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
                study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value,
                                                          state=state))
            self._studies[cell] = study
        return self._studies[cell]

    def suggest(self, trial_id: str) -> dict | None:
        if self.suggested >= self.total:
            return Searcher.FINISHED
        cell, sample = self.suggested % self.n_cells, self.suggested // self.n_cells
        self.suggested += 1
        key = trial_key(cell, sample)
        done = self._finished_in_tables(key)
        if done is not None:
            # the key already finished in an earlier driver's life (its Ray trial was
            # lost with that driver): replay it, its trainable will not train again
            self.assigned[trial_id] = (cell, None)
            return {"cell": cell, "sample": sample, "key": key, "sampled": done,
                    "hparams": hparams(self.spec, cell, done)}
        sampled, number = {}, None
        if self.sample:
            trial = self._study(cell).ask({k: optuna_distribution(v) for k, v in self.sample.items()})
            sampled, number = dict(trial.params), trial.number
        self.assigned[trial_id] = (cell, number)
        return {"cell": cell, "sample": sample, "key": key, "sampled": sampled,
                "hparams": hparams(self.spec, cell, sampled)}

    def _finished_in_tables(self, key: str) -> dict | None:
        """Sampled values of ``key`` if its runs row says it finished, else None."""
        # the driver names the study's tables where the study is now (a moved study's
        # restored searcher still holds the old path)
        tables = os.environ.get("STUDY_ACTIVE_TABLES") or self.tables
        if not tables:
            return None
        from study.tables import read_table

        runs = read_table(tables, "runs")
        row = runs[(runs.trial_id == key) & runs.status.isin(["finished", "diverged", "stopped"])]
        if row.empty:
            return None
        row = row.iloc[0]
        return {k: _plain(row[f"sampled_{k}"]) for k in self.sample if f"sampled_{k}" in row}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self.assigned:
            return
        cell, number = self.assigned.pop(trial_id)
        if number is None:
            return
        value = None
        if not error and result and self._metric in result:
            value = float(result.get("best_" + self._metric, result[self._metric]))
        study = self._study(cell)
        params = study.trials[number].params
        study.tell(number, value if value is not None else None,
                   state=None if value is not None else optuna.trial.TrialState.FAIL)
        self.finished.setdefault(cell, []).append((params, value))

    # --- persistence (Tuner.restore) -------------------------------------------------
    def get_state(self) -> dict:
        return {k: getattr(self, k) for k in ("n_cells", "sample", "num_samples", "seed", "suggested", "tables", "spec",
                                              "assigned", "finished", "_metric", "_mode")}

    def set_state(self, state: dict) -> None:
        self.__dict__.update({"spec": None, **state})
        self._studies = {}
        # the rebuilt Optuna studies hold only finished trials: a trial still running
        # at the save cannot be told by number, so its result is not fed back to TPE
        for trial_id, (cell, number) in list(self.assigned.items()):
            if number is not None:
                self.assigned[trial_id] = (cell, None)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.get_state(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.set_state(pickle.load(f))
