"""``study bench`` with runs whose steps give non-finite values (issue 43: a compiled SA
quadratic's NaN was a traceback that ended the bench): each such run is one line of the
report naming the first non-finite step and the run's precision and compilation, the other
targets are still timed, and the command's exit status is 1 after the whole report."""

import math

import pytest
import torch

from study.bench.options import BenchOptions
from study.bench.runner import default_options, run_bench
from study.bench.timing import NonFiniteValues, Variant, measure
from study.cli import main

#: the SA models of these tests, at a size that costs little (the bench's ``model_overrides``)
TINY = {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 4}


def steps_going_non_finite_at(n: int):
    """A step whose value is 1 for its first ``n - 1`` calls, then NaN."""
    calls = []

    def step():
        calls.append(1)
        return torch.tensor(1.0 if len(calls) < n else math.nan)

    return step


def test_measure_names_the_first_non_finite_step_of_each_run():
    opts = BenchOptions(device=torch.device("cpu"), batch=1, steps=2, warmup=1, repeats=2)
    finite = Variant(name="ok", path="p", step=lambda: torch.ones(3), forward_flops=1, precision="float32")
    late = Variant(
        name="fast",
        path="p",
        step=steps_going_non_finite_at(4),
        forward_flops=1,
        precision="bfloat16 autocast",
        mode="bfloat16 autocast, torch.compile inductor",
    )
    early = Variant(
        name="layer",
        path="p",
        step=steps_going_non_finite_at(1),
        forward_flops=1,
        precision="float32",
        value="output",
    )
    with pytest.raises(NonFiniteValues) as e:
        measure([finite, late, early], opts, label="sa_quadratic ")
    # warm-up is step 1, the windows' steps 2-5: the first NaN of ``late`` is its 4th step
    assert e.value.lines == [
        "sa_quadratic fast: non-finite loss at step 4 (bfloat16 autocast, torch.compile inductor)",
        "sa_quadratic layer: non-finite output at step 1 (float32)",
    ]
    assert measure([finite], opts)["ok"]["images_per_s"] > 0  # finite runs time as before


def test_bench_reports_each_non_finite_model_in_one_line_and_goes_on():
    """A step size that sends every model's weights to infinity: the first model's failure
    does not stop the second, each is one line, no table row for either."""
    opts = default_options(
        "cpu",
        batch=2,
        steps=1,
        warmup=1,
        targets=("sa_learned", "sa_quadratic"),
        references=(),
        peak_tflops=1.0,
        model_overrides=TINY,
        lr=1e30,
    )
    report = run_bench(opts)
    assert report["models"] == []
    assert report["non_finite"] == [
        "sa_learned fast: non-finite loss at step 2 (float32, eager)",
        "sa_quadratic fast: non-finite loss at step 2 (float32, eager)",
    ]


def test_cli_prints_the_report_then_exits_1(capsys):
    code = main(
        [
            "bench",
            "--models",
            "resnet18",
            "--lr",
            "1e30",
            "--batch",
            "2",
            "--steps",
            "1",
            "--references",
            "none",
            "--peak-tflops",
            "1",
            "--device",
            "cpu",
            "--quiet",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1
    assert out.startswith("study bench: cpu") and out.rstrip().endswith(
        "resnet18 fast: non-finite loss at step 2 (float32, eager)"
    )
    assert err == "study bench: error: resnet18 fast: non-finite loss at step 2 (float32, eager)\n"
