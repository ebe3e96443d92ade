"""A `study export`, `study evaluate` or `study train` (re-run on the same --out) refused for its flags or for
what a checkpoint or export says is refused in one line, exit 2, before torch is imported and in well under a
second of CPU (issue 45, finding 2: 1.3-2.6 s and ~800 MB each when torch loaded the file first); the file is
read without torch from its zip directory and pickle, never running code the pickle names.  Every case runs
in a fork of one torch-free interpreter (tests/study/data/test_refusals_before_torch.py's RUNNER).  What only
the model's own state dict can tell (keys and shapes: docs/reliability.md) is refused after torch, by
tests/study/test_damaged_files.py."""

from __future__ import annotations

import collections
import copy
import functools
import io
import zipfile
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY
from tests.study.data.test_refusals_before_torch import outcomes_in_forks

#: the flags of the trained configuration (TINY) as `study train` takes them
TRAIN = [
    "--data",
    "synthetic:60",
    "--epochs",
    "1",
    "--batch-size",
    "20",
    "--hidden",
    "16",
    "--layers",
    "1",
    "--intermediate",
    "16",
    "--num-heads",
    "2",
    "--quiet",
]


@functools.cache
def _checkpoint() -> dict:
    """A checkpoint as study.trial.loop writes one, of the configuration TRAIN gives (the callers
    change copies).
    Its weights are a few of the model's tensors: every refusal here comes before they are compared with the
    model (building it costs 1.4 s CPU)."""
    from study.models import ModelConfig
    from study.trial import TrainConfig

    mc = ModelConfig(**TINY)
    cfg = TrainConfig(model=mc, data="synthetic:60", epochs=1, batch_size=20)
    weights = collections.OrderedDict(
        [
            ("embed.weight", torch.randn(16, 12)),
            ("embed.bias", torch.zeros(16)),
            ("blocks.0.attention_norm.weight", torch.ones(16)),
            ("classifier.weight", torch.randn(10, 16)),
        ]
    )
    return {
        "model": weights,
        "optimizer": {"state": {}, "param_groups": []},
        "epoch": 1,
        "best_test_acc": 0.1,
        "final_test_acc": 0.1,
        "device_seconds": 1.0,
        "attempts": 1,
        "rng_cpu": torch.get_rng_state(),
        "model_config": mc.to_dict(),
        "train_config": cfg.to_dict(),
    }


class Evil:
    def __reduce__(self):
        return (print, ("executed",))


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _zip_not_torch() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("readme.txt", "hello")
    return buf.getvalue()


def _damaged(kind: str) -> bytes:
    """A checkpoint (or an export: the same damage) damaged in the way ``kind`` names."""
    from study.models.trained import export_dict

    c = _checkpoint()
    if kind == "truncated":
        return _saved(c)[:-200]
    if kind == "zip-not-torch":
        return _zip_not_torch()
    if kind == "garbage":
        return b"x"
    if kind == "empty":
        return b""
    if kind == "code-in-pickle":
        return _saved({**c, "x": Evil()})
    if kind == "list":
        return _saved([1, 2, 3])
    if kind == "no-model-config":
        return _saved({k: v for k, v in c.items() if k != "model_config"})
    e = copy.deepcopy(export_dict(c, study="s", trial_id="t"))
    if kind == "huge-config":
        e["model_config"]["num_heads"] = 100_000
    elif kind == "unknown-config-field":
        e["model_config"]["bogus"] = 1
    elif kind == "config-not-dict":
        e["model_config"] = "sa"
    elif kind == "not-a-tensor":
        e["state_dict"][next(iter(e["state_dict"]))] = [1.0]
    elif kind == "state-not-dict":
        e["state_dict"] = [torch.zeros(1)]
    elif kind == "train-config-not-dict":
        e["train_config"] = 7
    elif kind == "seed-wrong-type":
        e["train_config"]["seed"] = "zero"
    elif kind == "no-data-named":
        e["train_config"].pop("data")
    elif kind == "data-named-missing":
        e["train_config"]["data"] = "/nowhere/data.tar"
    else:
        raise AssertionError(kind)
    return _saved(e)


