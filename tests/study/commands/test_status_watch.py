"""Where researchers look (issue 14): Ray's TensorBoard / MLflow / W&B loggers from the
study file, progress of `study run`, and trained models taken out of a study
(`study export`, `study.models.load_trained`, `study evaluate`).

One tiny study (2 trials, 2 epochs, every logger) runs once for the module."""

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from study.results.tables import read_table

TINY = {"hidden": 16, "layers": 2, "intermediate": 16, "num_heads": 4}
MODELS = [{"encoding": "quadratic", "isotropic": True}, {"encoding": "learned_content", "pos_dim": 16}]


def _env(**extra):
    return {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_INIT_TIMEOUT": "600",
        **extra,
    }  # a loaded machine: 90 s (the default) once left a run empty


def _cli(cwd, *args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "study", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=kw.pop("timeout", 900),
        **kw,
    )


class _Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def study_cli(capsys, monkeypatch):
    """`study ARGS` in this process (no interpreter start-up per call)."""
    from study.cli import main

    def run(cwd, *args):
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as e:
            code = e.code
        out = capsys.readouterr()
        return _Result(code, out.out, out.err)

    return run


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A finished 2-trial study with loggers [tensorboard, mlflow, wandb]."""
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    tmp = tmp_path_factory.mktemp("watch")
    doc = {
        "name": "w",
        "data": "synthetic:100",
        "epochs": 2,
        "batch_size": 25,
        "training": {"head_images": 4},
        "model": TINY,
        "models": MODELS,
        "resources": {"cpus_per_trial": 1},
        "loggers": ["tensorboard", "mlflow", "wandb"],
    }
    (tmp / "w.yaml").write_text(yaml.safe_dump(doc))
    out = _cli(tmp, "run", "w.yaml", "--num-cpus", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    root = tmp / "results" / "w"
    return {"tmp": tmp, "root": root, "stderr": out.stderr, "runs": read_table(root / "tables", "runs")}


def _trial_dirs(root: Path) -> dict[str, Path]:
    """trial key -> Ray's trial folder (named key_rayid by the runner)."""
    return {
        p.name.split("_")[0]: p
        for p in (root / "tune").iterdir()
        if p.is_dir() and (p / "params.json").exists()
    }


@pytest.mark.slow
def test_run_shows_trials_done_elapsed_and_eta(logged):
    err = logged["stderr"]
    assert re.search(r"1 of 2 trials done, elapsed \d+:\d\d:\d\d, ETA \d+:\d\d:\d\d", err), err[-2000:]
    assert "2 of 2 trials done" in err and "ETA 0:00:00" in err


@pytest.mark.slow
def test_tensorboard_scalars_hparams_and_attention_images(logged):
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    runs = logged["runs"].set_index("trial_id")
    epochs = read_table(logged["root"] / "tables", "epochs")
    dirs = _trial_dirs(logged["root"])
    assert set(dirs) == set(runs.index)
    for key, folder in dirs.items():
        acc = EventAccumulator(str(folder), size_guidance={"images": 0, "scalars": 0})
        acc.Reload()
        # one point per epoch (then the trial's closing report repeats the last)
        test_acc = [e.value for e in acc.Scalars("ray/tune/test_acc")]
        per_epoch = epochs[epochs.trial_id == key].sort_values("epoch").test_acc.tolist()
        assert len(per_epoch) == 2 and test_acc[:2] == pytest.approx(per_epoch)
        # HParams: the trial's whole configuration, as the searcher put it in Tune's config
        content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        hp = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
        assert hp["hparams/num_heads"].number_value == runs.loc[key, "num_heads"] == 4
        assert hp["hparams/encoding"].string_value == runs.loc[key, "encoding"]
        assert hp["hparams/lr"].number_value == pytest.approx(runs.loc[key, "lr"])
        for name in (
            "hparams/pos_dim",
            "hparams/hidden",
            "hparams/layers",
            "hparams/weight_decay",
            "hparams/epochs",
            "hparams/batch_size",
            "hparams/warmup",
            "hparams/seed",
            "key",
        ):
            assert name in hp, name
        # one image per layer and epoch: heads side by side, 15x15 windows x 6 pixels
        for layer in range(TINY["layers"]):
            images = acc.Images(f"attention/layer_{layer}")
            assert [im.step for im in images] == [1, 2]
            png = Image.open(io.BytesIO(images[-1].encoded_image_string))
            assert png.size == (TINY["num_heads"] * (15 * 6 + 2) - 2, 15 * 6)


