"""``study models`` and ``study theorem`` as a user runs them: the command line through
``study.cli.main`` in this process (no interpreter and torch start-up per call), and the
``python -m study`` entry point itself for ``--help``."""

import json
import subprocess
import sys

import pytest

from study.models import PAPER_MODELS


def test_models_json_lists_paper_configs_and_todays_encodings(study_here):
    from study.commands.models import COLUMNS
    from study.models import ENCODING_MODELS

    r = study_here("models", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == len(PAPER_MODELS) + len(ENCODING_MODELS)
    for row in rows:
        assert (
            set(row)
            == set(COLUMNS)
            >= {"name", "encoding", "num_heads", "pos_dim", "rope_mode", "n_params", "macs"}
        )
        assert row["flops"] > 1e8 and row["macs"] > 1e8
    by_name = {r["name"]: r for r in rows}
    assert by_name["ResNet18"]["n_params"] == 11_173_962
    assert by_name["SA quadratic isotropic (N_h=9)"]["n_params"] == 12_086_844
    # today's encodings at the paper's size (heads of width D = 400, as the study trains them)
    assert by_name["SA GPSA (N_h=9)"]["n_params"] == 29_410_152
    assert by_name["SA relative bias (N_h=9)"]["n_params"] == 29_461_776
    assert by_name["SA RoPE axial (N_h=9)"]["n_params"] == 29_409_882
    assert by_name["SA RoPE mixed (N_h=9)"]["n_params"] == 29_431_482
    assert by_name["SA RoPE mixed (N_h=9)"]["rope_mode"] == "mixed"
    assert by_name["SA GPSA (N_h=9)"]["locality_strength"] == 1.0
    # content attention adds query/key projections and their FLOPs
    content = next(r for r in rows if r["encoding"] == "learned_content")
    learned = next(r for r in rows if r["encoding"] == "learned")
    assert content["flops"] > 2 * learned["flops"] > 0


def test_models_flags_size_one_model(study_here):
    r = study_here("models", "--json", "--num-heads", "16", "--encoding", "learned", "--pos-dim", "64")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert (row["num_heads"], row["pos_dim"], row["encoding"]) == (16, 64, "learned")


def test_models_table_output(study_here):
    r = study_here("models", "--arch", "resnet18")
    assert r.returncode == 0
    assert "11,173,962" in r.stdout and "resnet18" in r.stdout


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--num-heads", "0"], "--num-heads"),
        (["--encoding", "nonsense"], "--encoding"),
        (["--pos-dim", "2", "--encoding", "quadratic"], "--pos-dim"),
        (["--pos-dim", "2", "--encoding", "learned"], "--pos-dim"),
        (["--no-isotropic", "--encoding", "learned"], "--isotropic"),
        (["--num-heads", "x"], "--num-heads"),
    ],
)
def test_models_bad_flags_one_line_exit_2(study_here, args, flag):
    r = study_here("models", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("kernel", [1, 3, 5])
def test_theorem_command(study_here, kernel):
    r = study_here("theorem", "--kernel", str(kernel), "--in", "3", "--out", "5")
    assert r.returncode == 0, r.stderr
    err = float(r.stdout.rsplit("=", 1)[1])
    assert err <= 1e-9


def test_theorem_rejects_even_kernel(study_here):
    r = study_here("theorem", "--kernel", "4")
    assert r.returncode == 2 and "--kernel" in r.stderr


def test_every_command_has_help(study_here):
    r = subprocess.run([sys.executable, "-m", "study", "--help"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "usage:" in r.stdout, r.stderr  # the entry point a user types
    for cmd in (["models"], ["theorem"], ["train"], ["validate"], ["run"], ["status"], ["resume"], ["bench"]):
        r = study_here(*cmd, "--help")
        assert r.returncode == 0 and "usage:" in r.stdout, (cmd, r.stderr)


def test_meta_device_counts_equal_a_built_models(encoding_variant):
    """`study models` builds each model on the meta device (nothing initialised or computed): its
    parameter and FLOP counts equal those of the model built and run on the CPU, for every encoding."""
    import torch

    from study.commands.models import describe
    from study.cost.flops import count_parameters, forward_flops
    from study.models import ModelConfig
    from study.models.registry import build_model

    config = ModelConfig(
        **{
            "hidden": 16,
            "layers": 2,
            "intermediate": 16,
            "num_heads": 4,
            "pos_dim": 8 if encoding_variant["encoding"] == "learned" else None,
            **encoding_variant,
        }
    )
    model = build_model(config)
    row = describe(config)
    assert row["n_params"] == count_parameters(model) > 0
    assert row["flops"] == forward_flops(model) > 0
    assert next(model.parameters()).device == torch.device("cpu")


def test_models_describes_a_model_of_a_billion_parameters_without_allocating_it():
    """Near MAX_MODEL_PARAMS (3.2 GB of float32 weights) `study models` answers at once: the model
    is built on the meta device, so the process never holds its weights."""
    # VmHWM: this process's peak RSS (ru_maxrss would carry the forking pytest worker's across exec)
    code = (
        "from study.cli import main; "
        "main(['models', '--json', '--hidden', '4096', '--intermediate', '4096', '--layers', '4']); "
        "print(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out, _, maxrss_kb = r.stdout.strip().rpartition("\n")
    (row,) = json.loads(out)
    assert row["n_params"] > 800_000_000 and row["flops"] > 1e11
    assert int(maxrss_kb) < 2_000_000, f"peak RSS {int(maxrss_kb) // 1024} MiB"