#: damage -> what the refusal names (after the file's name)
DAMAGES = {
    "truncated": "damaged or truncated zip",
    "zip-not-torch": "without its data.pkl",
    "garbage": "not a zip archive",
    "empty": "an empty file",
    "code-in-pickle": "holds more than tensors",
    "list": "holds a list, not a dict",
    "no-model-config": "carries no model_config",
    "huge-config": "model_config.num_heads: must be <= 1024",
    "unknown-config-field": "model_config.bogus: unknown model field",
    "config-not-dict": "model_config: must be a dict",
    "not-a-tensor": "must be a tensor, got list",
    "state-not-dict": "state_dict: must be a dict of tensors",
    "train-config-not-dict": "train_config: must be a dict",
    "seed-wrong-type": "train_config.seed: must be int",
}
#: the same reading of a trial's checkpoints in a study folder: one case of each kind of damage
CHECKPOINT_DAMAGES = {
    "truncated": DAMAGES["truncated"],
    "code-in-pickle": DAMAGES["code-in-pickle"],
    "list": "not a checkpoint of this project",
    "no-model-config": DAMAGES["no-model-config"],
    "not-a-tensor": DAMAGES["not-a-tensor"],
}
#: one case of each kind of damage to an export (each reader's refusal)
EXPORT_DAMAGES = [
    "truncated",
    "zip-not-torch",
    "garbage",
    "empty",
    "code-in-pickle",
    "list",
    "no-model-config",
    "huge-config",
    "unknown-config-field",
    "config-not-dict",
    "not-a-tensor",
    "state-not-dict",
    "train-config-not-dict",
    "seed-wrong-type",
]

#: id -> (argv after `study`, what the one line names); {x} are paths in the case's folder, `s` a study whose
#: trial c000-s000 holds the checkpoint files the case puts there, `o` a `study train --out` folder of TRAIN
CASES = {
    **{f"evaluate-{k}": (["evaluate", "m.pt", "--data", "synthetic:60"], DAMAGES[k]) for k in EXPORT_DAMAGES},
    "evaluate-no-data-named": (
        ["evaluate", "m.pt"],
        "--data: required (the export does not name its training",
    ),
    "evaluate-data-named-missing": (
        ["evaluate", "m.pt"],
        "train_config.data: /nowhere/data.tar: no such file",
    ),
    "evaluate-device-misspelt": (
        ["evaluate", "m.pt", "--device", "gpu"],
        "--device: only cuda, cuda:N and cpu",
    ),
    "evaluate-folder": (["evaluate", "s"], "s: not a file"),
    **{
        f"export-{k}": (
            ["export", "s", "--trial", "c000-s000", "--out", "x.pt"],
            "trial c000-s000: no intact "
            "checkpoint of trial c000-s000 (checkpoint {cwd}/s/trials/c000-s000/checkpoint.pt (",
        )
        for k in CHECKPOINT_DAMAGES
    },
    "export-latest-damaged-previous-foreign": (
        ["export", "s", "--trial", "c000-s000"],
        "is damaged and no earlier checkpoint is intact",
    ),
    "export-unknown-trial": (
        ["export", "s", "--trial", "c009-s000"],
        "--trial: no checkpoint of trial 'c009-s000'",
    ),
    "export-no-checkpoint": (["export", "s"], "has no trial checkpoint"),
    "export-out-a-folder": (["export", "s", "--out", "s"], "--out: s is a directory"),
    "export-no-study": (["export", "nothere"], "no study 'nothere'"),
    "train-rerun-other-heads": (
        ["train", *TRAIN[:-2], "4", "--quiet", "--out", "o"],
        "o/checkpoint holds a checkpoint of another configuration (num_heads: 2 -> 4)",
    ),
    "train-rerun-both-damaged": (
        ["train", *TRAIN, "--out", "o"],
        "o/checkpoint/checkpoint.pt (UnreadableFile: a damaged or truncated zip archive",
    ),
}


