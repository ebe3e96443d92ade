"""Every file a command reads is an input; every size flag is bounded (issue 26).

- The metadata files of a study (``study.json``, ``trials/*.json`` / ``trial.json``
  ledgers, a trial's ``checkpoint.pt``) damaged in every way a disk, a careless copy or a
  hostile user manages: ``study status`` says which file in one line (exit 2),
  ``study list`` still lists the good studies and names the broken one (exit 2), and
  nothing blocks on a FIFO or reads ``/dev/zero`` forever.
- A folder that is not a study is said to be one, not "0 trials recorded".
- ``study train --out DIR/.hidden`` never writes table parts the readers skip.
- ``study export``/``evaluate`` on crafted or damaged checkpoints and exports: one
  line, exit 2; export falls back to the previous checkpoint with a warning.
- Every integer flag of every command has a documented bound (the parsers are
  enumerated: a new flag without one fails here).
- Refusing a flag or a data source happens before torch is imported.
- A JPEG its decoder complains about is refused, naming the file.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from study import limits
from study.cli import main
from study.cliutil import local_path
from tests.data_helpers import make_tar, make_tree
from tests.helpers import REPO_ROOT, TINY, cli_env

REPO = REPO_ROOT


def _cli(*args, cwd=None, timeout: float = 900) -> subprocess.CompletedProcess:
    """``python -m study ARGS`` with a time-out: a command that blocks on a FIFO fails here."""
    return subprocess.run(
        [sys.executable, "-m", "study", *map(str, args)],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_error(r: subprocess.CompletedProcess, prog: str, needle: str) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), lines
    assert "Traceback" not in r.stderr and needle in lines[0], lines[0]
    return lines[0]


def _in_process(argv: list[str], capsys) -> tuple[int, list[str], str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, err.strip().splitlines(), out


# --------------------------------------------------------------------------- metadata files
GOOD_META = {
    "name": "good",
    "file": "good.yaml",
    "raw": {"name": "good"},
    "num_trials": 3,
    "cpus_per_trial": 1,
    "gpus_per_trial": 0,
    "workers_per_trial": 1,
    "max_failures": 0,
    "selection_metric": None,
    "optuna_journal": "optuna.journal",
    "tables": "tables",
    "ddp_storage": "ddp",
}


def _damage(path: Path, how: str) -> str:
    """Put ``how`` where the metadata file ``path`` should be; returns the expected words."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "truncated":
        path.write_text('{"name": "bad", ')
        return "not valid JSON"
    if how == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
        return f"nested deeper than {limits.MAX_META_DEPTH} levels"
    if how == "huge":
        with open(path, "wb") as f:  # sparse: costs no disk
            f.truncate(limits.MAX_META_FILE_BYTES + 1)
        return "MAX_META_FILE_BYTES"
    if how == "fifo":
        os.mkfifo(path)
        return "is a FIFO, not a regular file"
    if how == "dev_zero":
        path.symlink_to("/dev/zero")
        return "is a character device, not a regular file"
    if how == "folder":
        path.mkdir()
        return "is a folder, not a regular file"
    if how == "list":
        path.write_text("[1, 2, 3]")
        return "holds a JSON list, not an object"
    if how == "wrong_type":
        path.write_text(json.dumps({**GOOD_META, "num_trials": "three"}))
        return 'num_trials: must be an integer, got "three"'
    if how == "bool_for_int":
        path.write_text(json.dumps({**GOOD_META, "num_trials": True}))
        return "num_trials: must be an integer, got true"
    if how == "binary":
        path.write_bytes(b"\xff\xfe\x00garbage")
        return "not UTF-8 text"
    if how == "long_integer":
        path.write_text('{"num_trials": ' + "9" * 5000 + "}")
        return "not valid JSON"
    if how == "dangling_symlink":
        path.symlink_to(path.parent / "nowhere.json")
        return ""
    raise AssertionError(how)


