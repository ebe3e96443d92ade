"""benchmarks/gpu_check.py on CPU, CI-sized: every part runs and the report has every
field the GPU run fills (values that only a GPU measures, e.g. CUDA peak memory, are
present and null)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

ROOT = REPO_ROOT
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402

BENCH_RUN_FIELDS = {
    "images_per_s",
    "mfu",
    "tflops",
    "peak_memory_mb",
    "step_memory_mb",
    "precision",
    "path",
    "speedup_vs_naive",
    "peak_tflops",
    "peak_source",
    "seconds",
}
TRIAL_FIELDS = {
    "name",
    "status",
    "epochs_done",
    "final_test_acc",
    "device_seconds",
    "images_per_s",
    "n_train",
}


@pytest.mark.long
def test_cpu_run_fills_every_field_of_the_gpu_report(tmp_path):
    """The four parts, small: one test node, one epoch of the model trained eager and compiled, the
    model benched eager + compiled (aot_eager), a 1-epoch study of it through ``study run`` (Ray, local)."""
    out = tmp_path / "out"
    rc = gpu_check.main(
        [
            "--device",
            "cpu",
            "--small",
            "--data",
            "synthetic:300",
            "--out",
            str(out),
            "--models",
            "sa_quadratic",
            "--compile-backend",
            "aot_eager",
            "--tests",
            "tests/study/device/test_paths.py::test_ddp_device_ids",
        ]
    )
    report = json.loads((out / "gpu_check.json").read_text())
    md = (out / "gpu_check.md").read_text()
    assert {"device", "device_name", "torch", "peak", "budget_s", "assumed_mfu", "parts", "seconds"} <= set(
        report
    )
    assert report["peak"]["bf16_tflops"] > 0 and report["peak"]["fp32_tflops"] > 0
    tests = report["parts"]["tests"]
    assert tests["status"] == "passed" and tests["passed"] == 1 and tests["failed"] == 0, tests
    train = report["parts"]["train"]
    assert train["status"] == "passed", train.get("error")
    assert [(r["key"], r["run"]) for r in train["runs"]] == [
        ("sa_quadratic", "eager"),
        ("sa_quadratic", "compiled"),
    ]
    for r in train["runs"]:
        assert r["status"] == "finished" and 0 <= r["final_test_acc"] <= 1 and r["images_per_s"] > 0, r
    assert train["runs"][1]["backend"] == "aot_eager" and train["warmup_steps"] > 0
    bench = report["parts"]["bench"]
    assert bench["status"] == "passed", bench.get("error")
    (row,) = bench["models"]
    assert row["key"] == "sa_quadratic" and row["forward_flops"] > 0 and row["planned_s"] > 0
    for label in ("eager", "compiled"):
        assert BENCH_RUN_FIELDS <= set(row[label]), (label, row[label])
        assert row[label]["images_per_s"] > 0 and row[label]["speedup_vs_naive"] > 0 and row[label]["mfu"] > 0
    assert row["naive_images_per_s"] > 0 and row["compile_s"] > 0 and row["compile_speedup"] > 0
    study = report["parts"]["study"]
    assert {"plan", "planned_s", "seconds", "status", "trials"} <= set(study)
    if importlib.util.find_spec("ray") is None:
        assert study["status"] == "skipped" and "Ray" in study["reason"]
    else:
        assert study["status"] == "passed", study.get("error")
        (trial,) = study["trials"]
        assert TRIAL_FIELDS <= set(trial) and trial["status"] == "finished" and trial["epochs_done"] == 1
        assert trial["n_train"] > 0
    assert rc == (0 if study["status"] != "failed" else 1)
    for heading in ("## CUDA tests", "## study train", "## study bench", "## study run", "| sa_quadratic |"):
        assert heading in md


@pytest.mark.parametrize(
    "row,why",
    [
        ({"status": "finished", "final_test_acc": 0.42}, None),
        ({"status": "finished", "final_test_acc": 0.29}, "test accuracy 0.290 < 0.3"),
        ({"status": "diverged", "final_test_acc": 0.10}, "status diverged"),
        (
            {
                "status": "finished",
                "final_test_acc": 0.31,
                "failed_to_train": "train loss 3.01 and test loss 3.20 > ln 10",
            },
            "did not train: train loss 3.01",
        ),
        ({"exception": "UnverifiedCompile: --compile: …"}, "UnverifiedCompile"),
        ({}, "status not recorded"),
    ],
)
def test_a_train_run_passes_only_when_it_finished_trained_and_reached_the_accuracy(row, why):
    got = gpu_check.train_failure(row, min_accuracy=0.3)
    assert got == why if why is None else why in got


def test_study_part_says_so_without_ray(tmp_path, monkeypatch):
    """The GPU machine has no Ray by default (docs/design.md §11): the study part is skipped
    with the reason, its plan still made."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    args = gpu_check.parse_args(
        [
            "--device",
            "cpu",
            "--small",
            "--data",
            "synthetic:300",
            "--out",
            str(tmp_path),
            "--models",
            "sa_learned",
        ]
    )
    res = gpu_check.run_study(args, 60.0, {"bf16_tflops": 1.0, "fp32_tflops": 1.0}, tmp_path)
    assert res["status"] == "skipped" and "Ray" in res["reason"] and "/tmp/site" in res["reason"]
    assert res["plan"][0]["key"] == "sa_learned" and res["plan"][0]["flops"] > 0


