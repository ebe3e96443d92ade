"""The results store (``study.results.tables``): compaction, its crash and live-read invariants,
compact maps on a schedule, and foreign or damaged files skipped by name — through
both readers (pandas ``read_table`` and DuckDB SQL in ``analysis``)."""

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import analysis
from study.results import tables as T
from study.results.tables import TableWarning, TableWriter, compact, decode_maps, encode_maps, read_table

LAYERS, HEADS = 2, 3


def write_epoch(w: TableWriter, epoch: int, *, acc: float | None = None, maps: bool = True, rng=None):
    rng = rng or np.random.default_rng(epoch)
    w.rows("epochs", epoch, [{"test_acc": epoch / 100 if acc is None else acc, "train_loss": 1.0}])
    w.rows(
        "heads",
        epoch,
        [
            {"layer": layer, "head": h, "entropy": float(rng.random())}
            for layer in range(LAYERS)
            for h in range(HEADS)
        ],
    )
    if maps:
        w.rows(
            "maps",
            epoch,
            [
                {"layer": layer, "head": h, "window": 3, "probs": rng.dirichlet(np.ones(9)).tolist()}
                for layer in range(LAYERS)
                for h in range(HEADS)
            ],
        )
    w.run({"status": "running", "epochs_done": epoch + 1})


def files(root: Path, table: str) -> list[str]:
    return sorted(str(p.relative_to(root / table)) for p in (root / table).rglob("*") if p.is_file())


def sql_count(root, table: str, where: str = "") -> int:
    return int(analysis.load(root).sql(f"SELECT count(*) AS n FROM {table} {where}").n.iloc[0])


def test_compaction_keeps_every_row_once_and_one_file_per_trial(tmp_path):
    root = tmp_path / "tables"
    writers = {t: TableWriter(root, trial_id=t, compact_every=4) for t in ("a", "b")}
    for epoch in range(10):
        for w in writers.values():
            write_epoch(w, epoch)
        # live: every epoch written so far, once, through both readers
        for table, per_epoch in (("epochs", 1), ("heads", LAYERS * HEADS), ("maps", LAYERS * HEADS)):
            frame = read_table(root, table)
            assert len(frame) == 2 * (epoch + 1) * per_epoch
            keys = ["trial_id", "epoch"] + (["layer", "head"] if per_epoch > 1 else [])
            assert not frame.duplicated(keys).any()
            assert sql_count(root, table) == len(frame)
    # periodic compaction: at most compact_every - 1 parts left per trial and table
    assert files(root, "epochs") == sorted(
        [
            "a/00008.parquet",
            "a/00009.parquet",
            "a/compacted.parquet",
            "b/00008.parquet",
            "b/00009.parquet",
            "b/compacted.parquet",
        ]
    )
    for w in writers.values():
        w.close()
    for table in ("epochs", "heads", "maps"):
        assert files(root, table) == ["a/compacted.parquet", "b/compacted.parquet"]
    epochs = read_table(root, "epochs")
    assert epochs.groupby("trial_id").epoch.apply(list).tolist() == [list(range(10))] * 2
    np.testing.assert_allclose(epochs.test_acc, np.tile(np.arange(10) / 100, 2))