DAMAGES = [
    "truncated",
    "deep",
    "huge",
    "fifo",
    "dev_zero",
    "folder",
    "list",
    "wrong_type",
    "bool_for_int",
    "binary",
    "long_integer",
]


def _good_study(root: Path) -> Path:
    (root / "tables").mkdir(parents=True)
    (root / "study.json").write_text(json.dumps(GOOD_META))
    return root


@pytest.mark.parametrize("how", DAMAGES)
def test_status_names_a_damaged_study_json(tmp_path, how):
    storage = tmp_path / "st"
    _good_study(storage / "bad")
    (storage / "bad" / "study.json").unlink()
    needle = _damage(storage / "bad" / "study.json", how)
    r = _cli("status", "bad", "--storage", storage)
    line = _one_error(r, "study status", needle)
    assert f"{storage / 'bad' / 'study.json'}: " in line
    # the same file reached as a path, and by study resume (before Ray starts)
    _one_error(_cli("status", storage / "bad"), "study status", needle)
    _one_error(_cli("resume", "bad", "--storage", storage), "study resume", needle)


def test_list_marks_broken_studies_and_lists_the_others(tmp_path):
    storage = tmp_path / "st"
    _good_study(storage / "good")
    expected = {}
    for how in DAMAGES:
        (storage / how).mkdir(parents=True)
        expected[how] = _damage(storage / how / "study.json", how)
    (storage / "not-a-study").mkdir()  # no study.json: not listed at all
    r = _cli("list", "--storage", storage)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    rows = {ln.split()[0]: ln for ln in r.stdout.strip().splitlines()[1:]}
    assert set(rows) == {"good", *DAMAGES}, r.stdout
    assert "0/3" in rows["good"] and "broken" not in rows["good"]
    errors = r.stderr.strip().splitlines()
    assert len(errors) == len(DAMAGES), errors
    for how, needle in expected.items():
        assert "broken: study.json" in rows[how], rows[how]
        mine = [e for e in errors if f"/{how}/study.json: " in e]
        assert len(mine) == 1 and mine[0].startswith("study list: error: ") and needle in mine[0], (
            how,
            errors,
        )