def _prepare(cwd: Path, case: str, files: dict[str, bytes]) -> None:
    """The files of ``case`` in ``cwd``: m.pt (evaluate), the study s (export), the --out folder o (train)."""
    command, _, kind = case.partition("-")
    trial = cwd / "s" / "trials" / "c000-s000"
    (cwd / "s" / "tables").mkdir(parents=True)
    (cwd / "s" / "study.json").write_text("{}")
    if command == "evaluate":
        (cwd / "m.pt").write_bytes(files[kind] if kind in files else files["good-export"])
    elif command == "export" and kind in CHECKPOINT_DAMAGES:
        trial.mkdir(parents=True)
        for name in ("checkpoint.pt", "checkpoint.prev.pt"):
            (trial / name).write_bytes(files[kind])
    elif command == "export" and kind != "no-checkpoint":
        trial.mkdir(parents=True)
        (trial / "checkpoint.pt").write_bytes(files["truncated"])
        (trial / "checkpoint.prev.pt").write_bytes(
            files["good"] if kind != "latest-damaged-previous-foreign" else files["code-in-pickle"]
        )
    elif command == "train":
        (cwd / "o" / "checkpoint").mkdir(parents=True)
        for name in ("checkpoint.pt", "checkpoint.prev.pt"):
            damaged = kind == "rerun-both-damaged"
            (cwd / "o" / "checkpoint" / name).write_bytes(files["truncated" if damaged else "good"])


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    from study.models.trained import export_dict

    base = tmp_path_factory.mktemp("checkpoint-refusals")
    files = {
        k: _damaged(k) for k in {*EXPORT_DAMAGES, *CHECKPOINT_DAMAGES, "no-data-named", "data-named-missing"}
    }
    files["good"] = _saved(_checkpoint())
    files["good-export"] = _saved(export_dict(_checkpoint(), study="s", trial_id="t"))
    cases = []
    for case, (argv, _) in CASES.items():
        cwd = base / case
        cwd.mkdir()
        _prepare(cwd, case, files)
        cases.append({"id": case, "cwd": str(cwd), "cache": str(cwd / "cache"), "argv": argv})
    return outcomes_in_forks(cases, base=base)


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_checkpoint_export_or_rerun_is_one_line_before_torch(outcomes, case):
    o = outcomes[case]
    lines = o["stderr"].splitlines()
    command = CASES[case][0][0]
    assert o["code"] == 2 and len(lines) == 1 and lines[0].startswith(f"study {command}: error: "), o
    assert CASES[case][1].format(cwd=o["cwd"]) in lines[0], lines[0]
    assert not case.startswith("evaluate-") or case[9:] not in DAMAGES or "m.pt: " in lines[0], lines[0]
    assert "executed" not in o["stderr"]
    assert o["torch"] is False, o
    assert o["cpu"] < 1.0, o
    assert not (o["cwd"] / "x.pt").exists()


def test_what_a_checkpoint_says_without_torch_is_what_torch_loads(tmp_path):
    """read_head (no torch) gives the structure and values torch.load(weights_only=True) gives, every
    tensor as its storage type and shape: nothing a refusal reads from it differs from the file."""
    from study.trial.checkpoint import TensorHead, read_head

    state = copy.deepcopy(_checkpoint())
    state["model"]["tied"] = state["model"]["embed.weight"][:2]  # a view: a storage shared, an offset
    state["half"] = torch.zeros(3, dtype=torch.bfloat16)
    state["layer"] = torch.nn.Linear(3, 2).state_dict()  # a module's: its _metadata set by the pickle (BUILD)
    state["parameter"] = torch.nn.Parameter(torch.ones(2))
    state["misc"] = {"set": {1, 2}, "bytes": b"\x00\xff", "complex": 1 + 2j, "tuple": (1, "a")}

    def same(head, value, where="") -> None:
        if isinstance(value, torch.Tensor):
            assert isinstance(head, TensorHead) and head.shape == tuple(value.shape), where
        elif isinstance(value, dict):
            assert type(head) is type(value) and list(head) == list(value), where
            for k in value:
                same(head[k], value[k], f"{where}.{k}")
        elif isinstance(value, (list, tuple)):
            assert type(head) is type(value) and len(head) == len(value), where
            for i, (h, v) in enumerate(zip(head, value)):
                same(h, v, f"{where}[{i}]")
        else:
            assert head == value or (head != head and value != value), (where, head, value)

    path = tmp_path / "c.pt"
    torch.save(state, path)
    with open(path, "rb") as f:
        same(read_head(f), torch.load(path, weights_only=True))
