"""``study validate``: one test per rule; each error is one line naming the field, exit 2."""

import json
import subprocess
import sys

import pytest
import yaml

from study.spec.studyfile import SpecError, load_spec
from tests.helpers import REPO_ROOT

BASE = {"data": "synthetic", "epochs": 2, "model": {"hidden": 16, "layers": 1}}


def write(tmp_path, doc, name="s.yaml"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return p


def error_of(tmp_path, doc, **kw):
    p = write(tmp_path, doc)
    with pytest.raises(SpecError) as e:
        load_spec(p, **kw)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and "\n" not in msg
    return e.value


CASES = [
    ("unknown top-level key", {**BASE, "epoks": 3}, "epoks"),
    ("unknown model field", {**BASE, "model": {"heads": 3}}, "model.heads"),
    (
        "unknown model field in list",
        {**BASE, "models": [{"arch": "sa"}, {"encodin": "learned"}]},
        "models.1.encodin",
    ),
    ("wrong type", {**BASE, "epochs": "ten"}, "epochs"),
    ("bool is not an int", {**BASE, "batch_size": True}, "batch_size"),
    ("non-positive epochs", {**BASE, "epochs": -1}, "epochs"),
    ("zero heads", {**BASE, "grid": {"num_heads": [0, 4]}}, "grid.num_heads"),
    (
        "pos_dim < 3 for learned",
        {**BASE, "models": [{"encoding": "learned", "pos_dim": 2}]},
        "models.0.pos_dim",
    ),
    ("quadratic pos_dim", {**BASE, "model": {"encoding": "quadratic", "pos_dim": 7}}, "model.pos_dim"),
    ("bad encoding", {**BASE, "grid": {"encoding": ["quadratic", "nonsense"]}}, "grid.encoding"),
    ("empty grid axis", {**BASE, "grid": {"num_heads": []}}, "grid.num_heads"),
    ("grid axis not a list", {**BASE, "grid": {"num_heads": 4}}, "grid.num_heads"),
    ("unknown grid axis", {**BASE, "grid": {"colour": [1, 2]}}, "grid.colour"),
    ("repeated grid value", {**BASE, "grid": {"num_heads": [4, 4]}}, "grid.num_heads"),
    (
        "axis both grid and sampled",
        {**BASE, "grid": {"lr": [0.1]}, "sample": {"lr": {"uniform": [0.01, 0.1]}}},
        "sample.lr",
    ),
    (
        "axis both grid and models",
        {**BASE, "models": [{"num_heads": 4}], "grid": {"num_heads": [4, 9]}},
        "grid.num_heads",
    ),
    ("unknown distribution", {**BASE, "sample": {"lr": {"gaussian": [0, 1]}}}, "sample.lr.gaussian"),
    ("loguniform low <= 0", {**BASE, "sample": {"lr": {"loguniform": [0, 1]}}}, "sample.lr.loguniform"),
    ("low >= high", {**BASE, "sample": {"lr": {"uniform": [0.5, 0.1]}}}, "sample.lr.uniform"),
    ("fractional GPUs > 1", {**BASE, "resources": {"gpus_per_trial": 1.5}}, "resources.gpus_per_trial"),
    ("negative GPUs", {**BASE, "resources": {"gpus_per_trial": -1}}, "resources.gpus_per_trial"),
    ("zero CPUs", {**BASE, "resources": {"cpus_per_trial": 0}}, "resources.cpus_per_trial"),
    (
        "workers differ from GPUs",
        {**BASE, "resources": {"gpus_per_trial": 4, "workers_per_trial": 2}},
        "resources.workers_per_trial",
    ),
    ("unknown resource key", {**BASE, "resources": {"tpus": 1}}, "resources.tpus"),
    ("scheduler type", {**BASE, "scheduler": {"type": "hyperband"}}, "scheduler.type"),
    (
        "reduction factor",
        {**BASE, "scheduler": {"type": "asha", "reduction_factor": 1}},
        "scheduler.reduction_factor",
    ),
    ("negative lr", {**BASE, "optimizer": {"lr": -0.1}}, "optimizer.lr"),
    ("warm-up >= 1", {**BASE, "schedule": {"warmup": 1.5}}, "schedule.warmup"),
    ("schedule type", {**BASE, "schedule": {"type": "linear"}}, "schedule.type"),
    ("missing data", {"epochs": 2}, "data"),
    ("missing data path", {**BASE, "data": "/no/such/cifar.tar.gz"}, "data"),
    ("empty seeds", {**BASE, "seeds": []}, "seeds"),
    ("negative seed", {**BASE, "seeds": [-1]}, "seeds.0"),
    ("empty models", {**BASE, "models": []}, "models"),
    ("bad name", {**BASE, "name": "a b/c"}, "name"),
    ("zero samples", {**BASE, "num_samples": 0}, "num_samples"),
]


@pytest.mark.parametrize("doc,path", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(tmp_path, doc, path):
    e = error_of(tmp_path, doc)
    assert e.path == path, str(e)


def test_gpu_request_on_cluster_without_gpus(tmp_path):
    e = error_of(tmp_path, {**BASE, "resources": {"gpus_per_trial": 1}}, gpus_available=0)
    assert e.path == "resources.gpus_per_trial" and "no GPU" in e.message


def test_duplicate_yaml_key(tmp_path):
    e = error_of(tmp_path, "data: synthetic\ngrid:\n  num_heads: [4]\n  num_heads: [9]\n")
    assert "duplicate key 'num_heads'" in str(e)


def test_invalid_yaml_and_not_a_mapping(tmp_path):
    assert "invalid YAML" in str(error_of(tmp_path, "data: [synthetic\n"))
    assert "mapping" in str(error_of(tmp_path, "- 1\n- 2\n"))


def test_counts_cells_and_samples(tmp_path):
    doc = {
        **BASE,
        "seeds": [0, 1],
        "models": [{"encoding": "learned"}, {"encoding": "quadratic"}],
        "grid": {"num_heads": [1, 2, 3]},
        "sample": {"lr": {"loguniform": [0.01, 0.1]}},
        "num_samples": 2,
    }
    spec = load_spec(write(tmp_path, doc))
    assert len(spec.cells) == 2 * 2 * 3 and spec.num_trials == 24
    assert len(spec.models) == 6
    cfg = spec.train_config(spec.cells[-1], {"lr": 0.05})
    assert cfg.lr == 0.05 and cfg.seed == 1 and cfg.model.num_heads == 3 and cfg.model.encoding == "quadratic"


def test_validate_cli(tmp_path):
    ok = write(tmp_path, {**BASE, "grid": {"num_heads": [2, 3]}}, "ok.yaml")
    r = subprocess.run([sys.executable, "-m", "study", "validate", str(ok)], capture_output=True, text=True)
    assert r.returncode == 0 and "2 trials" in r.stdout and "2 distinct models" in r.stdout
    bad = write(tmp_path, {**BASE, "grid": {"num_heads": [0]}}, "bad.yaml")
    r = subprocess.run([sys.executable, "-m", "study", "validate", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == f"study validate: error: {bad}: grid.num_heads: must be >= 1, got 0"


@pytest.mark.parametrize("name", ["smoke", "paper_fig2", "heads", "pos_dim", "tune_lr"])
def test_shipped_study_files_are_valid(name):
    from pathlib import Path

    spec = load_spec(REPO_ROOT / "search_spaces" / f"{name}.yaml")
    assert spec.num_trials >= 4
    assert Path(spec.file).read_text().startswith("#"), "each study file opens with what it reproduces"


def test_relative_data_path_becomes_absolute(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    spec = load_spec(write(tmp_path, {**BASE, "data": "data"}))
    assert spec.raw["data"] == str(tmp_path / "data")  # trials run in other working directories
    assert spec.train_config(spec.cells[0]).data == str(tmp_path / "data")


def test_spec_error_survives_copy_and_pickle():
    import copy
    import pickle

    e = SpecError("f.yaml", "grid.num_heads", "bad")
    for clone in (copy.copy(e), pickle.loads(pickle.dumps(e))):
        assert str(clone) == "f.yaml: grid.num_heads: bad" and clone.path == "grid.num_heads"


def test_study_file_reader_does_not_import_tune_adapters():
    """Layering: the study-file reader (``study.spec.studyfile``) and everything it imports stay
    below the Tune adapters (``study.tuning``), Ray and torch; a fresh interpreter, so
    no other test's imports count."""
    code = (
        "import sys, study.spec.studyfile; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'torch') "
        "or m == 'study.tuning' or m.startswith('study.tuning.'))))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [], f"importing study.spec.studyfile imports {r.stdout.strip()}"


# ------------------------------------------------------ the schema (study.spec.studyfile.StudyFile, pydantic)
PYDANTIC_CASES = [  # one of each kind pydantic catches, as the exact line `study validate` prints
    (
        "unknown key",
        {**BASE, "optimizer": {"rate": 0.1}},
        "optimizer.rate: unknown key (allowed: lr, momentum, weight_decay)",
    ),
    (
        "wrong type",
        {**BASE, "resources": {"workers_per_trial": 1.5}},
        "resources.workers_per_trial: must be int, got float 1.5",
    ),
    ("wrong type in a list", {**BASE, "seeds": [0, "x"]}, "seeds.1: must be int, got str 'x'"),
    ("wrong type of a union", {**BASE, "validation": "x"}, "validation: must be int or float, got str 'x'"),
    (
        "not a literal",
        {**BASE, "scheduler": {"type": "hyperband"}},
        "scheduler.type: must be 'asha' or 'fifo', got str 'hyperband'",
    ),
    (
        "below a bound",
        {**BASE, "scheduler": {"grace_period": 0}},
        "scheduler.grace_period: must be >= 1, got 0",
    ),
    ("above a limit", {**BASE, "epochs": 10**6}, "epochs: must be <= 100000 (MAX_EPOCHS), got 1000000"),
    (
        "not finite",
        {**BASE, "schedule": {"warmup": float("inf")}},
        "schedule.warmup: must be finite, got inf",
    ),
    ("missing", {"epochs": 2}, "data: required (synthetic, cifar10[:ROOT] or a path)"),
]


@pytest.mark.parametrize("doc,line", [c[1:] for c in PYDANTIC_CASES], ids=[c[0] for c in PYDANTIC_CASES])
def test_pydantic_error_is_one_line_naming_the_field(study_in_process, tmp_path, doc, line):
    p = write(tmp_path, doc)
    code, out, err, _ = study_in_process("validate", p)
    assert (code, out, err) == (2, "", [f"study validate: error: {p}: {line}"])


def test_schema_command_prints_the_committed_schema(study_in_process):

    code, out, err, _ = study_in_process("schema")
    assert (code, err) == (0, [])
    committed = REPO_ROOT / "search_spaces" / "study.schema.json"
    assert out == committed.read_text(), "search_spaces/study.schema.json is stale: study schema > it"
    schema = json.loads(out)
    assert schema["required"] == ["data"] and schema["additionalProperties"] is False
    assert schema["properties"]["epochs"]["maximum"] == 100_000


def test_every_shipped_study_file_names_and_meets_the_schema():

    import jsonschema

    from study.spec.studyfile import StudyFile
    from study.spec.yamlfile import load_yaml

    root = REPO_ROOT / "search_spaces"
    schema = json.loads((root / "study.schema.json").read_text())
    files = sorted(root.glob("*.yaml"))
    assert len(files) >= 8
    for f in files:
        text = f.read_text()
        assert text.splitlines()[0] == "# yaml-language-server: $schema=study.schema.json", f
        raw = load_yaml(text)
        jsonschema.validate(raw, schema)  # what an editor checks
        if raw["data"].partition(":")[0] in ("synthetic", "cifar10"):  # a path may be absent from a checkout
            assert load_spec(f).num_trials >= 1, f
        else:
            StudyFile.model_validate({**raw, "data": "synthetic"}, context={"default_name": f.stem})
    with pytest.raises(jsonschema.ValidationError):  # and the schema refuses what the model refuses
        jsonschema.validate({"data": "synthetic", "epoks": 3}, schema)


@pytest.mark.parametrize(
    "axis,bad,good",
    [
        ("num_heads", "9", 2),
        ("num_heads", 0, 2),
        ("encoding", "sinusoidal", "learned"),
        ("lr", -0.1, 0.2),
        ("isotropic", 1, True),
    ],
)
def test_schema_types_each_grid_axis_as_its_field_and_the_study_refuses_the_same(tmp_path, axis, bad, good):
    """An editor (JSON schema) and ``study validate`` both refuse a grid value of the wrong type or
    out of the field's bounds; the schema takes the type from the model or the recipe."""
    import jsonschema

    schema = json.loads((REPO_ROOT / "search_spaces" / "study.schema.json").read_text())
    items = schema["$defs"]["Grid"]["properties"]["num_heads"]["items"]
    assert (items["type"], items["minimum"]) == ("integer", 1)
    doc = {**BASE, "grid": {axis: [good, bad]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)
    with pytest.raises(SpecError, match=rf"grid\.{axis}: "):
        load_spec(write(tmp_path, doc))
    jsonschema.validate({**BASE, "grid": {axis: [good]}}, schema)


def test_schema_command_has_help(study_in_process):
    code, out, _, _ = study_in_process("schema", "--help")
    assert code == 0 and "yaml-language-server" in out


def test_several_duplicate_axes_name_the_same_one_on_every_run(tmp_path):
    """A file with two duplicate axes is refused naming the same one whatever Python's string
    hashing (the axes were walked as a set, so the named one changed from run to run)."""
    f = write(
        tmp_path,
        {
            **BASE,
            "models": [{"num_heads": 2, "training": {"optimizer": {"lr": 0.1}}}],
            "grid": {"num_heads": [1, 2], "lr": [0.1, 0.2], "momentum": [0.0, 0.9]},
            "sample": {"weight_decay": {"loguniform": [1e-5, 1e-3]}, "momentum": {"choice": [0.5]}},
        },
    )
    seen = set()
    for seed in ("0", "1", "2", "3", "4", "5"):
        r = subprocess.run(
            [sys.executable, "-m", "study", "validate", str(f)],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env={**__import__("os").environ, "PYTHONHASHSEED": seed},
            timeout=120,
        )
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        seen.add(r.stderr)
    assert len(seen) == 1, seen
    assert "duplicate axis" in seen.pop()