def test_status_reads_no_torch_and_a_good_study_still_answers(tmp_path):
    storage = tmp_path / "st"
    _good_study(storage / "good")
    _good_study(storage / "bad")
    _damage(storage / "bad" / "study.json.tmp", "fifo")  # a foreign file beside it is never read
    (storage / "bad" / "study.json").write_text('{"name": "bad", ')
    probe = (
        "import sys\nfrom study.cli import main\n"
        "for argv in (['status', 'good'], ['status', 'bad'], ['list']):\n"
        "    try:\n        main([*argv, '--storage', sys.argv[1]])\n    except SystemExit:\n        pass\n"
        "print('torch' in sys.modules)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe, str(storage)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.stdout.strip().splitlines()[-1] == "False", r.stdout + r.stderr
    assert "0 trials recorded of 3 planned" in r.stdout


@pytest.mark.parametrize("how", ["fifo", "dev_zero", "folder", "truncated"])
def test_damaged_table_parts_never_block_status(tmp_path, how):
    storage = tmp_path / "st"
    _good_study(storage / "s")
    runs = storage / "s" / "tables" / "runs"
    runs.mkdir()
    _damage(runs / "c000-s000.parquet", how)
    heads = storage / "s" / "tables" / "heads" / "c000-s000"
    heads.mkdir(parents=True)
    _damage(heads / "00000.parquet", how)
    r = _cli("status", "s", "--storage", storage, timeout=900)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "0 trials recorded of 3 planned" in r.stdout


@pytest.mark.parametrize("command", [["status", "s"], ["list"]])
def test_a_folder_link_out_of_the_study_is_one_line_in_study_commands(tmp_path, command):
    """``tables/epochs/zz -> /etc``: the study commands refuse it as the analysis commands
    do (one line, exit 2), never a traceback and never a walk of /etc; a link to a file
    is a damaged part (``test_damaged_table_parts_never_block_status[dev_zero]``)."""
    storage = tmp_path / "st"
    _good_study(storage / "s")
    (storage / "s" / "tables" / "epochs").mkdir()
    (storage / "s" / "tables" / "epochs" / "zz").symlink_to("/etc")
    r = _cli(*command, "--storage", storage, timeout=300)
    _one_error(r, f"study {command[0]}", "tables/epochs/zz: a link out of the study (to /etc)")


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_ledger_is_named_not_reset(tmp_path, how):
    """A trial's attempt ledger read by a trial (TrialLedger) and by `study train`."""
    from study.results.metafile import MetaFileError
    from study.trial.ledger import TrialLedger

    path = tmp_path / "trials" / "c000-s000.json"
    needle = _damage(path, how)
    if how == "wrong_type":  # GOOD_META has no ledger fields: make it wrong for a ledger
        path.write_text('{"attempts": "three"}')
        needle = 'attempts: must be an integer, got "three"'
    elif how == "bool_for_int":
        path.write_text('{"attempts": true}')
        needle = "attempts: must be an integer, got true"
    with pytest.raises(MetaFileError, match="c000-s000.json: ") as info:
        TrialLedger(uri=str(path)).start()
    assert needle in str(info.value)
    assert TrialLedger(uri=str(tmp_path / "none.json")).read() == {}  # a missing ledger is a first attempt


def test_study_train_refuses_a_damaged_ledger_in_out(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    _damage(out / "trial.json", "fifo")
    code, lines, _ = _in_process(["train", "--data", "synthetic:60", "--out", str(out), "--quiet"], capsys)
    assert code == 2 and len(lines) == 1 and f"--out: {out / 'trial.json'}: is a FIFO" in lines[0], lines
    assert sorted(p.name for p in out.iterdir()) == ["trial.json"]


@pytest.mark.parametrize("how", ["fifo", "dev_zero", "folder", "huge"])
def test_a_checkpoint_that_is_not_a_checkpoint_file_is_one_line_never_a_hang(tmp_path, how):
    """What sits at ``trials/<key>/checkpoint.pt`` is an input: a FIFO or a device is
    never opened, a folder or a file of zeros is refused; each is named in one line."""
    from study.models.trained import ExportError
    from study.tuning.checkpoints import find_checkpoints, latest_checkpoint

    _damage(tmp_path / "trials" / "c000-s000" / "checkpoint.pt", how)
    assert find_checkpoints(str(tmp_path)) == (["c000-s000"] if how == "huge" else [])
    with pytest.raises(ExportError) as e:
        latest_checkpoint(str(tmp_path), "c000-s000")
    assert str(tmp_path / "trials" / "c000-s000" / "checkpoint.pt") in str(e.value) and "\n" not in str(
        e.value
    )
    assert ("not a regular file" in str(e.value)) == (how != "huge"), e.value


# --------------------------------------------------------------------------- not a study
def test_status_of_a_folder_that_is_not_a_study(tmp_path, monkeypatch):
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "file.txt").write_text("x")
    line = _one_error(_cli("status", d), "study status", "is not a study")
    assert str(d) in line and "0 trials" not in line
    # a bare name that is a folder here (and no study of the storage)
    _one_error(
        _cli("status", "d", "--storage", tmp_path / "empty", cwd=tmp_path), "study status", "is not a study"
    )
    # a study's folder under the storage without its study.json
    (tmp_path / "st" / "half").mkdir(parents=True)
    (tmp_path / "st" / "half" / "tables").mkdir()
    _one_error(_cli("status", "half", "--storage", tmp_path / "st"), "study status", "is not a study")
    _one_error(_cli("resume", "half", "--storage", tmp_path / "st"), "study resume", "is not a study")


# --------------------------------------------------------------------------- trial ids the readers skip
def test_hidden_out_folder_gets_a_trial_id_the_readers_see(tmp_path, capsys):
    from analysis.cli import main as analysis_main

    out = tmp_path / ".hidden_out"
    tiny = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    code, lines, _ = _in_process(
        [
            "train",
            *tiny,
            "--data",
            "synthetic:60",
            "--epochs",
            "1",
            "--batch-size",
            "20",
            "--quiet",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, lines
    assert sorted(p.name for p in (out / "tables" / "runs").iterdir()) == ["hidden_out.parquet"]
    assert analysis_main(["query", str(out), "SELECT trial_id FROM runs", "--format", "csv"]) == 0
    assert capsys.readouterr().out.split() == ["trial_id", "hidden_out"]


@pytest.mark.parametrize(
    "name, trial_id",
    [("_private", "private"), ("my run (2)", "my-run-2-"), ("..x", "x"), ("ok.name-1", "ok.name-1")],
)
def test_trial_id_derived_from_any_out_folder_is_readable(tmp_path, name, trial_id):
    from study.commands.train import _TRIAL_ID, derive_trial_id
    from study.results.tables import SKIPPED_PREFIXES

    got = derive_trial_id(tmp_path / name)
    assert got == trial_id and _TRIAL_ID.fullmatch(got) and not got.startswith(SKIPPED_PREFIXES)
    assert _TRIAL_ID.fullmatch(derive_trial_id(tmp_path / "...")) is not None  # nothing left: a random id


@pytest.mark.parametrize("trial_id", ["_x", ".x"])
def test_explicit_trial_ids_the_readers_skip_are_refused(tmp_path, capsys, trial_id):
    code, lines, _ = _in_process(
        ["train", "--data", "synthetic:60", "--trial-id", trial_id, "--out", str(tmp_path / "o")], capsys
    )
    assert code == 2 and len(lines) == 1 and "not starting with '.' or '_'" in lines[0], lines
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- export / evaluate
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny trained trial's two checkpoints (epochs 1 and 2)."""
    from study.models import ModelConfig
    from study.trial import TrainConfig, train_trial

    root = tmp_path_factory.mktemp("study")
    mc = ModelConfig(**TINY)
    cfg = TrainConfig(model=mc, data="synthetic:60", epochs=2, batch_size=20, head_images=4, seed=1)
    train_trial(cfg, trial_id="t", checkpoint_dir=root / "ckpt")
    from study.trial.checkpoint import load_checkpoint

    latest = load_checkpoint(root / "ckpt")
    previous = torch.load(root / "ckpt" / "checkpoint.prev.pt", weights_only=True)
    assert (latest["epoch"], previous["epoch"]) == (2, 1)
    return {"latest": latest, "previous": previous}


def _study_with(tmp_path: Path, trained, *, damage_latest=None, damage_previous=None) -> Path:
    """A study folder holding trial c000-s000's checkpoints as a study stores them."""
    root = tmp_path / "s"
    trial = root / "trials" / "c000-s000"
    trial.mkdir(parents=True)
    for name, which, damage in (
        ("checkpoint.prev.pt", "previous", damage_previous),
        ("checkpoint.pt", "latest", damage_latest),
    ):
        torch.save(trained[which], trial / name)
        if damage:
            damage(trial / name)
    return root


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _wrong_shape(path: Path) -> None:
    state = torch.load(path, weights_only=True)
    key = next(k for k, v in state["model"].items() if v.ndim == 2)
    state["model"][key] = torch.zeros(3, 3)
    torch.save(state, path)


def test_export_falls_back_to_the_previous_checkpoint(tmp_path, trained, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = _study_with(tmp_path, trained, damage_latest=_truncate)
    code, lines, out = _in_process(["export", str(root), "--trial", "c000-s000", "--out", "m.pt"], capsys)
    assert code == 0, lines
    assert len(lines) == 1 and lines[0].startswith("study export: warning: checkpoint "), lines
    assert "c000-s000/checkpoint.pt (" in lines[0] and "c000-s000/checkpoint.prev.pt (epoch 1)" in lines[0], (
        lines
    )
    assert "1 epochs" in out and torch.load(tmp_path / "m.pt", weights_only=True)["epoch"] == 1


@pytest.mark.parametrize("damage", [_truncate, _wrong_shape], ids=["truncated", "wrong_shape"])
def test_export_without_an_intact_checkpoint_is_one_line(tmp_path, trained, capsys, monkeypatch, damage):
    monkeypatch.chdir(tmp_path)
    root = _study_with(tmp_path, trained, damage_latest=damage, damage_previous=damage)
    code, lines, _ = _in_process(["export", str(root), "--out", "m.pt"], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("study export: error: trial c000-s000: no intact checkpoint"), lines[0]
    assert not (tmp_path / "m.pt").exists()


def _export_of(trained) -> dict:
    from study.models.trained import export_dict

    return copy.deepcopy(export_dict(trained["latest"], study="s", trial_id="t"))  # the cases change it


def _crafted(kind: str, trained, path: Path) -> str:
    """Write a crafted or damaged export to ``path``; returns the expected words."""
    e = _export_of(trained)
    if kind == "truncated":
        buf = io.BytesIO()
        torch.save(e, buf)
        path.write_bytes(buf.getvalue()[:-200])
        return "not a model export"
    if kind == "zip_not_torch":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("readme.txt", "hello")
        return "not a model export"
    if kind == "non_dict":
        torch.save([1, 2, 3], path)
        return "not a model export (holds a list, not a dict)"
    if kind == "huge_config":
        e["model_config"]["num_heads"] = 100_000
        torch.save(e, path)
        return "model_config.num_heads: must be <= 1024 (MAX_MODEL_FIELD)"
    if kind == "unknown_config_field":
        e["model_config"]["bogus"] = 1
        torch.save(e, path)
        return "model_config.bogus: unknown model field"
    if kind == "config_not_dict":
        e["model_config"] = "sa"
        torch.save(e, path)
        return "model_config: must be a dict"
    if kind == "missing_key":
        e["state_dict"].pop(next(iter(e["state_dict"])))
        torch.save(e, path)
        return "state_dict: missing "
    if kind == "extra_key":
        e["state_dict"]["evil.weight"] = torch.zeros(1)
        torch.save(e, path)
        return "state_dict: unexpected 'evil.weight'"
    if kind == "wrong_shape":
        key = next(k for k, v in e["state_dict"].items() if v.ndim == 2)
        e["state_dict"][key] = torch.zeros(5, 7)
        torch.save(e, path)
        return f"state_dict.{key}: shape (5, 7), the model needs"
    if kind == "not_a_tensor":
        key = next(iter(e["state_dict"]))
        e["state_dict"][key] = [1.0]
        torch.save(e, path)
        return f"state_dict.{key}: must be a tensor"
    if kind == "state_not_dict":
        e["state_dict"] = [torch.zeros(1)]
        torch.save(e, path)
        return "state_dict: must be a dict of tensors"
    if kind == "train_config_not_dict":
        e["train_config"] = 7
        torch.save(e, path)
        return "train_config: must be a dict"
    if kind == "seed_wrong_type":
        e["train_config"]["seed"] = "zero"
        torch.save(e, path)
        return "train_config.seed: must be int"
    raise AssertionError(kind)


CRAFTED = [
    "truncated",
    "zip_not_torch",
    "non_dict",
    "huge_config",
    "unknown_config_field",
    "config_not_dict",
    "missing_key",
    "extra_key",
    "wrong_shape",
    "not_a_tensor",
    "state_not_dict",
    "train_config_not_dict",
    "seed_wrong_type",
]


@pytest.mark.parametrize("kind", CRAFTED)
def test_evaluate_refuses_crafted_exports(tmp_path, trained, capsys, kind):
    path = tmp_path / "m.pt"
    needle = _crafted(kind, trained, path)
    code, lines, _ = _in_process(["evaluate", str(path), "--data", "synthetic:60"], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"study evaluate: error: {path}: ") and needle in lines[0], lines[0]
    assert len(lines[0]) < 300


def test_evaluate_of_an_intact_export_still_works(tmp_path, trained, capsys):
    path = tmp_path / "m.pt"
    torch.save(_export_of(trained), path)
    code, lines, out = _in_process(["evaluate", str(path), "--data", "synthetic:60"], capsys)
    assert code == 0 and "accuracy " in out, lines


# --------------------------------------------------------------------------- size flags
def _parsers():
    """(command, parser) of every `study` and `analysis` subcommand."""
    from analysis.cli import build_parser as analysis_parser
    from study.cli import build_parser as study_parser

    for prog, parser in (("study", study_parser()), ("analysis", analysis_parser())):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield f"{prog} {name}", sub


#: argparse types that parse no integer (a float, a path, a string)
NOT_INTEGER = {
    float,
    str,
    Path,
    local_path,
}  # (study.cliutil.BoundedFloat refuses the too-large integer below by its bound)


def test_every_integer_flag_of_every_command_has_a_documented_bound():
    from study.cliutil import BoundedInt

    seen = 0
    for command, parser in _parsers():
        for action in parser._actions:
            where = f"{command} {'/'.join(action.option_strings) or action.dest}"
            assert action.type is not int, f"{where}: type=int has no bound; use study.cliutil.BoundedInt"
            if action.type is None:
                assert not (
                    isinstance(action.default, int)
                    and not isinstance(action.default, bool)
                    and action.nargs != 0
                    and not isinstance(action, argparse._StoreConstAction)
                ), f"{where}: an integer default without a bounded type"
                continue
            if action.type in NOT_INTEGER:
                continue
            # anything else parses integers: it must refuse one too large for any limit
            with pytest.raises(argparse.ArgumentTypeError):
                action.type("1" + "0" * 30)
            if isinstance(action.type, BoundedInt):
                seen += 1
                name = action.type.limit.split("[")[0].split()[0]
                assert name in limits.ALL, (
                    f"{where}: bound named {action.type.limit!r}, not a study.limits constant"
                )
                value = limits.ALL[name]
                assert action.type.high in (
                    value.values() if isinstance(value, dict) else (value, value - 1)
                ) or (name == "MAX_MODEL_FIELD" and action.type.high**2 <= value["num_heads"]), where
                with pytest.raises(argparse.ArgumentTypeError, match=f"must be <= {action.type.high} "):
                    action.type(str(action.type.high + 1))
                assert action.type(str(action.type.high)) == action.type.high
    assert seen >= 20, (
        seen
    )  # the enumeration found the flags (models, train, bench, theorem, evaluate, analysis)


def _refused_without_torch(argv: list[str], cwd) -> list[str]:
    """Run ``study ARGV`` in a fresh interpreter: it must exit 2 without having imported
    torch; returns its stderr lines."""
    probe = (
        "import sys\nfrom study.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
        "except SystemExit as e:\n    code = e.code\nprint(code, 'torch' in sys.modules)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        env=cli_env(),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=900,
    )
    assert r.stdout.split() == ["2", "False"], (r.stdout, r.stderr[-2000:])
    return r.stderr.strip().splitlines()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            ["models", "--num-heads", "100000"],
            "argument --num-heads: must be <= 1024 (MAX_MODEL_FIELD), got 100000",
        ),
        (["models", "--pos-dim", "9" * 200], "argument --pos-dim: must be <= 16384 (MAX_MODEL_FIELD)"),
        (["theorem", "--kernel", "33"], "argument --kernel: must be <= 32"),
        (["theorem", "--in", "100000"], "argument --in: must be <= 16384 (MAX_MODEL_FIELD)"),
        (["theorem", "--kernel", "31", "--size", "1024"], "(MAX_THEOREM_ELEMENTS)"),
        (["theorem", "--kernel", "3", "--in", "16384", "--out", "16384"], "(MAX_THEOREM_"),
        (
            ["theorem", "--kernel", "1", "--in", "16384", "--out", "16384", "--size", "64"],
            "(MAX_THEOREM_MACS)",
        ),
        (["bench", "--batch", "100000000"], "argument --batch: must be <= 4096 (MAX_BENCH_BATCH)"),
        (["bench", "--steps", "10000000000"], "argument --steps: must be <= 100000 (MAX_BENCH_STEPS)"),
        (["bench", "--repeats", "0"], "argument --repeats: must be >= 1, got 0"),
        (["bench", "--threads", "5000"], "argument --threads: must be <= 1024 (MAX_CPUS_PER_TRIAL)"),
        (["bench", "--device", "tpu"], "--device: only cuda, cuda:N and cpu are supported"),
        (
            ["evaluate", "m.pt", "--subset", "99999999999"],
            "argument --subset: must be <= 10000000 (MAX_SUBSET)",
        ),
        (
            ["evaluate", "m.pt", "--batch-size", "10000000"],
            "argument --batch-size: must be <= 100000 (MAX_EVAL_BATCH)",
        ),
        (["train", "--subset", "99999999999"], "argument --subset: must be <= 10000000 (MAX_SUBSET)"),
        (["train", "--validation", "99999999999"], "--validation"),
        (
            ["validate", "x.yaml", "--cpus", "99999999999"],
            "argument --cpus: must be <= 1000000 (MAX_CLUSTER_CPUS)",
        ),
        (["run", "x.yaml", "--num-cpus", "99999999999"], "argument --num-cpus: must be <= 1000000"),
    ],
    ids=lambda v: "-".join(v[:3]) if isinstance(v, list) else None,
)
def test_size_flags_are_refused_before_anything_is_built(argv, needle, tmp_path):
    lines = _refused_without_torch(argv, tmp_path)
    assert len(lines) == 1 and lines[0].startswith(f"study {argv[0]}: error: ") and needle in lines[0], lines


@pytest.mark.parametrize(
    "argv",
    [
        ["--hidden", "16384", "--layers", "256", "--intermediate", "65536"],
        ["--hidden", "16384", "--num-heads", "1024", "--layers", "8"],
    ],
)
def test_models_too_big_as_a_whole_are_counted_not_allocated(argv, capsys):
    code, lines, _ = _in_process(["models", *argv], capsys)
    assert code == 2 and len(lines) == 1 and "(MAX_MODEL_PARAMS)" in lines[0], lines


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["figures", "s", "--epoch", "99999999999"], "argument --epoch: must be <= 99999 (MAX_EPOCHS)"),
        (["report", "s", "--port", "70000"], "argument --port: must be <= 65535 (MAX_PORT)"),
    ],
)
def test_analysis_size_flags(argv, needle, capsys):
    from analysis.cli import main as analysis_main

    try:
        code = analysis_main(argv)
    except SystemExit as e:
        code = e.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines


