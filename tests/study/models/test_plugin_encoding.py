"""A user's own encoding without a fork (issue 44): tests/plugin_encoding/study_plugin_encoding.py declares
2-D ALiBi outside the ``study`` package.  Installed (an entry point of ``attention_cnn_study.encodings`` in a
dist-info that importlib.metadata finds) or named by a study file's ``encodings:``, it registers into the one
registry and runs through the pipeline: the schema types its field, a study file validates with it,
``study train`` trains it and writes its runs and heads tables, and ``analysis figures`` puts it in
Table 1.  Each case runs in a subprocess: a
registered encoding stays registered in the process that imported it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import run_cli

PLUGIN = Path(__file__).resolve().parents[2] / "plugin_encoding"
TINY = {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 2}


def installed(tmp_path: Path) -> dict[str, str]:
    """The environment of a process in which the plugin is an installed package's entry point."""
    dist = tmp_path / "site" / "study_plugin_encoding-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: study-plugin-encoding\nVersion: 0.1\n")
    entry = "[attention_cnn_study.encodings]\nalibi2d = study_plugin_encoding\n"
    (dist / "entry_points.txt").write_text(entry)
    return {"PYTHONPATH": f"{tmp_path / 'site'}:{PLUGIN}:{Path.cwd()}"}


def study_file(tmp_path: Path, name: str, **top) -> Path:
    path = tmp_path / f"{name}.yaml"
    doc = {"data": "synthetic:100", "epochs": 1, "batch_size": 25, "training": {"head_images": 4}}
    path.write_text(yaml.safe_dump({**doc, **top}))
    return path


def test_an_installed_encoding_is_in_the_schema_validates_and_trains_with_study_train(tmp_path):
    env = installed(tmp_path)
    r = run_cli(tmp_path, "schema", env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    model = json.loads(r.stdout)["$defs"]["ModelFields"]["properties"]
    assert "alibi2d" in model["encoding"]["anyOf"][0]["enum"]
    slope = model["alibi_slope"]["anyOf"][0]
    assert (slope["type"], slope["minimum"], slope["maximum"]) == ("number", 1e-3, 10.0)

    good = study_file(tmp_path, "good", model={**TINY, "encoding": "alibi2d", "alibi_slope": 0.5})
    r = run_cli(tmp_path, "validate", str(good), env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    bad = study_file(tmp_path, "bad", model={**TINY, "encoding": "alibi2d", "alibi_slope": 20.0})
    r = run_cli(tmp_path, "validate", str(bad), env=env, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"{bad}: model.alibi_slope: must be a number from 0.001 to 10, got 20.0" in r.stderr

    out = tmp_path / "o"
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    argv = ["train", "--encoding", "alibi2d", "--alibi-slope", "0.5", *flags, "--data", "synthetic:100"]
    argv += ["--epochs", "1", "--batch-size", "25", "--no-amp", "--quiet", "--out", str(out)]
    r = run_cli(tmp_path, *argv, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    from study.results.tables import read_table

    runs = read_table(out / "tables", "runs")
    assert runs.encoding.tolist() == ["alibi2d"] and runs.alibi_slope.tolist() == [0.5]
    assert runs.name.tolist() == ["SA ALiBi-2D (N_h=2)"]
    heads = read_table(out / "tables", "heads")  # its head statistics: every head, a finite locality
    assert set(heads["head"]) == {0, 1} and heads.attention_distance.notna().all()
    r = run_cli(tmp_path, "figures", str(out), "--out", str(tmp_path / "f"), "--jobs", "1", "--no-pdf",
                module="analysis", env=env, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    table1 = sorted((tmp_path / "f").rglob("table1*.csv"))
    assert table1 and "SA ALiBi-2D (N_h=2)" in table1[0].read_text(), (r.stdout, table1)


def test_a_module_a_study_file_names_registers_its_encoding(tmp_path):
    env = {"PYTHONPATH": f"{PLUGIN}:{Path.cwd()}"}  # importable, not installed
    model = {**TINY, "encoding": "alibi2d", "alibi_slope": 0.5}
    r = run_cli(tmp_path, "validate", str(study_file(tmp_path, "unnamed", model=model)), env=env, timeout=300)
    assert r.returncode == 2 and "model.encoding: must be" in r.stderr, r.stderr
    named = study_file(tmp_path, "named", encodings=["study_plugin_encoding"], model=model)
    r = run_cli(tmp_path, "validate", str(named), env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    r = run_cli(tmp_path, "schema", "--encodings", "study_plugin_encoding", env=env, timeout=300)
    assert r.returncode == 0 and "alibi_slope" in json.loads(r.stdout)["$defs"]["ModelFields"]["properties"]
    missing = study_file(tmp_path, "missing", encodings=["no_such_encoding_module"], model=model)
    r = run_cli(tmp_path, "validate", str(missing), env=env, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"{missing}: encodings.0: cannot import 'no_such_encoding_module'" in r.stderr


@pytest.mark.long
def test_a_study_file_naming_its_encoding_runs_on_ray(tmp_path):
    """``study run``: the trial's process, not only the driver, registers the encodings the study
    file names (it failed there with the encoding unknown while validate passed)."""
    env = {"PYTHONPATH": f"{PLUGIN}:{Path.cwd()}"}
    model = {**TINY, "encoding": "alibi2d", "alibi_slope": 0.5}
    named = study_file(tmp_path, "named", encodings=["study_plugin_encoding"], model=model)
    named.write_text(named.read_text() + "name: named\nresources: {cpus_per_trial: 1}\n")
    r = run_cli(tmp_path, "run", str(named), "--storage", str(tmp_path / "st"), "--num-cpus", "1", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    from study.results.tables import read_table

    runs = read_table(tmp_path / "st" / "named" / "tables", "runs")
    assert runs[["encoding", "alibi_slope", "status"]].values.tolist() == [["alibi2d", 0.5, "finished"]]


BROKEN = {
    "raises_enc": 'raise RuntimeError("boom")\n',
    "syntax_enc": "def f(:\n",
    "": None,  # not a module name
}


@pytest.mark.parametrize("module", list(BROKEN), ids=["raises", "syntax_error", "empty_name"])
def test_a_module_that_cannot_be_imported_is_one_line_naming_it(tmp_path, module):
    """Whatever importing it raises (not only ImportError): one line, exit 2, in the study file's
    ``encodings:`` and in ``study schema --encodings``."""
    if BROKEN[module] is not None:
        (tmp_path / f"{module}.py").write_text(BROKEN[module])
    env = {"PYTHONPATH": f"{tmp_path}:{Path.cwd()}"}
    f = study_file(tmp_path, "broken", encodings=[module], model=TINY)
    for argv, where in (
        (["validate", str(f)], f"{f}: encodings.0: "),
        (["schema", "--encodings", module], ""),
    ):
        r = run_cli(tmp_path, *argv, env=env, timeout=300)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert f"{where}cannot import {module!r}" in r.stderr, r.stderr


def test_an_installed_encoding_that_fails_to_import_is_one_warning_line(tmp_path):
    """A broken installed plugin does not stop every command: it is named once and left out."""
    env = installed(tmp_path)
    (tmp_path / "site" / "study_plugin_encoding.py").write_text('raise RuntimeError("boom")\n')
    env["PYTHONPATH"] = f"{tmp_path / 'site'}:{Path.cwd()}"
    r = run_cli(tmp_path, "validate", str(study_file(tmp_path, "plain", model=TINY)), env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert [ln for ln in lines if "alibi2d" in ln] == [
        "study: warning: encoding entry point alibi2d (study_plugin_encoding) not loaded: RuntimeError: boom"
    ], r.stderr