def test_study_plan_leaves_out_what_the_budget_cannot_hold(tmp_path):
    """Budgeted by FLOPs: with a peak that fits only the cheaper of two models, the
    more expensive one is left out with the reason."""
    args = gpu_check.parse_args(
        [
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--models",
            "resnet18,sa_learned_content",
            "--data",
            "synthetic:300",
        ]
    )
    peak = {"bf16_tflops": 1.0, "fp32_tflops": 1.0}
    _, plan = gpu_check.study_spec(args, 1.0, peak)
    by_key = {p["key"]: p for p in plan}
    cheap, dear = by_key["resnet18"], by_key["sa_learned_content"]
    assert dear["flops"] > 10 * cheap["flops"]
    budget = cheap["planned_s"] / 0.8 * 1.01  # room for the cheaper one only
    spec, plan = gpu_check.study_spec(args, budget, peak)
    by_key = {p["key"]: p for p in plan}
    assert by_key["resnet18"]["included"] and not by_key["sa_learned_content"]["included"]
    assert "budget" in by_key["sa_learned_content"]["reason"]
    assert [m["arch"] for m in spec["models"]] == ["resnet18"] and spec["epochs"] == 2


@pytest.mark.slow
def test_bench_report_is_written_after_each_model(tmp_path, monkeypatch):
    """A run cut short by the device's time limit keeps the models it measured: the report
    is rewritten after each benched model, through ``main`` (on the lent H200 the first
    version of this raised KeyError in the report writer and the bench part was lost)."""
    out = tmp_path / "out"
    seen = []
    real = gpu_check.write_reports

    def spy(report, where):
        real(report, where)
        bench = json.loads((where / "gpu_check.json").read_text())["parts"].get("bench")
        seen.append((bench["status"], [r["key"] for r in bench.get("models", [])]) if bench else None)

    monkeypatch.setattr(gpu_check, "write_reports", spy)
    rc = gpu_check.main(
        [
            "--device",
            "cpu",
            "--small",
            "--out",
            str(out),
            "--parts",
            "bench",
            "--models",
            "sa_quadratic,sa_relative_bias",
            "--compile-backend",
            "aot_eager",
        ]
    )
    assert rc == 0
    assert seen == [("running", ["sa_quadratic"]), ("passed", ["sa_quadratic", "sa_relative_bias"])]
    assert "| sa_quadratic |" in (out / "gpu_check.md").read_text()


def test_small_sizes_build_every_default_model():
    """``--small`` with the default model list: every model of the bench part and the
    study part builds at the toy sizes (gpsa's lattice needs a square N_h: with 2 heads
    its bench and study entries failed)."""
    from study.bench.options import default_options
    from study.models import build_model

    args = gpu_check.parse_args(["--device", "cpu", "--small", "--data", "synthetic:300"])
    probe = default_options("cpu", model_overrides=dict(gpu_check.SMALL_MODEL))
    for key in args.models:
        assert build_model(probe.model_config(key)) is not None, key
    peak = {
        f"{p}_{k}": None for p in ("bf16", "fp32") for k in ("tflops", "source")
    }  # device_peak's keys, unknown
    _, plan = gpu_check.study_spec(args, budget_s=600.0, peak=peak)
    assert [p["key"] for p in plan] == list(args.models)


