"""Checkpoints carry their model configuration; an export rebuilds the model for every
encoding, and `study evaluate` reproduces the trial's final test accuracy."""

import re

import pytest
import torch

from study.cli import main
from study.models import ModelConfig, load_trained
from study.models.trained import export_dict
from study.trial import TrainConfig, train_trial
from study.trial.checkpoint import load_checkpoint
from tests.conftest import VARIANT_IDS, VARIANTS


@pytest.mark.parametrize("encoding,isotropic", VARIANTS, ids=VARIANT_IDS)
def test_export_round_trip_every_encoding(tmp_path, capsys, encoding, isotropic):
    mc = ModelConfig(
        encoding=encoding,
        isotropic=isotropic,
        hidden=16,
        layers=1,
        intermediate=16,
        num_heads=2,
        **({"pos_dim": 4} if encoding == "learned" else {}),
    )  # learned_content: pos_dim = hidden
    cfg = TrainConfig(
        model=mc, data="synthetic:100", subset=50, epochs=1, batch_size=25, head_images=4, seed=3
    )
    result = train_trial(cfg, trial_id="t", checkpoint_dir=tmp_path / "ckpt")
    state = load_checkpoint(tmp_path / "ckpt")
    assert state["model_config"] == mc.to_dict() and state["train_config"] == cfg.to_dict()
    path = tmp_path / "m.pt"
    torch.save(export_dict(state, study="s", trial_id="t"), path)
    model = load_trained(path)
    assert not model.training and model.config == mc
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state["model"][name]), name
    assert main(["evaluate", str(path), "--data", "synthetic:100", "--subset", "50"]) == 0
    m = re.search(r"accuracy [\d.]+ \((\d+)/(\d+) test images\)", capsys.readouterr().out)
    assert int(m[1]) / int(m[2]) == pytest.approx(result.final_test_acc, abs=1e-12)


def test_load_trained_refuses_a_pickle_with_code(tmp_path, capsys):

    from study.models import ExportError

    class Evil:
        def __reduce__(self):
            return (print, ("executed",))

    path = tmp_path / "evil.pt"
    torch.save({"format": "attention-cnn-study/model", "x": Evil()}, path)
    with pytest.raises(ExportError, match="not a model export"):
        load_trained(path)
    assert "executed" not in capsys.readouterr().out


def test_checkpoints_are_the_trials_own_files_by_key(tmp_path):
    """A study's checkpoints are ``trials/<key>/checkpoint.pt`` (and the previous epoch's
    beside it): found by key, the latest intact one read; files elsewhere (Ray's
    folders, the tables, a stray ``checkpoint.pt`` under ``trials/``) are not checkpoints
    of a trial."""
    from study.trial.checkpoint import save_checkpoint
    from study.tuning.checkpoints import find_checkpoints, latest_checkpoint

    for key, epochs in (("c000-s000", (1, 2)), ("c001-s000", (3,))):
        for e in epochs:
            save_checkpoint(tmp_path / "trials" / key, {"epoch": e, "model": {}})
    (tmp_path / "tune" / "c002-s000_abc" / "checkpoint_000000").mkdir(parents=True)
    torch.save(
        {"epoch": 9, "model": {}}, tmp_path / "tune" / "c002-s000_abc" / "checkpoint_000000" / "checkpoint.pt"
    )
    torch.save({"epoch": 9, "model": {}}, tmp_path / "trials" / "checkpoint.pt")
    assert find_checkpoints(str(tmp_path)) == ["c000-s000", "c001-s000"]
    assert latest_checkpoint(str(tmp_path), "c000-s000")["epoch"] == 2
    assert latest_checkpoint(str(tmp_path), "c001-s000")["epoch"] == 3
    assert latest_checkpoint(str(tmp_path), "c002-s000") is None
    # the latest cut short (a full disk): the previous epoch's, with a warning naming the file
    (tmp_path / "trials" / "c000-s000" / "checkpoint.pt").write_bytes(b"PK\x03")
    warned = []
    assert latest_checkpoint(str(tmp_path), "c000-s000", warn=warned.append)["epoch"] == 1
    assert len(warned) == 1 and "c000-s000/checkpoint.pt" in warned[0]


@pytest.mark.parametrize("out", ["{file}/x.pt", "{file}/a/b/x.pt", "{tmp}"])
def test_export_out_that_cannot_be_written_is_one_line_before_anything_is_read(tmp_path, capsys, out):
    """`--out /etc/passwd/x.pt` raised FileExistsError after the checkpoint was read: the
    path is checked first (a file where a folder must be, a folder), one line, exit 2."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "st" / "s" / "tables").mkdir(parents=True)
    (tmp_path / "st" / "s" / "study.json").write_text("{}")
    with pytest.raises(SystemExit) as e:
        main(
            [
                "export",
                "s",
                "--storage",
                str(tmp_path / "st"),
                "--out",
                out.format(file=tmp_path / "file", tmp=tmp_path),
            ]
        )
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "--out: " in err and "Traceback" not in err, err
