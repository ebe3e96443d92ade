"""``runs.warmup_epochs`` and ``runs.warmup_steps`` (issue 43): written beside ``warmup``, null unless
given; tables written before them (no such columns) still read, alone and beside new ones."""

from study.results.tables import TableWriter, read_table
from study.status.variants import variant_labels, varying_columns
from study.trial import TrainConfig


def _write(root, trial_id, cfg, *, old=False):
    row = {"study": "s", "name": "SA quadratic", "status": "finished", **cfg.flat()}
    if old:  # as a trial wrote it before the columns existed
        row = {k: v for k, v in row.items() if k not in ("warmup_epochs", "warmup_steps")}
    TableWriter(root, trial_id=trial_id).run(row)


def test_tables_without_the_warmup_columns_still_read(tmp_path):
    from analysis.io import load

    _write(tmp_path, "old", TrainConfig(), old=True)
    runs = read_table(tmp_path, "runs")
    assert runs.warmup.tolist() == [0.05] and "warmup_steps" not in runs
    assert variant_labels(runs).tolist() == ["SA quadratic"]
    assert load(tmp_path).sql("SELECT warmup FROM runs").warmup.tolist() == [0.05]


def test_old_and_new_rows_read_together_with_nulls_where_a_form_is_not_given(tmp_path):
    from analysis.io import load

    _write(tmp_path, "a-old", TrainConfig(), old=True)
    _write(tmp_path, "b-steps", TrainConfig(warmup_steps=300))
    _write(tmp_path, "c-epochs", TrainConfig(warmup_epochs=2))
    _, rows = load(tmp_path).sql_records(
        "SELECT trial_id, warmup, warmup_epochs, warmup_steps FROM runs ORDER BY trial_id"
    )
    assert rows == [("a-old", 0.05, None, None), ("b-steps", None, None, 300), ("c-epochs", None, 2.0, None)]
    runs = read_table(tmp_path, "runs")
    assert {"warmup", "warmup_epochs", "warmup_steps"} <= set(varying_columns(runs))
