"""Command-line overrides of a study file (issue 31, item 2), in Hydra's syntax:
``study run|validate|plan FILE key.sub=VALUE 'models[0].num_heads=16' seeds=[0,1,2]``.

An override changes the file's mapping before it is checked, so a bad one is refused
exactly like a bad file: ONE line ``PROG: error: FILE: path.field: problem`` naming the
override's path, exit 2, nothing written.  ``study.json`` records the overrides and the
study they made: ``study resume`` runs that study (not the file as it is now) and
``study status`` shows them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from study import limits
from study.spec.studyfile import SpecError, load_spec

TINY = {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 2}
BASE = {
    "name": "ov",
    "data": "synthetic:100",
    "epochs": 1,
    "batch_size": 25,
    "training": {"head_images": 4},
    "model": TINY,
    "models": [{"encoding": "quadratic"}, {"encoding": "learned", "pos_dim": 4}],
    "seeds": [0],
    "resources": {"cpus_per_trial": 1},
}


def write(tmp_path: Path, doc: dict, name: str = "ov.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


@pytest.fixture
def cli(study_in_process):
    """``study ARGS`` in this process (tests/conftest.py): (exit status, stdout, stderr lines)."""
    return lambda *args: study_in_process(*args)[:3]


# ---------------------------------------------------------------- what an override changes
def test_nested_field_override(tmp_path):
    spec = load_spec(write(tmp_path, BASE), overrides=["model.hidden=32", "optimizer.lr=0.02"])
    assert {m.hidden for m in spec.models} == {32}
    assert spec.train_config(spec.cells[0]).lr == 0.02  # a section the file lacks is created
    assert spec.raw["model"] == {**TINY, "hidden": 32} and spec.overrides == (
        "model.hidden=32",
        "optimizer.lr=0.02",
    )


@pytest.mark.parametrize("form", ["models[1].pos_dim=8", "models.1.pos_dim=8"])
def test_list_index_override(tmp_path, form):
    spec = load_spec(write(tmp_path, BASE), overrides=[form])
    assert [m.pos_dim for m in spec.models if m.encoding == "learned"] == [8]
    assert spec.raw["models"][0] == {"encoding": "quadratic"}, "the other entries are untouched"


def test_list_value_override(tmp_path):
    spec = load_spec(write(tmp_path, BASE), overrides=["seeds=[0,1,2]"])
    assert sorted({c.seed for c in spec.cells}) == [0, 1, 2] and spec.num_trials == 6


def test_add_delete_and_later_wins(tmp_path):
    spec = load_spec(
        write(tmp_path, BASE), overrides=["+description=a note", "~seeds", "epochs=2", "epochs=3"]
    )
    assert spec.raw["description"] == "a note" and "seeds" not in spec.raw and spec.raw["epochs"] == 3
    assert {c.seed for c in spec.cells} == {0}  # the default seed list once `seeds` is deleted
    # values are YAML 1.2 like the file's: `yes` stays a string, 1e-4 is a float, `key=` is ''
    spec = load_spec(write(tmp_path, BASE), overrides=["optimizer.weight_decay=1e-4", "description="])
    assert spec.raw["optimizer"]["weight_decay"] == 1e-4 and spec.raw["description"] == ""


def test_the_file_itself_is_not_changed(tmp_path):
    p = write(tmp_path, BASE)
    before = p.read_bytes()
    load_spec(p, overrides=["model.hidden=32", "seeds=[4]"])
    assert p.read_bytes() == before


def test_validate_shows_the_overridden_study(cli, tmp_path):
    p = write(tmp_path, BASE)
    code, out, err = cli("validate", p, "models[0].num_heads=4", "seeds=[0,1]")
    assert code == 0 and err == []
    assert f"{p}: 4 trials (4 grid cells x 1 samples)" in out and "SA quadratic isotropic (N_h=4)" in out
    assert "overrides: 'models[0].num_heads=4' 'seeds=[0,1]'" in out


def test_overrides_may_follow_the_options(cli, tmp_path):
    p = write(tmp_path, BASE)
    code, out, _ = cli("validate", p, "--cpus", "4", "seeds=[0,1]", "--gpus", "0", "epochs=2")
    assert code == 0 and "overrides: 'seeds=[0,1]' epochs=2" in out
    code, _, err = cli("validate", p, "--bogus", "epochs=2")
    assert code == 2 and err == ["study: error: unrecognized arguments: --bogus epochs=2"]


def test_plan_takes_overrides(cli, tmp_path):
    p = write(tmp_path, BASE)
    code, out, _ = cli("plan", p, "seeds=[0,1,2]")
    assert code == 0 and f"{p}: 6 trials" in out
    code, _, err = cli("plan", p, "model.hiden=3")
    assert code == 2 and err == [
        f"study plan: error: {p}: model.hiden: unknown model field (override model.hiden=3)"
    ]


# ---------------------------------------------------------------- refused like the file: one line, exit 2
REFUSED = [
    # (overrides, what the line says after `FILE: `)
    (["model.hiden=64"], "model.hiden: unknown model field (override model.hiden=64)"),
    (["epochz=5"], "epochz: unknown key (allowed: "),
    (["optimizer.rate=0.1"], "optimizer.rate: unknown key (allowed: lr, momentum, weight_decay)"),
    (["epochs=five"], "epochs: must be int, got str 'five' (override epochs=five)"),
    (["model.hidden=[16]"], "model.hidden: must be int, got list [16] (override model.hidden=[16])"),
    (
        ["models[0].num_heads=x"],
        "models.0.num_heads: must be int, got str 'x' (override models[0].num_heads=x)",
    ),
    (["seeds=[0,x]"], "seeds.1: must be int, got str 'x' (override seeds=[0,x])"),
    (["seeds=3"], "seeds: must be list, got int 3 (override seeds=3)"),
    (
        ["models[5].num_heads=4"],
        "models.5: index 5 out of range: models has 2 entries (override models[5].num_heads=4)",
    ),
    (["epochs.x=1"], "epochs.x: epochs is a number (1), not a mapping: no field 'x' (override epochs.x=1)"),
    (
        ["+epochs=3"],
        "epochs: already set in the study file: +key adds a field the file lacks (use epochs=VALUE)",
    ),
    (["~subset"], "subset: not set in the study file, nothing to delete (override ~subset)"),
    (["~epochs=1"], "override '~epochs=1': ~key=VALUE (delete if equal) is not supported: use ~epochs"),
    (["epochs"], "override 'epochs': expected key=VALUE, +key=VALUE, ++key=VALUE or ~key"),
    (["db@pkg=x"], "override 'db@pkg=x': key@package is Hydra's config-group syntax"),
    (["model..hidden=4"], "override 'model..hidden=4': 'model..hidden' is not a field path"),
    (["epochs=1,2"], "epochs: value '1,2': '1,2' is a Hydra sweep (a,b): not supported; a list is [a,b]"),
    (["seeds=range(3)"], "seeds: value 'range(3)': 'range(3)' looks like a Hydra function"),
    (["seeds=[0,1"], "seeds: value '[0,1': invalid YAML"),
    (
        ["seeds=" + "[" * 100 + "]" * 100],
        "seeds: value '" + "[" * 40 + "': line 1: collections nested more than 64",
    ),
    ([f"epochs={'9' * 200}"], "epochs: value '" + "9" * 40 + "': line 1: an integer of 200 digits"),
    (
        ["x=1"] * (limits.MAX_OVERRIDES + 1),
        f"{limits.MAX_OVERRIDES + 1} overrides, more than {limits.MAX_OVERRIDES} (MAX_OVERRIDES)",
    ),
    (
        ["description=" + "d" * limits.MAX_OVERRIDE_CHARS],
        f"an override of {limits.MAX_OVERRIDE_CHARS + 12} characters, more than {limits.MAX_OVERRIDE_CHARS}",
    ),
    ([f"epochs={limits.MAX_EPOCHS + 1}"], "epochs: "),  # the file's own limits hold too
]


@pytest.mark.parametrize("overrides,want", REFUSED, ids=[o[0][:30] for o, _ in REFUSED])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_bad_override_is_one_line_exit_2(cli, tmp_path, command, overrides, want):
    p = write(tmp_path, BASE)
    before = sorted(tmp_path.rglob("*"))
    extra = ["--storage", tmp_path / "st"] if command == "run" else []
    code, out, err = cli(command, p, *overrides, *extra)
    assert code == 2 and out == "" and len(err) == 1, err
    prefix = f"study {command}: error: {p}: "
    assert err[0].startswith(prefix + want), err[0]
    assert len(err[0]) < 500
    assert sorted(tmp_path.rglob("*")) == before, "a refused study wrote something"


def test_api_raises_the_study_file_error(tmp_path):
    from study.errors import StudyFileError, UsageError

    with pytest.raises(StudyFileError) as info:
        load_spec(write(tmp_path, BASE), overrides=["model.hiden=64"])
    assert isinstance(info.value, (SpecError, UsageError)) and info.value.path == "model.hiden"
    assert info.value.exit_code == 2


# a resumed study keeps the overrides it started with: tests/study/tuning/test_runner.py
# (test_interrupt_then_resume_keeps_the_study_that_started)
