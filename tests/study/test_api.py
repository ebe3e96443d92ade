"""The Python API (issue 31, item 3): ``study.run(FILE, overrides=[...], storage=...)`` runs a
study as ``study run`` does (one library function, :func:`study.driver.run`) and returns the
study's folder, which ``analysis.load`` opens (study never imports analysis: tests/test_layers.py);
where the command prints its one line, it raises a typed error of :mod:`study.errors` and prints
nothing.  ``import study`` stays cheap."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
import yaml

import analysis
import study
from study.errors import StorageError, StudyFileError, UsageError

TINY = {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 2}
DOC = {
    "name": "api",
    "data": "synthetic:100",
    "epochs": 1,
    "batch_size": 25,
    "training": {"head_images": 4},
    "model": TINY,
    "models": [{"encoding": "quadratic"}],
    "resources": {"cpus_per_trial": 1},
}


@pytest.fixture
def study_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "api.yaml"
    p.write_text(yaml.safe_dump(DOC))
    return p


@pytest.fixture
def ray_after():
    yield
    import ray

    ray.shutdown()


@pytest.mark.long
def test_run_returns_the_folder_analysis_load_opens(study_file, tmp_path, capsys, ray_after):
    import logging

    import ray  # noqa: F401 - Ray's own handler on the `ray` logger, as a notebook has it

    from study.tuning import raylog

    # a fresh notebook: no earlier in-process `study` command of this worker holds the logger
    raylog.restore()
    rays_own = list(logging.getLogger("ray").handlers)
    root = study.run(
        study_file, overrides=["model.hidden=8"], storage=str(tmp_path / "st"), num_cpus=2, quiet=True
    )
    assert root == str((tmp_path / "st" / "api").resolve())
    s = analysis.load(root)
    runs = s.runs
    assert len(runs) == 1 and runs.status.tolist() == ["finished"] and runs.hidden.tolist() == [8]
    loaded = analysis.load("api", storage=str(tmp_path / "st"))
    assert (s.root, s.folder) == (loaded.root, loaded.folder)
    pd.testing.assert_frame_equal(runs, loaded.runs)
    assert s.sql("SELECT count(*) AS n FROM epochs").n.tolist() == [1]
    assert "Started a local Ray instance" in (tmp_path / "st" / "api" / "logs" / "ray.log").read_text()
    assert logging.getLogger("ray").handlers == rays_own  # the notebook's Ray prints as before
    capsys.readouterr()
    # the same study again: refused as `study run` refuses it, raised instead of printed
    with pytest.raises(UsageError, match="study 'api' already exists") as info:
        study.run(study_file, storage=str(tmp_path / "st"), num_cpus=2, quiet=True)
    assert info.value.exit_code == 2 and capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "kwargs,error,text",
    [
        (
            {"overrides": ["model.hiden=8"]},
            StudyFileError,
            "api.yaml: model.hiden: unknown model field (override ",
        ),
        ({"overrides": ["epochs=x"]}, StudyFileError, "api.yaml: epochs: must be int, got str 'x'"),
        ({"overrides": "epochs=2"}, UsageError, "overrides: a list of KEY=VALUE strings"),
        ({"name": "a b"}, UsageError, "--name: must be 1 to 100 letters"),
        ({"storage": "s3://studies/p?versionId=1"}, UsageError, "query string"),
        ({"data": "synthetic:0"}, StudyFileError, "data: synthetic:N needs 1 <= N"),
    ],
)
def test_refusals_are_typed_errors_and_print_nothing(
    study_file, tmp_path, capsys, monkeypatch, kwargs, error, text
):
    from study.tuning import runner

    def no_ray(*a, **k):
        raise AssertionError("a refused study started Ray")

    monkeypatch.setattr(runner, "init_ray", no_ray)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(error) as info:
        study.run(study_file, **{"storage": str(tmp_path / "st"), **kwargs})
    assert text in str(info.value) and info.value.exit_code == 2
    assert capsys.readouterr().err == ""
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


def test_an_unreachable_store_is_a_storage_error(study_file, monkeypatch, capsys):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with pytest.raises(StorageError) as info:
        study.run(study_file, storage="s3://studies/p")
    assert info.value.exit_code == 3 and f"127.0.0.1:{port}" in str(info.value)
    assert capsys.readouterr().err == ""


def test_the_command_and_the_function_call_one_library_function(study_file, tmp_path, monkeypatch):
    """``study run`` only parses and prints, ``study.run`` only checks its arguments: both hand the same
    arguments to :func:`study.driver.run`."""
    from study import driver
    from study.cli import main

    calls = []

    def library(file, **kwargs):
        calls.append((kwargs.pop("prog", "study run"), file, kwargs))
        runs = pd.DataFrame()
        runs.attrs.update(root=str(tmp_path / "st" / "api"), exit_code=0)
        return runs

    monkeypatch.setattr(driver, "run", library)
    assert study.run(study_file, overrides=["epochs=2"], storage=str(tmp_path / "st")) == str(
        tmp_path / "st" / "api"
    )
    assert main(["run", str(study_file), "epochs=2", "--storage", str(tmp_path / "st")]) == 0
    (api, *_), (cli, *_) = calls
    assert (api, cli) == ("study.run", "study run") and calls[0][1:] == calls[1][1:]


def test_import_study_is_cheap():
    code = "import sys, study; print(callable(study.run), 'torch' in sys.modules, 'ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False", "False"]


#: a wrong type or value for each argument of study.run (issue 45, finding 6): a path as an int, bytes or a
#: list, a number as a str, a bool, a float, NaN, inf, negative, zero or huge, a flag as a str, an int or None
WRONG = {
    "file": [123, None, b"api.yaml"],
    "overrides": [None, "epochs=2", {"epochs": 2}, [1]],
    "storage": [123, ["st"]],
    "data": [True, b"synthetic:100"],
    "name": [5],
    "num_cpus": ["two", True, 2.0, 0, float("nan"), float("inf"), 10**12],
    "address": [123],
    "shared_storage": ["yes", None],
    "quiet": [0],
    "verbose": ["true"],
}


def test_every_argument_of_run_has_wrong_values_tested():
    import inspect

    assert set(WRONG) == set(inspect.signature(study.run).parameters)


@pytest.mark.parametrize(
    "arg,value",
    [(a, v) for a, vs in WRONG.items() for v in vs],
    ids=[f"{a}={v!r}"[:40] for a, vs in WRONG.items() for v in vs],
)
def test_a_wrong_argument_is_a_typed_error_naming_it(study_file, tmp_path, capsys, monkeypatch, arg, value):
    """Not Python's TypeError from deep inside (`expected str, bytes or os.PathLike object, not int`,
    `'>' not supported between instances of 'float' and 'str'`): the project's UsageError (or
    StudyFileError for an override), exit 2, naming the argument; nothing printed or written."""
    from study.errors import StudyError
    from study.tuning import runner

    def no_ray(*a, **k):
        raise AssertionError("a refused study started Ray")

    monkeypatch.setattr(runner, "init_ray", no_ray)
    kwargs = {"storage": str(tmp_path / "st"), arg: value}
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(StudyError) as info:
        study.run(kwargs.pop("file", study_file), **kwargs)
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2, repr(info.value)
    named = ("override",) if arg == "overrides" else (f"{arg}:", f"--{arg.replace('_', '-')}:")
    assert any(n in str(info.value) for n in named), str(info.value)
    assert capsys.readouterr().err == ""
    assert sorted(tmp_path.rglob("*")) == before