def test_crash_between_compacted_write_and_part_delete_never_duplicates(tmp_path, monkeypatch):
    root = tmp_path / "tables"
    w = TableWriter(root, trial_id="a", compact_every=0)
    for epoch in range(3):
        write_epoch(w, epoch)

    # the compacted file is written, then the process dies before deleting the parts
    def die(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(T, "_delete", die)
    with pytest.raises(KeyboardInterrupt):
        compact(root, "epochs", "a")
    monkeypatch.undo()
    assert files(root, "epochs") == [
        "a/00000.parquet",
        "a/00001.parquet",
        "a/00002.parquet",
        "a/compacted.parquet",
    ]
    assert len(read_table(root, "epochs")) == 3 and sql_count(root, "epochs") == 3
    # a retried trial trains epoch 1 again after the compaction: its new part wins
    write_epoch(TableWriter(root, trial_id="a", compact_every=0), 1, acc=0.99)
    for frame in (read_table(root, "epochs"), analysis.load(root).sql("SELECT * FROM epochs ORDER BY epoch")):
        assert list(frame.epoch) == [0, 1, 2] and list(frame.test_acc) == [0.0, 0.99, 0.02]
    # the next compaction keeps the newest row and removes the parts
    compact(root, "epochs", "a")
    assert files(root, "epochs") == ["a/compacted.parquet"]
    assert list(read_table(root, "epochs").test_acc) == [0.0, 0.99, 0.02]


def test_readers_survive_a_compaction_between_listing_and_reading(tmp_path, monkeypatch):
    root = tmp_path / "tables"
    w = TableWriter(root, trial_id="a", compact_every=0)
    for epoch in range(4):
        write_epoch(w, epoch)
    # pandas: the first file read triggers the compaction that deletes the listed parts
    real = T._read_file
    fired = []

    def racing(path, **kw):
        if not fired:
            fired.append(path)
            compact(root, "epochs", "a")
        return real(path, **kw)

    monkeypatch.setattr(T, "_read_file", racing)
    assert len(read_table(root, "epochs")) == 4 and fired
    monkeypatch.undo()
    # DuckDB: views bound to the listed parts, then the compaction deletes them
    study = analysis.load(root)
    assert study.sql("SELECT count(*) AS n FROM heads").n.iloc[0] == 4 * LAYERS * HEADS
    compact(root, "heads", "a")
    assert study.sql("SELECT count(*) AS n FROM heads").n.iloc[0] == 4 * LAYERS * HEADS


DAMAGE = {
    "part without magic bytes": ("epochs/b/00001.parquet", b"this is not parquet"),
    "empty part": ("heads/a/00002.parquet", b""),
    "truncated compacted file": ("epochs/a/compacted.parquet", None),
    "foreign notes.txt in a table": ("epochs/notes.txt", b"my notes"),
    "foreign file in a trial folder": ("maps/a/readme.md", b"# hi"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_foreign_or_damaged_file_is_named_and_skipped(tmp_path, kind, capsys):
    root = tmp_path / "study" / "tables"
    for t in ("a", "b"):
        w = TableWriter(root, trial_id=t, compact_every=0)
        for epoch in range(3):
            write_epoch(w, epoch)
    compact(root, "epochs", "a")
    rel, data = DAMAGE[kind]
    bad = root / rel
    lost = {"epochs": 0, "heads": 0, "maps": 0}
    if data is None:  # cut a real compacted file in half
        whole = bad.read_bytes()
        data = whole[: len(whole) // 2]
        lost["epochs"] = 3
    elif rel.endswith("00001.parquet"):
        lost["epochs"] = 1
    elif rel.startswith("heads"):
        lost["heads"] = LAYERS * HEADS
    bad.write_bytes(data)
    T._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frames = {t: read_table(root, t) for t in ("epochs", "heads", "maps")}
        study = analysis.load(root.parent)
        counts = {t: int(study.sql(f"SELECT count(*) AS n FROM {t}").n.iloc[0]) for t in frames}
    full = {"epochs": 6, "heads": 6 * LAYERS * HEADS, "maps": 6 * LAYERS * HEADS}
    want = {t: full[t] - lost[t] for t in full}
    assert {t: len(f) for t, f in frames.items()} == want
    assert counts == want
    named = [str(w.message) for w in caught if issubclass(w.category, TableWarning)]
    assert named and all(str(bad) in m for m in named), named
    # the command line: one warning line naming the file, the answer, exit 0
    T._warned.clear()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "analysis",
            "query",
            str(root.parent),
            "SELECT (SELECT count(*) FROM epochs) + (SELECT count(*) FROM heads) + "
            "(SELECT count(*) FROM maps) AS n",
            "--format",
            "csv",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["n", str(sum(want.values()))]
    lines = r.stderr.strip().splitlines()
    assert lines and all(ln.startswith(f"analysis query: warning: skipped {bad}") for ln in lines), lines


def test_maps_are_stored_quantised_and_read_back_as_probabilities(tmp_path):
    rng = np.random.default_rng(0)
    probs = [rng.dirichlet(np.full(225, a)) for a in (0.05, 1.0, 50.0)] + [np.eye(1, 225, 112)[0]]
    rows = [
        {"trial_id": "a", "epoch": 0, "layer": 0, "head": h, "window": 15, "probs": p.tolist()}
        for h, p in enumerate(probs)
    ]
    table = encode_maps(rows)
    assert str(table.schema.field("probs_q").type) == "list<item: uint16>"
    back = decode_maps(table).to_pandas()
    for p, got, scale in zip(probs, back.probs, table.column("probs_scale").to_pylist()):
        assert scale == pytest.approx(p.max() / 65535)
        assert np.abs(np.asarray(got) - p).max() <= scale / 2 + 1e-18
    root = tmp_path / "tables"
    T.write_part(T.part_path(root, "maps", "a", 0), table)
    stored = pq.read_table(root / "maps" / "a" / "00000.parquet")
    assert "probs" not in stored.column_names  # 2 bytes per probability on disk
    via_sql = analysis.load(root).sql("SELECT head, probs FROM maps ORDER BY head")
    for got, want in zip(via_sql.probs, read_table(root, "maps").probs):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_tables_written_before_quantisation_stay_readable(tmp_path):
    root = tmp_path / "tables"
    old = [{"trial_id": "a", "epoch": 0, "layer": 0, "head": 0, "window": 1, "probs": [1.0]}]
    T.write_part(T.part_path(root, "maps", "a", 0), old)  # the earlier layout: float64 probs
    write_epoch(TableWriter(root, trial_id="b", compact_every=0), 0)
    frame = read_table(root, "maps")
    assert len(frame) == 1 + LAYERS * HEADS and list(frame.probs.iloc[0]) == [1.0]
    got = analysis.load(root).sql("SELECT trial_id, list_sum(probs) AS s FROM maps ORDER BY ALL")
    assert got.s.tolist() == pytest.approx([1.0] * len(got), abs=1e-3)


def test_map_schedule_in_the_study_file_and_study_train(tmp_path):
    import yaml

    from study.spec.studyfile import SpecError, load_spec

    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"data": "synthetic:100", "epochs": 5, "maps": {"epochs": [0, 4]}}))
    spec = load_spec(f)
    assert spec.train_config(spec.cells[0]).map_epochs == (0, 4)
    for bad, why in (
        ([0, 5], "maps.epochs: epochs are 0-based and must be < epochs (5), got 5"),
        ("often", "maps.epochs: must be auto, all, last, none or a list of epochs, got 'often'"),
    ):
        f.write_text(yaml.safe_dump({"data": "synthetic:100", "epochs": 5, "maps": {"epochs": bad}}))
        with pytest.raises(SpecError) as e:
            load_spec(f)
        assert str(e.value) == f"{f}: {why}"
    r = subprocess.run(
        [sys.executable, "-m", "study", "train", "--map-epochs", "0,x", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(
        "study train: error: --map-epochs:"
    )
    assert not (tmp_path / "o").exists()


def test_init_part_is_read_once_overwritten_on_retry_and_compacted(tmp_path):
    """The untrained model's rows (epoch −1, part ``-0001.parquet``) are a part like any
    other: not skipped as foreign, replaced (not added to) by a retried attempt,
    merged by compaction; both readers see each key once."""
    w = TableWriter(tmp_path, trial_id="t", compact_every=0)
    write_epoch(w, T.INIT_EPOCH, rng=np.random.default_rng(1))
    write_epoch(w, T.INIT_EPOCH, rng=np.random.default_rng(2))  # a retried attempt from scratch
    write_epoch(w, 0)
    assert "t/-0001.parquet" in files(tmp_path, "heads")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TableWarning)
        heads = read_table(tmp_path, "heads")
    assert heads.epoch.tolist() == [-1] * LAYERS * HEADS + [0] * LAYERS * HEADS
    retried = np.random.default_rng(2).random(LAYERS * HEADS)
    np.testing.assert_array_equal(heads.query("epoch == -1").entropy, retried)
    assert sql_count(tmp_path, "heads", "WHERE epoch = -1") == LAYERS * HEADS
    w.close()
    assert files(tmp_path, "heads") == ["t/compacted.parquet"]
    assert read_table(tmp_path, "heads").epoch.tolist() == heads.epoch.tolist()


@pytest.mark.parametrize("encoding", ["quadratic", "learned", "learned_content"])
def test_a_trial_stores_maps_on_its_schedule_and_ends_compacted(tmp_path, encoding):
    from study.models import ModelConfig
    from study.trial import TrainConfig, train_trial

    model = ModelConfig(
        hidden=16,
        layers=1,
        intermediate=16,
        num_heads=2,
        encoding=encoding,
        pos_dim={"quadratic": None, "learned": 4, "learned_content": 16}[encoding],
    )
    cfg = TrainConfig(
        model=model, data="synthetic:100", epochs=3, batch_size=25, head_images=4, map_epochs=(1,)
    )
    train_trial(cfg, trial_id="t", tables=tmp_path)
    assert read_table(tmp_path, "heads").epoch.tolist() == [-1, -1, 0, 0, 1, 1, 2, 2]  # init, every epoch
    maps = read_table(tmp_path, "maps")
    assert maps.epoch.tolist() == [-1, -1, 1, 1]  # init (maps are stored), then the schedule
    assert all(len(p) == 225 and 0 < np.sum(p) <= 1 + 1e-3 for p in maps.probs)
    for table in ("epochs", "heads", "maps"):
        assert files(tmp_path, table) == ["t/compacted.parquet"]