@pytest.mark.slow
def test_mlflow_file_store_holds_params_and_metrics(logged):
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(logged["root"] / "mlruns").as_uri())
    exp = client.get_experiment_by_name("w")
    mruns = client.search_runs([exp.experiment_id])
    assert len(mruns) == 2
    runs = logged["runs"].set_index("trial_id")
    for r in mruns:
        key = r.data.params["key"]
        assert int(r.data.params["hparams/num_heads"]) == 4
        assert r.data.params["hparams/encoding"] == runs.loc[key, "encoding"]
        history = client.get_metric_history(r.info.run_id, "test_acc")
        assert len(history) >= 2 and history[-1].value == pytest.approx(runs.loc[key, "final_test_acc"])
        assert r.info.status == "FINISHED"


@pytest.mark.slow
def test_wandb_offline_runs_hold_config_and_metrics(logged):
    runs = sorted((logged["root"] / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 2
    for f in runs:
        # the run's record file (protobuf records): the config keys and the metric names
        data = f.read_bytes()
        for word in (b"hparams", b"num_heads", b"pos_dim", b"test_acc", b"train_loss"):
            assert word in data, (f, word)


@pytest.mark.slow
def test_export_load_trained_same_logits_and_evaluate_equals_final_accuracy(logged, study_cli):
    from study.models import load_trained
    from study.models.registry import build_model
    from study.trial.checkpoint import load_checkpoint

    tmp, runs = logged["tmp"], logged["runs"].set_index("trial_id")
    for key in runs.index:
        out = tmp / f"{key}.pt"
        r = study_cli(tmp, "export", "w", "--trial", key, "--out", str(out))
        assert r.returncode == 0, r.stderr
        export = torch.load(out, weights_only=True)
        assert export["model_config"]["encoding"] == runs.loc[key, "encoding"]
        assert export["train_config"]["data"] == "synthetic:100" and export["epoch"] == 2
        # the trained model: the trial's last checkpoint, as the trial saved it
        state = load_checkpoint(logged["root"] / "trials" / key)
        trained = build_model(state["model_config"])
        trained.load_state_dict(state["model"])
        trained.eval()
        x = torch.randn(3, 3, 32, 32)
        with torch.no_grad():
            assert torch.equal(load_trained(out)(x), trained(x))
        r = study_cli(tmp, "evaluate", str(out), "--data", "synthetic:100")
        assert r.returncode == 0, r.stderr
        m = re.search(r"accuracy ([\d.]+) \((\d+)/(\d+) test images\)", r.stdout)
        assert m, r.stdout
        assert int(m[2]) / int(m[3]) == pytest.approx(runs.loc[key, "final_test_acc"], abs=1e-12)
    # --best: the trial with the highest final accuracy
    r = study_cli(tmp, "export", "w", "--best", "--out", str(tmp / "best.pt"))
    assert r.returncode == 0, r.stderr
    best = runs.final_test_acc.idxmax()
    assert torch.load(tmp / "best.pt", weights_only=True)["trial_id"] == best
    assert f"trial {best}" in r.stdout


@pytest.mark.slow
def test_export_and_evaluate_bad_inputs(logged, tmp_path, study_cli):
    tmp = logged["tmp"]
    r = study_cli(tmp, "export", "w", "--trial", "c999-s000")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "c999-s000" in r.stderr
    r = study_cli(tmp, "export", "nosuchstudy")
    assert r.returncode == 2 and "nosuchstudy" in r.stderr
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a model")
    r = study_cli(tmp, "evaluate", str(junk), "--data", "synthetic:100")
    assert r.returncode == 2 and r.stderr.startswith("study evaluate: error:") and r.stderr.count("\n") == 1
    assert study_cli(tmp, "export", "w", "--out", str(tmp_path / "b.pt")).returncode == 0
    r = study_cli(tmp, "evaluate", str(tmp_path / "b.pt"), "--data", str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.startswith("study evaluate: error: --data")