# --------------------------------------------------------------------------- cheap refusals
@pytest.mark.parametrize(
    "argv, needle",
    [
        (["train", "--batch-size", "0", "--out", "o"], "--batch-size: must be >= 1"),
        (["train", "--data", "nope.tar.gz", "--out", "o"], "--data: nope.tar.gz: no such file or directory"),
        (["train", "--data", "synthetic:0", "--out", "o"], "--data: synthetic:N needs 1 <= N"),
        (["train", "--data", "ftp:x", "--out", "o"], "unknown data source kind 'ftp'"),
        (["train", "--data", "{fifo}", "--out", "o"], "is not a folder or a regular file"),
        (["train", "--data", "cifar10:{missing}", "--out", "o"], "is not a folder"),
        (["train", "--lr", "inf", "--out", "o"], "--lr: must be a finite"),
        (["evaluate", "missing.pt"], "missing.pt: no such file"),
        (["evaluate", "{fifo}"], "not a file"),
        (["evaluate", "{file}", "--data", "nope"], "--data: nope: no such file or directory"),
        (["evaluate", "{file}", "--device", "quantum"], "--device: only cuda, cuda:N and cpu"),
        (["bench", "--device", "tpu"], "--device"),
        (["bench", "--amp", "--dtype", "float32"], "--amp/--no-amp"),
        (["bench", "--peak-tflops", "inf"], "--peak-tflops"),
        (["bench", "--models", "vgg"], "--models: unknown target 'vgg'"),
    ],
    ids=lambda v: "-".join(v[:3]) if isinstance(v, list) else None,
)
def test_refusals_come_before_torch(argv, needle, tmp_path):
    """Refusing a flag or a cheap property of a data source costs no torch import (it
    cost 1.8-1.9 s CPU before; `study train --help` costs 0.24 s)."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file.pt").write_bytes(b"x")
    argv = [
        a.format(fifo=tmp_path / "fifo", file=tmp_path / "file.pt", missing=tmp_path / "missing")
        for a in argv
    ]
    lines = _refused_without_torch(argv, tmp_path)
    assert len(lines) == 1 and needle in lines[0], lines
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- JPEG decoders' complaints
def _jpeg_tree(root: Path, damage) -> Path:
    make_tree(root, classes=("cat", "dog"), n_train=5, n_test=2, ext="jpg")
    path = root / "train" / "dog" / "03.jpg"
    path.write_bytes(damage(path.read_bytes()))
    return root


DAMAGED_JPEGS = {
    "extraneous_before_eoi": (
        lambda b: b[:-2] + b"\x00\x11\x22\x33" + b[-2:],
        ("damaged image, its decoder reports: Corrupt JPEG data: ", "extraneous bytes before marker 0xd9"),
    ),
    # cut short: libjpeg's batch decoder fails, the file-by-file fallback (PIL) names it truncated
    "premature_end": (lambda b: b[: len(b) * 2 // 3], ("truncated",)),
}


@pytest.mark.parametrize("kind", list(DAMAGED_JPEGS))
@pytest.mark.parametrize("as_archive", [False, True], ids=["tree", "archive"])
def test_a_jpeg_its_decoder_complains_about_is_refused_by_name(
    tmp_path, capfd, monkeypatch, kind, as_archive
):
    monkeypatch.setenv("STUDY_CACHE_DIR", str(tmp_path / "cache"))
    damage, words = DAMAGED_JPEGS[kind]
    source = _jpeg_tree(tmp_path / "tree", damage)
    if as_archive:
        source = make_tar(source, tmp_path / "tree.tar.gz")
    capfd.readouterr()
    try:
        # a batch the 10 training images hold: a damage only the decoder sees is refused at the decode,
        # after the size checks (study train checks what it can before torch, the decode comes last)
        code = main(
            ["train", "--data", str(source), "--out", str(tmp_path / "o"), "--quiet", "--batch-size", "5"]
        )
    except SystemExit as e:
        code = e.code
    err = capfd.readouterr().err  # descriptor 2 itself: no raw decoder line may reach it
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"study train: error: --data: {source}: train/dog/03.jpg: "), lines[0]
    assert all(w in lines[0] for w in words), lines[0]
    assert not (tmp_path / "o").exists()
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_clean_jpegs_decode_silently(tmp_path, capfd):
    from study.data.imagefolder import load_image_folder

    source = _jpeg_tree(tmp_path / "tree", lambda b: b)
    capfd.readouterr()
    data = load_image_folder(source, cache_dir=tmp_path / "cache")
    assert data.train_images.shape == (10, 3, 32, 32)
    assert capfd.readouterr().err == ""
