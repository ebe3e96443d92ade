"""docs/results.md, "Live reads": every reader (SQL, the pandas frames that ``analysis figures``
and the report read, the live report's page) sees whole, consistent tables while a
writer compacts under it, not only when the timing happens to miss.

A writer thread runs the project's own ``TableWriter`` with ``compact_every=2`` (a
compaction, deleting the parts it merged, every second epoch of every table), as fast
as it can; the readers loop over every reader path meanwhile, for a bounded number of
rounds.  Each answer must be a consistent snapshot: per trial the epochs 0..k, each
once, every head of every epoch."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import analysis
from analysis.cli import main as analysis_main
from study.results.tables import SCHEMA, TableWriter

TRIALS, LAYERS, HEADS = 3, 2, 3
ROUNDS = 6  # reader rounds; each holds several reads of every table
MAX_EPOCHS = 400  # the writer stops there (bounds the tables' size, so the test's cost)


class Writer(threading.Thread):
    """Trials side by side, epoch after epoch, compacting every 2 parts, until stopped."""

    def __init__(self, root: Path):
        super().__init__(daemon=True)
        self.root, self.stop, self.error = root, threading.Event(), None
        self.epochs_written = 0
        self.compactions = 0

    def run(self):
        try:
            writers = [
                TableWriter(self.root, trial_id=f"c{t:03d}-s000", compact_every=2) for t in range(TRIALS)
            ]
            epoch = 0
            while not self.stop.is_set() and epoch < MAX_EPOCHS:
                for w in writers:
                    w.rows("epochs", epoch, [{c: 0.5 for c in SCHEMA["epochs"][2:]}])
                    w.rows(
                        "heads",
                        epoch,
                        [
                            {**{c: 0.5 for c in SCHEMA["heads"][4:]}, "layer": ly, "head": h}
                            for ly in range(LAYERS)
                            for h in range(HEADS)
                        ],
                    )
                    w.rows(
                        "maps",
                        epoch,
                        [
                            {"layer": ly, "head": h, "window": 3, "probs": [1 / 9] * 9}
                            for ly in range(LAYERS)
                            for h in range(HEADS)
                        ],
                    )
                    w.run(self.run_row(w.trial_id, epoch))
                self.compactions += 3 * TRIALS * (epoch % 2)
                epoch += 1
                self.epochs_written = epoch
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.error = exc

    @staticmethod
    def run_row(trial_id: str, epoch: int) -> dict:
        """A whole ``runs`` row (every guaranteed column), as a trial rewrites it."""
        row = {c: None for c in SCHEMA["runs"] if c != "trial_id"}
        row.update(
            study="s",
            name=f"SA learned ({trial_id})",
            arch="sa",
            encoding="learned",
            isotropic=False,
            num_heads=HEADS,
            layers=LAYERS,
            hidden=8,
            pos_dim=8,
            lr=0.1,
            weight_decay=0.0,
            batch_size=8,
            epochs=MAX_EPOCHS,
            seed=0,
            data="synthetic:64",
            status="running",
            epochs_done=epoch + 1,
            best_test_acc=0.1,
            final_test_acc=0.1,
            attempts=1,
            cell=int(trial_id[1:4]),
            updated_at=1.0,
            n_params=1000,
            flops=2000,
            device_seconds=1.0,
            device="cpu",
            world_size=1,
            warmup=0,
            n_train=64,
            n_val=0,
            n_test=64,
            error="",
        )
        return row


def _contiguous(pairs, per_epoch: int) -> None:
    """(trial_id, epoch) rows: per trial the epochs 0..k, each ``per_epoch`` times."""
    counts: dict[tuple[str, int], int] = {}
    for trial, epoch in pairs:
        counts[(trial, int(epoch))] = counts.get((trial, int(epoch)), 0) + 1
    for (trial, epoch), n in counts.items():
        assert n == per_epoch, f"{trial} epoch {epoch}: {n} rows, expected {per_epoch}"
    for trial in {t for t, _ in counts}:
        epochs = sorted(e for t, e in counts if t == trial)
        assert epochs == list(range(len(epochs))), f"{trial}: epochs {epochs} (a gap: rows lost)"


def _check_sql(study) -> int:
    n = 0
    for table, per_epoch in (("epochs", 1), ("heads", LAYERS * HEADS), ("maps", LAYERS * HEADS)):
        rows = study.sql(f"SELECT trial_id, epoch FROM {table}")
        _contiguous(zip(rows.trial_id, rows.epoch), per_epoch)
        n += len(rows)
    mass = study.sql("SELECT min(list_sum(probs)) AS m FROM maps").m.iloc[0]
    assert mass is None or mass != mass or abs(mass - 1.0) < 1e-3, mass
    assert len(study.sql("SELECT * FROM runs")) <= TRIALS
    return n


def _check_frames(study) -> int:
    study.refresh()
    n = 0
    for table, per_epoch in (("epochs", 1), ("heads", LAYERS * HEADS), ("maps", LAYERS * HEADS)):
        frame = study.table(table)
        _contiguous(zip(frame.trial_id, frame.epoch), per_epoch)
        n += len(frame)
    return n


@pytest.fixture
def writing(tmp_path):
    root = tmp_path / "s" / "tables"
    root.mkdir(parents=True)
    (tmp_path / "s" / "study.json").write_text('{"name": "s"}')
    writer = Writer(root)
    writer.start()
    deadline = time.monotonic() + 60
    while writer.epochs_written < 4 and writer.error is None and time.monotonic() < deadline:
        time.sleep(0.01)  # until compacted files and parts both exist
    yield tmp_path / "s", writer
    writer.stop.set()
    writer.join(30)
    assert writer.error is None, writer.error


@pytest.mark.slow
def test_every_reader_sees_whole_tables_while_a_writer_compacts(writing, capsys):
    folder, writer = writing
    kept = analysis.load(folder)  # one Study refreshed round after round, as the live report does
    seen = 0
    start_epochs = writer.epochs_written
    t0 = time.monotonic()
    for _ in range(ROUNDS):
        seen += _check_sql(analysis.load(folder))  # a new reader each round
        seen += _check_sql(kept.refresh())
        seen += _check_frames(kept)  # what `analysis figures` and the report read
        code = analysis_main(["query", str(folder), "SELECT count(*) AS n FROM heads", "--format", "csv"])
        out, err = capsys.readouterr()
        assert code == 0 and err == "", err
        assert int(out.split()[1]) % (LAYERS * HEADS) == 0
        assert writer.error is None, writer.error
    print(
        f"{ROUNDS} rounds in {time.monotonic() - t0:.1f} s, epochs {start_epochs} -> {writer.epochs_written}"
    )
    # the page of the live report, built while the writer goes on
    from analysis.report import render

    page = render(kept.refresh(), version="stress")
    assert "<html" in page.lower()
    assert writer.error is None, writer.error
    # the readers really raced the writer: many compactions happened while they read
    assert writer.epochs_written - start_epochs >= 10, (start_epochs, writer.epochs_written)
    assert seen > 0


def test_runs_rows_read_from_s3_are_whole_while_trials_replace_them(s3):
    """A trial replaces its ``runs`` part every epoch; on an object store a reader's size
    request and GETs can straddle the replacement.  Every read still holds every trial's row,
    with no "skipped …" warning (each read is one version of the object, old or new)."""
    import warnings

    from study.results.atomicio import write_atomic
    from study.results.tables import read_table

    folder = "s3://studies/live-runs/s"
    write_atomic(f"{folder}/study.json", b'{"name": "s"}')
    writers = [TableWriter(f"{folder}/tables", trial_id=f"c{t:03d}-s000") for t in range(TRIALS)]
    for w in writers:
        w.run(Writer.run_row(w.trial_id, 0))
    stop, errors = threading.Event(), []

    def replace():  # as fast as it can; the row's size changes with its error text
        try:
            epoch = 0
            while not stop.is_set():
                epoch += 1
                for w in writers:
                    w.run({**Writer.run_row(w.trial_id, epoch), "error": "x" * (epoch * 997 % 5000)})
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    thread = threading.Thread(target=replace, daemon=True)
    thread.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(20):
                assert sorted(read_table(f"{folder}/tables", "runs").trial_id) == [
                    w.trial_id for w in writers
                ]
                assert len(analysis.load(folder).sql("SELECT trial_id FROM runs")) == TRIALS
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    assert [str(w.message) for w in caught] == []


def test_compacted_files_read_from_s3_are_whole_while_a_trial_recompacts(s3):
    """With ``compact_every=1`` a trial replaces its compacted file every epoch; a reader's
    schema read and data reads of it (SQL) and its whole-file read (pandas) each see one
    version: epochs 0..k once each, no "skipped …" warning."""
    import warnings

    from study.results.atomicio import write_atomic
    from study.results.tables import read_table

    folder = "s3://studies/live-compacted/s"
    write_atomic(f"{folder}/study.json", b'{"name": "s"}')
    writer = TableWriter(f"{folder}/tables", trial_id="c000-s000", compact_every=1)
    stop, errors, written = threading.Event(), [], [0]

    def train():
        try:
            for epoch in range(MAX_EPOCHS):
                if stop.is_set():
                    return
                writer.rows("epochs", epoch, [{c: 0.5 for c in SCHEMA["epochs"][2:]}])
                written[0] = epoch + 1
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while written[0] < 2 and not errors and time.monotonic() < deadline:
            time.sleep(0.01)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(15):
                rows = analysis.load(folder).sql("SELECT trial_id, epoch FROM epochs")
                _contiguous(zip(rows.trial_id, rows.epoch), 1)
                assert len(rows) >= 2
                frame = read_table(f"{folder}/tables", "epochs")
                _contiguous(zip(frame.trial_id, frame.epoch), 1)
                assert len(frame) >= 2
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    assert written[0] >= 10, f"only {written[0]} epochs written: the readers did not race the compactions"
    assert [str(w.message) for w in caught] == []
