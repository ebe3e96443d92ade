"""``study bench`` on CPU with tiny batches: report keys, finite positive numbers,
ratios against the naive reference, peak table, CLI errors."""

import json
import math
import subprocess
import sys

import pytest
import torch

from study.bench.peaks import Peak, measured_matmul_peak, resolve_peak, stated_gpu_peak
from study.bench.report import format_report
from study.bench.runner import default_options, run_bench
from study.cli import main

RECORD_KEYS = {
    "path",
    "precision",
    "images_per_s",
    "images_per_s_best",
    "step_ms",
    "windows_s",
    "warmup_s",
    "forward_flops",
    "train_flops",
    "tflops",
    "mfu",
    "peak_memory_mb",
    "step_memory_mb",
    "cpu_s_per_step",
}
POSITIVE = (
    "images_per_s",
    "images_per_s_best",
    "step_ms",
    "forward_flops",
    "train_flops",
    "tflops",
    "mfu",
    "cpu_s_per_step",
)


def check_record(rec):
    assert set(rec) == RECORD_KEYS
    for k in POSITIVE:
        assert isinstance(rec[k], (int, float)) and math.isfinite(rec[k]) and rec[k] > 0, (k, rec[k])
    assert rec["train_flops"] == 3 * rec["forward_flops"]
    assert rec["peak_memory_mb"] is None  # CPU: no allocator peak, only the RSS rise
    assert rec["step_memory_mb"] is None or rec["step_memory_mb"] >= 0
    assert all(w > 0 for w in rec["windows_s"])


@pytest.fixture(scope="module")
def report():
    opts = default_options(
        "cpu",
        batch=1,
        steps=1,
        warmup=1,
        repeats=2,
        targets=("sa_learned", "attention:sa_quadratic"),
        peak_tflops=1.0,
    )
    return run_bench(opts)


@pytest.mark.slow
def test_report_header(report):
    assert report["device"] == "cpu"
    assert report["precision"] == "float32"
    assert (report["batch"], report["steps"], report["warmup"], report["repeats"]) == (1, 1, 1, 2)
    assert report["peak_tflops"] == 1.0 and "--peak-tflops" in report["peak_source"]
    assert report["peak_cpu_tflops"] is None
    rec = report["models"][0]["fast"]
    assert rec["mfu"] == pytest.approx(rec["tflops"] / 1.0)  # a given peak: wall-clock MFU


def test_model_rows(report):
    (m,) = report["models"]
    assert m["key"] == "sa_learned" and m["name"].startswith("SA learned")
    assert m["n_params"] == 12_278_682
    assert m["forward_flops"] > 1e9
    check_record(m["fast"])
    check_record(m["naive"])
    # training mode keeps the paper's dropout: the dense exact path, same FLOPs as naive
    assert m["fast"]["path"].startswith("shared dense") and "dropout mask 0.1" in m["fast"]["path"]
    assert m["fast"]["forward_flops"] == m["naive"]["forward_flops"]
    assert m["speedup_vs_naive"] == pytest.approx(m["fast"]["images_per_s"] / m["naive"]["images_per_s"])
    assert m["speedup_vs_naive_best"] > 0


def test_attention_rows(report):
    (a,) = report["attention"]
    assert a["key"] == "sa_quadratic"
    for k in ("fast", "train", "naive", "core_fast", "core_naive"):
        check_record(a[k])
    assert a["fast"]["path"].startswith("factorised")
    assert a["train"]["path"].startswith("shared dense") and "dropout" in a["train"]["path"]
    # the factorised core does 8x fewer multiply-adds (2*16^3 vs 256^2 per head, channel)
    assert a["core_naive"]["forward_flops"] == 8 * a["core_fast"]["forward_flops"]
    for k in (
        "speedup_vs_naive",
        "train_speedup_vs_naive",
        "core_speedup_vs_naive",
        "speedup_vs_naive_best",
        "speedup_vs_naive_cpu_time",
        "train_speedup_vs_naive_cpu_time",
        "core_speedup_vs_naive_cpu_time",
    ):
        assert math.isfinite(a[k]) and a[k] > 0


def test_report_is_json_and_table(report):
    assert json.loads(json.dumps(report)) == report
    text = format_report(report)
    for needle in ("SA learned", "factorised", "naive", "train p=0.1", "vs naive", "MFU"):
        assert needle in text