def test_study_table_finds_each_trial_by_the_name_of_the_model_it_ran():
    """The report's study table matches a plan row to the trial of the model it ran: with
    ``--small`` the models are toy-sized, so their names are not the paper models' names
    (the table said ``-`` and ``n/a`` for a finished trial)."""
    args = gpu_check.parse_args(["--device", "cpu", "--small", "--data", "synthetic:300"])
    peak = {f"{p}_{k}": None for p in ("bf16", "fp32") for k in ("tflops", "source")}
    _, plan = gpu_check.study_spec(args, budget_s=600.0, peak=peak)
    from study.models import model_name

    trials = [
        {
            "name": model_name(args.configs[p["key"]]),
            "status": "finished",
            "final_test_acc": 0.5,
            "device_seconds": 3.0,
        }
        for p in plan
    ]
    report = {
        "device_name": "cpu",
        "device": "cpu",
        "torch": "x",
        "budget_s": 60.0,
        "seconds": 6.0,
        "peak": peak,
        "assumed_mfu": 0.3,
        "small": True,
        "parts": {
            "study": {
                "status": "passed",
                "epochs": 1,
                "data": "synthetic:300",
                "plan": plan,
                "trials": trials,
            }
        },
    }
    text = gpu_check.markdown(report)
    for p in plan:
        (row,) = [line for line in text.splitlines() if line.startswith(f"| {p['key']} |")]
        assert "| finished | 0.5000 | 3 |" in row, row


def test_a_part_that_raised_is_in_the_markdown_report_with_its_error(tmp_path):
    """A part that raised is recorded as failed with its error and no tables of its own: the
    Markdown report still renders (it raised KeyError: 'models' and the .md was never written)."""
    failed = {"status": "failed", "error": "ZeroDivisionError: float division by zero", "seconds": None}
    report = {
        "device": "cpu",
        "device_name": "cpu",
        "torch": "2",
        "budget_s": 60.0,
        "seconds": 1.0,
        "assumed_mfu": 0.15,
        "small": True,
        "peak": {"bf16_tflops": None, "bf16_source": "-", "fp32_tflops": None},
        "parts": {name: dict(failed) for name in gpu_check.PARTS},
    }
    gpu_check.write_reports(report, tmp_path)
    md = (tmp_path / "gpu_check.md").read_text()
    assert md.count("ZeroDivisionError: float division by zero") == len(gpu_check.PARTS), md


def test_an_assumed_mfu_of_zero_is_refused(capsys):
    """Each part's size is its FLOPs over (MFU x peak): 0 divided by zero after acceptance."""
    with pytest.raises(SystemExit) as e:
        gpu_check.parse_args(["--device", "cpu", "--parts", "bench", "--assumed-mfu", "0"])
    assert (
        e.value.code == 2 and "--assumed-mfu: must be a positive number, got '0'" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--parts", "nope"], "--parts: unknown part 'nope'"),
        (["--models", "vgg"], "--models: unknown model 'vgg'"),
        (["--device", "tpu"], "--device: only cuda, cuda:N and cpu"),
        (["--budget-minutes", "0"], "--budget-minutes"),
        (["--device", "cpu", "--batch", "0"], "--batch"),
        (["--device", "cpu"], "--data"),  # no default outside the repository
        (["--device", "cpu", "--parts", "study"], "--data: the study part needs its data"),
        (
            ["--device", "cpu", "--parts", "study", "--data", "synthetic:0"],
            "--data: synthetic:N needs 1 <= N",
        ),
    ],
)
def test_a_bad_argument_exits_2_before_torch_is_imported(argv, message, tmp_path):
    """--parts, --models, --device and --data took 4.5-8 s each, refused after the torch import."""
    probe = (
        "import sys\nsys.path.insert(0, 'benchmarks')\nimport gpu_check\ntry:\n"
        "    gpu_check.parse_args(sys.argv[1:])\nexcept SystemExit as e:\n"
        "    print(e.code, 'torch' in sys.modules)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert r.stdout.split() == ["2", "False"], (r.stdout, r.stderr[-2000:])
    assert message in r.stderr, r.stderr
