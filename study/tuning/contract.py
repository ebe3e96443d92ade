"""The run contract of ``study run`` / ``study resume`` on the driver side.

* A trial that fails for good (retries exhausted) gets its ``runs`` row with
  ``status = error``, ``error`` = the one-line cause and its ``attempts``, also
  when it died before writing anything (the row is built from its config); every
  failed attempt is one console line (Ray's tracebacks only with ``--verbose``).
* SIGINT / SIGTERM stop the study the way Tune's own interrupt does (its state is
  saved, running trials keep their checkpoints) and the trials are recorded
  ``interrupted``; the console points at ``study resume NAME``.
* A storage failure (a trial's :class:`~study.errors.StorageError`, or Tune failing
  to save its state) stops the study the same way, naming the path.  On a local
  disk the driver keeps :data:`RESERVE_BYTES` reserved (``.study-reserve``) and frees
  them then, so a full disk still takes Tune's last state and the marks of the
  trials (``interrupted``, ``error``).
* Ray's state files are signed after each save (:mod:`study.tuning.integrity`).

:class:`RunContract` is a Tune callback; pickled into Tune's state (``tuner.pkl``)
it is only a reference to the live contract of the driver that restores it.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import time
from typing import Any

from ray.tune import Callback

from study.errors import EXIT_OK, EXIT_STORAGE, EXIT_TRIAL_ERROR, cause_from_text
from study.tables import part_path, read_table, write_part

_ACTIVE: "RunContract | None" = None
RESERVE = ".study-reserve"
RESERVE_BYTES = 1 << 20

#: Ray messages replaced by the contract's own one-liners (shown with --verbose; else
#: written to the driver's log file, :attr:`RunContract.log_path`)
_RAY_NOISE = ("Tuner.restore", "Trials did not complete", "Failed to fetch metrics", "Stop signal received",
              "Trial task failed", "has been interrupted", "snapshotting failed", "checkpointing failed",
              # Tune's background upload of its state (a thread: it may log after the study's one line)
              "sync operation failed", "Last sync command failed", "Saving experiment state to storage",
              "skipping sync")
#: Tune's message when ``Tuner.restore`` cannot read its state (it then starts over)
_RESTORE_FAILED = "Failed to restore the run state"
#: messages that mean the storage failed (the study stops, naming the path)
_STORAGE_FAILED = ("snapshotting failed", "checkpointing failed", "Saving experiment state to storage")
_RAY_LOGGERS = ("ray.tune.tune", "ray.tune.execution.tune_controller", "ray.tune.analysis.experiment_analysis",
                "ray.tune.impl.tuner_internal", "ray.tune.execution.experiment_state", "ray.tune.tuner",
                "ray.tune.result_grid", "ray.train._internal.storage", "ray.train._internal.syncer")
LOG_FILE = "study-driver.log"


def active() -> "RunContract | None":
    return _ACTIVE


class _Quiet(logging.Filter):
    def __init__(self, contract: "RunContract"):
        super().__init__()
        self.contract = contract

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith(_RESTORE_FAILED):
            # Tune would go on with an empty state: every unfinished trial started over
            # from scratch, its checkpoints left behind.  Refuse instead (one line, exit 3).
            exc = record.exc_info[1] if record.exc_info else None
            from study.errors import IntegrityError

            self.contract.log(record)
            raise IntegrityError(f"{self.contract.root}: Tune could not restore its experiment state"
                                 + (f" ({type(exc).__name__}: {exc})" if exc else "")
                                 + "; refusing to start the study over")
        if any(n in text for n in _STORAGE_FAILED):
            exc = record.exc_info[1] if record.exc_info else None
            self.contract.storage_failed(str(exc) if exc else text.split(":", 1)[-1].strip())
        if self.contract.show_tracebacks:
            return True
        if any(n in text for n in _RAY_NOISE):
            self.contract.log(record)
            return False
        return True


#: A second SIGINT/SIGTERM this soon after the first is the same request delivered
#: twice (SLURM's ``scancel`` signals every process of the job: the driver, and the
#: batch script that passes its own signal on to the driver); a later one stops at once.
DUPLICATE_SIGNAL_S = 2.0


class RunContract(Callback):
    def __init__(self, *, root: str, meta: dict[str, Any], prog: str, verbose: bool = True,
                 show_tracebacks: bool = False, lock=None, spec=None):
        global _ACTIVE
        self.root, self.meta, self.prog, self.spec = root, meta, prog, spec
        self.verbose, self.show_tracebacks = verbose, show_tracebacks
        self.lock = lock
        self.tables = meta["tables"]
        self.signal: int | None = None
        self.storage_error: str | None = None
        self.completed: set[str] = set()
        self.errors: dict[str, str] = {}
        self._stop_sent = False
        self._signal_at = 0.0
        self._signer = None
        self._last_sign = 0.0
        self._filter = _Quiet(self)
        self._log: logging.Handler | None = None
        self.log_path: str | None = None
        _ACTIVE = self

    def __reduce__(self):  # in Tune's pickled state: a reference to the live driver's contract
        return (active, ())

    # ------------------------------------------------------------------ console
    def say(self, line: str) -> None:
        print(f"{self.prog}: {line}", file=sys.stderr, flush=True)

    def log(self, record: logging.LogRecord) -> None:
        """Keep a Ray message the console does not show (with its traceback) in the
        driver's log file: ``study-driver.log`` in the Ray session's log folder (on the
        machine of the driver; the system temporary folder if Ray has none)."""
        try:
            if self._log is None:
                self.log_path = os.path.join(_log_dir(), LOG_FILE)
                self._log = logging.FileHandler(self.log_path, delay=True)
                self._log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s -- %(message)s"))
            self._log.handle(record)
        except Exception:  # noqa: BLE001 - never let the log file break the study
            pass

    def install(self) -> None:
        """Quiet Ray's own failure output, take over SIGINT/SIGTERM."""
        for name in _RAY_LOGGERS:
            logging.getLogger(name).addFilter(self._filter)
        if not self.show_tracebacks:
            os.environ["TUNE_PRINT_ALL_TRIAL_ERRORS"] = "0"
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        if "://" not in self.root:
            try:
                with open(os.path.join(self.root, RESERVE), "wb") as f:
                    os.posix_fallocate(f.fileno(), 0, RESERVE_BYTES)
            except OSError:
                self._free_reserve()

    def _free_reserve(self) -> None:
        if "://" not in self.root:
            try:
                os.unlink(os.path.join(self.root, RESERVE))
            except OSError:
                pass

    def uninstall(self) -> None:
        global _ACTIVE
        self._free_reserve()
        for name in _RAY_LOGGERS:
            logging.getLogger(name).removeFilter(self._filter)
        if self._log is not None:
            self._log.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if _ACTIVE is self:
            _ACTIVE = None

    def _on_signal(self, signum, frame) -> None:
        if self.signal is not None:
            if time.monotonic() - self._signal_at < DUPLICATE_SIGNAL_S:
                return  # the same request delivered twice (SLURM signals every process of a job, its script too)
            os._exit(128 + signum)  # a second signal: stop now, state as last saved
        self.signal = signum
        self._signal_at = time.monotonic()
        self.say(f"{signal.Signals(signum).name} received: saving the study's state and stopping "
                 f"(continue with `study resume {self.meta['name']}`)")
        self._stop()

    def _stop(self) -> None:
        """Stop Tune the way its own interrupt does (its SIGUSR1 handler, installed in fit)."""
        if self._stop_sent:
            return
        handler = signal.getsignal(signal.SIGUSR1)
        if callable(handler) and handler not in (self._on_signal,):
            self._stop_sent = True
            os.kill(os.getpid(), signal.SIGUSR1)

    def storage_failed(self, why: str) -> None:
        self._free_reserve()  # room for Tune's last state and the trials' marks
        if self.storage_error is None:
            self.storage_error = why
            self.say(f"storage failed: {why}; stopping the study")
        self._stop()

    # ------------------------------------------------------------------ exit
    def exit_code(self, runs) -> int:
        if self.storage_error is not None:
            return EXIT_STORAGE
        if self.signal is not None:
            return 128 + self.signal
        if len(runs) and (runs.status == "error").any():
            return EXIT_TRIAL_ERROR
        return EXIT_OK

    # ------------------------------------------------------------------ trials
    def _key(self, trial) -> str | None:
        return (trial.config or {}).get("key")

    def _ledger(self, key: str) -> dict:
        from study.tuning.trainable import ledger

        return ledger(self.meta, key).read()

    def _cause(self, trial, key: str) -> str:
        why = self._ledger(key).get("last_error")
        if why:
            return why
        text = ""
        try:
            if trial.error_file and os.path.exists(trial.error_file):
                with open(trial.error_file) as f:
                    text = f.read().split("Failure #")[-1]
        except OSError:
            pass
        if "actor died" in text or "ActorDiedError" in text or "RayActorError" in text:
            return "WorkerDied: the trial's process died unexpectedly (killed, out of memory or its node was lost)"
        return cause_from_text(text) if text else "unknown error (see Ray's error.txt of the trial)"

    def on_trial_start(self, iteration, trials, trial, **info):
        self.sign()  # the trial's params.pkl

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.sign()  # the trial's error.pkl
        key = self._key(trial)
        if key is None:
            return
        why = self._cause(trial, key)
        attempts = self._ledger(key).get("attempts", trial.num_failures)
        self.say(f"trial {key} failed (attempt {attempts}): {why}; retrying from its last checkpoint")
        if why.startswith("StorageError"):
            self.storage_failed(why.split(":", 1)[1].strip())

    def on_trial_error(self, iteration, trials, trial, **info):
        self.sign()
        key = self._key(trial)
        if key is None:
            return
        why = self._cause(trial, key)
        self.errors[key] = why
        book = self._ledger(key)
        attempts = int(book.get("attempts") or trial.num_failures or 1)
        self.say(f"trial {key} error after {attempts} attempt(s): {why}")
        try:
            self._write_row(trial, key, status="error", error=why, attempts=attempts,
                            device_seconds=book.get("device_seconds"))
        except OSError as e:
            self.storage_failed(f"{e.filename or self.tables}: {e.strerror or e}")
        if why.startswith("StorageError"):
            self.storage_failed(why.split(":", 1)[1].strip())

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get("warning"):
            self.say(f"trial {self._key(trial)}: warning: {result['warning']}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        key = self._key(trial)
        if key is not None:
            self.completed.add(key)

    def on_step_end(self, iteration, trials, **info):
        if self.signal is not None or self.storage_error is not None:
            self._stop()
        # sign right after Tune's saves (it saves at most every second): locally every
        # step (unchanged files are not re-read), on object storage every 10 s
        now = time.monotonic()
        if "://" not in self.root or now - self._last_sign >= 10.0:
            self._last_sign = now
            self.sign()
        if self.lock is not None:
            self.lock.heartbeat()

    def on_experiment_end(self, trials, **info):
        self.sign()

    def sign(self) -> None:
        from study.tuning.integrity import Signer

        try:
            if self._signer is None:
                self._signer = Signer(root=self.root)
            self._signer.sign()
        except OSError as e:
            self.storage_failed(f"{e.filename or self.root}: {e.strerror or e}")

    # ------------------------------------------------------------------ rows
    def _write_row(self, trial, key: str, *, status: str, error: str | None, attempts: int,
                   device_seconds) -> None:
        runs = read_table(self.tables, "runs")
        old = runs[runs.trial_id == key]
        if len(old):
            row = old.iloc[0].to_dict()
        else:
            row = self._row_from_config(trial.config or {}, key)
            row["ray_trial_id"] = trial.trial_id
        row.update(status=status, error=error, attempts=attempts, updated_at=time.time())
        if device_seconds is not None:
            row["device_seconds"] = max(float(device_seconds), float(row.get("device_seconds") or 0.0))
        write_part(part_path(self.tables, "runs", key), [_plain(row)])

    def _row_from_config(self, config: dict[str, Any], key: str) -> dict[str, Any]:
        """A ``runs`` row for a trial that failed before it wrote one."""
        row: dict[str, Any] = {"trial_id": key, "study": self.meta["name"], "cell": config.get("cell"),
                               "sample": config.get("sample"), "epochs_done": 0, "best_test_acc": math.nan,
                               "final_test_acc": math.nan, "device_seconds": 0.0,
                               **{f"sampled_{k}": v for k, v in (config.get("sampled") or {}).items()}}
        try:
            from study.models import model_name
            from study.tuning.trainable import trial_config

            if self.spec is not None:  # validated when the driver started
                cfg = self.spec.train_config(self.spec.cells[config["cell"]], config.get("sampled"))
            else:
                cfg = trial_config(self.meta, config)
            mc = cfg.model
            row.update(name=model_name(mc), **{k: v for k, v in mc.to_dict().items() if k in (
                "arch", "encoding", "isotropic", "num_heads", "pos_dim", "hidden", "layers")})
            row.update(lr=cfg.lr, weight_decay=cfg.weight_decay, batch_size=cfg.batch_size, epochs=cfg.epochs,
                       warmup=cfg.warmup, schedule=cfg.schedule, seed=cfg.seed, data=cfg.data, subset=cfg.subset)
        except Exception:  # noqa: BLE001 - the config itself may be what failed
            pass
        return row

    def finish(self) -> None:
        """After Tune returns: no row stays ``running``.  Interrupted (signal, storage
        failure, or never seen to end) -> ``interrupted``, with the device-seconds of its
        ledger (which count an epoch cut short); ended early by the scheduler -> ``stopped``."""
        runs = read_table(self.tables, "runs")
        for r in runs[runs.status == "running"].to_dict("records"):
            stopped_early = (r["trial_id"] in self.completed and self.signal is None
                             and self.storage_error is None and r["epochs_done"] < r["epochs"])
            r["status"] = "stopped" if stopped_early else "interrupted"
            # the time of an epoch cut short is only in the ledger (its clock ran while it did)
            spent = self._ledger(r["trial_id"]).get("device_seconds")
            if spent is not None:
                r["device_seconds"] = max(float(spent), float(r.get("device_seconds") or 0.0))
            if self.storage_error is not None and not r.get("error"):
                r["error"] = f"StorageError: {self.storage_error}"
            r["updated_at"] = time.time()
            write_part(part_path(self.tables, "runs", r["trial_id"]), [_plain(r)])


def _log_dir() -> str:
    try:
        import ray

        path = ray._private.worker._global_node.get_logs_dir_path()
        if path and os.path.isdir(path):
            return path
    except Exception:  # noqa: BLE001 - no local Ray node (a client connection)
        pass
    import tempfile

    return tempfile.gettempdir()


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        if hasattr(v, "item"):
            v = v.item()
        if v is not None and not isinstance(v, (str, bool)) and isinstance(v, float) and math.isnan(v) and k in (
                "error",):
            v = None
        out[k] = v
    return out