def test_cli_json_resnet_without_naive_counterpart(capsys):
    assert (
        main(
            [
                "bench",
                "--models",
                "resnet18",
                "--batch",
                "1",
                "--steps",
                "1",
                "--json",
                "--quiet",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["peak_tflops"] > 0 and out["peak_source"].startswith("measured")
    (m,) = out["models"]
    check_record(m["fast"])
    assert m["naive"] is None and "speedup_vs_naive" in m and m["speedup_vs_naive"] is None
    # measured CPU peak: MFU per second of process CPU time on both sides
    fast = m["fast"]
    per_cpu_s = fast["train_flops"] * out["batch"] / fast["cpu_s_per_step"] / 1e12
    assert fast["mfu"] == pytest.approx(per_cpu_s / out["peak_cpu_tflops"])
    assert m["n_params"] == 11_173_962


@pytest.mark.long
def test_references_option_times_only_the_chosen_references_interleaved(capsys):
    """``--references einsum``: the model and the layers are timed against the einsum
    formulation only, every record on the same windows count (interleaved in one
    ``measure``), and the ratio is the one of their images/s.  One run times the layer of
    each SA model the einsum reference covers (quadratic, learned, learned + content)
    and one whole model (a whole model's timing is what costs here, its path is the
    layer's)."""
    layers = ["sa_quadratic", "sa_learned", "sa_learned_content"]
    targets = ",".join(["sa_quadratic", *(f"attention:{k}" for k in layers)])
    assert (
        main(
            [
                "bench",
                "--models",
                targets,
                "--batch",
                "1",
                "--steps",
                "1",
                "--repeats",
                "2",
                "--references",
                "einsum",
                "--json",
                "--quiet",
                "--device",
                "cpu",
                "--peak-tflops",
                "1",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    (m,), attention = out["models"], out["attention"]
    assert m["key"] == "sa_quadratic" and m["naive"] is None
    check_record(m["einsum"])
    assert len(m["fast"]["windows_s"]) == len(m["einsum"]["windows_s"]) == 2
    assert m["speedup_vs_einsum"] == pytest.approx(m["fast"]["images_per_s"] / m["einsum"]["images_per_s"])
    assert [a["key"] for a in attention] == layers, [a["key"] for a in attention]
    for a in attention:
        assert a["naive"] is None and a["core_naive"] is None
        check_record(a["einsum"])
        assert len(a["train"]["windows_s"]) == len(a["einsum"]["windows_s"]) == 2
        assert a["train_speedup_vs_einsum"] == pytest.approx(
            a["train"]["images_per_s"] / a["einsum"]["images_per_s"]
        )
    assert (
        main(
            [
                "bench",
                "--models",
                f"attention:{layers[0]}",
                "--batch",
                "1",
                "--steps",
                "1",
                "--no-naive",
                "--references",
                "naive,einsum",
                "--json",
                "--quiet",
                "--device",
                "cpu",
                "--peak-tflops",
                "1",
            ]
        )
        == 0
    )
    (a,) = json.loads(capsys.readouterr().out)["attention"]
    assert a["naive"] is None and a["einsum"] is not None


@pytest.mark.parametrize(
    "args,message",
    [
        (["--models", "nope"], "--models: unknown target 'nope'"),
        (["--models", "attention:resnet18"], "--models: unknown target 'attention:resnet18'"),
        (["--steps", "0"], "--steps: must be >= 1"),
        (["--warmup", "0"], "--warmup: must be >= 1"),
        (["--dtype", "float32", "--amp"], "--amp/--no-amp"),
        (["--peak-tflops", "-1"], "--peak-tflops: must be > 0"),
        (["--threads", "0"], "--threads: must be >= 1"),
        (["--references", "einsum,fast"], "--references: unknown reference 'fast'"),
        (["--references", ","], "--references: unknown reference"),
        (["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "tpu"], "--device:"),
    ],
)
def test_cli_errors_are_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("study bench: error: ") and message in err
    assert err.count("\n") == 1


def test_cli_help_in_a_subprocess():
    r = subprocess.run(
        [sys.executable, "-m", "study", "bench", "--help"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0
    for flag in (
        "--batch",
        "--steps",
        "--warmup",
        "--repeats",
        "--models",
        "--device",
        "--dtype",
        "--amp",
        "--compile",
        "--json",
        "--peak-tflops",
        "989",
    ):
        assert flag in r.stdout


@pytest.mark.parametrize(
    "name,precision,expected",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.0),
        ("NVIDIA H200", "bf16", 989.0),
        ("NVIDIA H100 PCIe", "bf16", 756.0),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
        ("NVIDIA A100-SXM4-80GB", "tf32", 156.0),
        ("NVIDIA GeForce RTX 4090", "bf16", None),
    ],
)
def test_stated_peaks(name, precision, expected):
    assert stated_gpu_peak(name, precision).tflops == expected


def test_peak_override_and_cpu_measurement():
    assert resolve_peak(torch.device("cpu"), None, 2.5) == Peak(2.5, "given: --peak-tflops (fp32)")
    p = measured_matmul_peak(torch.device("cpu"), torch.float32, size=256, repeats=1)
    assert p.tflops > 0 and p.source.startswith("measured")
