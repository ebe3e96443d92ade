"""``study plan`` (issue 22 §3): a study's FLOPs from its models' MAC counts, epochs
and image counts; device-seconds at a given throughput; the wall time on N workers
started longest first; predicted against measured device-seconds of a finished run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from study.cost.plan import Throughput, make_plan, plan_trials, predict, trial_images, wall_seconds
from study.models.cost import model_macs
from study.spec.studyfile import load_spec, validate
from tests.helpers import REPO_ROOT, run_cli

FIG2 = "search_spaces/paper_fig2.yaml"


def test_paper_fig2_flops_are_3_forwards_per_training_image_and_1_per_evaluated_image():
    spec = load_spec(FIG2)
    trials = {t.model: t for t in plan_trials(spec)}
    assert set(trials) == {
        "ResNet18",
        "SA quadratic isotropic (N_h=9)",
        "SA learned (N_h=9, D_p=400)",
        "SA learned+content (N_h=9, D_p=400)",
    }
    for t in trials.values():
        fwd = 2 * model_macs(t.config)
        assert (t.images.train, t.images.val, t.images.test, t.epochs) == (50_000, 0, 10_000, 300)
        assert t.train_flops == 3 * fwd * 50_000 * 300
        assert t.eval_flops == fwd * 10_000 * 300
        assert t.head_flops == (0 if t.model == "ResNet18" else fwd * 100 * 300)  # head_images: 100
    assert trials["ResNet18"].macs == 555_422_720  # docs/figures.md "MACs in Table 1": 0.555 G


@pytest.mark.parametrize(
    "data,subset,validation",
    [
        ("synthetic:300", None, 0),
        ("synthetic:300", 120, 0),
        ("synthetic:300", None, 30),
        ("synthetic", 500, 0.1),
        ("synthetic:120", 100, 7),
    ],
)
def test_image_counts_are_what_the_data_layer_cuts(data, subset, validation):
    from study.data import hold_out_validation, load_splits
    from study.trial.config import TrainConfig

    cfg = TrainConfig(data=data, subset=subset, validation=validation)
    splits = hold_out_validation(load_splits(data, subset=subset), validation=validation, seed=0)
    n_val = 0 if splits.val_labels is None else len(splits.val_labels)
    im = trial_images(cfg)
    assert (im.train, im.val, im.test) == (len(splits.train_labels), n_val, len(splits.test_labels))


def test_device_seconds_from_tflops_images_per_s_and_a_bench_report():
    spec = load_spec(FIG2)
    trials = plan_trials(spec)
    by = {t.config.get("encoding") or "resnet": t for t in trials}
    at = predict(trials, Throughput(tflops=100.0))
    for t in at:
        assert t.seconds == pytest.approx((t.train_flops + t.eval_flops) / 100e12)
    # an evaluation image is one forward: a third of a training image
    q = predict([by["quadratic"]], Throughput(images_per_s=500.0))[0]
    assert q.seconds == pytest.approx(300 * (50_000 + 10_000 / 3) / 500.0)
    bench = {
        "models": [
            {"key": "sa_quadratic", "fast": {"images_per_s": 20.0}},
            {"key": "resnet18", "fast": {"images_per_s": 400.0}},
        ]
    }
    got = {t.config.get("encoding") or "resnet": t for t in predict(trials, Throughput(bench=bench))}
    assert got["quadratic"].seconds == pytest.approx(300 * (50_000 + 10_000 / 3) / 20.0)  # the same model
    assert got["resnet"].seconds == pytest.approx(300 * (50_000 + 10_000 / 3) / 400.0)
    assert "bench sa_quadratic: 20.0 img/s" in got["quadratic"].rate
    # no learned model in the bench: the FLOP rate of the bench models (median of both)
    rates = sorted(
        [3 * 2 * model_macs(by["quadratic"].config) * 20.0, 3 * 2 * model_macs(by["resnet"].config) * 400.0]
    )
    lc = got["learned_content"]
    assert lc.seconds == pytest.approx((lc.train_flops + lc.eval_flops) / (sum(rates) / 2))
    assert "all models" in lc.rate


def test_wall_time_on_n_workers_schedules_the_longest_first():
    spec = load_spec(FIG2)
    plan = make_plan(spec, throughput=Throughput(tflops=150.0), workers=2)
    secs = sorted((t.seconds for t in plan.trials), reverse=True)
    assert plan.wall_seconds == pytest.approx(max(secs[0], secs[1] + secs[2] + secs[3]))  # 15.1 | 6.2+6.2+0.6
    assert make_plan(spec, throughput=Throughput(tflops=150.0), workers=4).wall_seconds == pytest.approx(
        secs[0]
    )
    assert wall_seconds([4, 3, 3, 2, 2], 2) == 8


def test_sampled_model_fields_are_costed_at_their_most_expensive_value():
    raw = {
        "data": "synthetic",
        "epochs": 1,
        "model": {"layers": 1, "intermediate": 16, "num_heads": 2},
        "sample": {"hidden": {"int": [8, 64]}, "lr": {"loguniform": [0.01, 0.1]}},
        "num_samples": 2,
    }
    spec = validate(raw, file="s.yaml", default_name="s")
    t = plan_trials(spec)[0]
    assert t.upper_bound and t.config["hidden"] == 64


def test_study_plan_prints_flops_device_hours_and_wall_time():
    r = run_cli(".", "plan", FIG2, "--tflops", "150", "--workers", "2")
    assert r.returncode == 0, r.stderr
    total = r.stdout.strip().splitlines()[-1]
    spec = load_spec(FIG2)
    plan = make_plan(spec, throughput=Throughput(tflops=150.0), workers=2)
    hours = sum(t.seconds for t in plan.trials) / 3600
    assert re.search(
        r"^plan: 4 trials, 1\.93 EFLOP \(training 1\.81 EFLOP \+ evaluation 120 PFLOP \+ head "
        r"statistics 1\.17 PFLOP\); ([\d.]+) device-hours, wall (\d+):(\d\d):(\d\d) on 2 workers$",
        total,
    )
    assert f"{hours:.3g} device-hours" in total
    rows = [ln.split()[0] for ln in r.stdout.splitlines()[2:-1]]
    assert rows == ["c003-s000", "c002-s000", "c001-s000", "c000-s000"], "launch order: longest first"
    # without a throughput: FLOPs only, and how to get the time
    r = run_cli(".", "plan", FIG2)
    assert r.returncode == 0 and "device-hours" not in r.stdout.splitlines()[-1]
    assert "need a throughput: --tflops, --images-per-s or --bench" in r.stderr
    j = json.loads(run_cli(".", "plan", FIG2, "--images-per-s", "1000", "--json").stdout)
    assert j["total_flops"] == pytest.approx(sum(t.flops for t in plan.trials))
    assert j["trials"][0]["trial_id"] == "c003-s000" and j["device_seconds"] > 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["--tflops", "0"], "--tflops: must be a positive number, got '0'"),
        (["--workers", "0"], "--workers: must be >= 1"),
        (["--tflops", "1", "--images-per-s", "2"], "not allowed with argument"),
        (["--bench", "missing.json"], "missing.json (No such file or directory)"),
        (["--bench", "BAD"], "holds no timed model of the paper"),
        (["--against", "nowhere"], "--against: "),
    ],
)
def test_study_plan_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "BAD").write_text(json.dumps({"models": [{"key": "nope", "fast": {"images_per_s": 1}}]}))
    args = [str(tmp_path / a) if a in ("BAD", "missing.json") else a for a in args]
    r = run_cli(".", "plan", FIG2, *args, env={"STUDY_STORAGE": str(tmp_path / "st")})
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert r.stderr.count("\n") <= 3 and "Traceback" not in r.stderr


def test_study_plan_imports_neither_torch_nor_ray():
    code = (
        f"import sys; from study.cli import main; main(['plan', {FIG2!r}, '--tflops', '10']); "
        "print(sorted(m for m in ('torch', 'ray', 'pandas') if m in sys.modules), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr.strip().splitlines()[-1] == "[]", r.stderr


@pytest.mark.long
def test_predicted_over_measured_device_seconds_of_a_finished_cpu_study(tmp_path):
    """A real study of two trial configurations of unequal cost (1 and 4 attention
    layers), each run twice (seeds 0 and 1), one trial at a time: the expensive ones start
    first; calibrated on the faster 4-layer trial (its measured FLOP rate), `study plan
    --against` predicts the 1-layer trials' runs.device_seconds, the lesser of the two
    between 0.5x and 1.5x (the rate, not the machine's speed, cancels; its load does not:
    it only ever adds time, so each configuration's time is the lesser of its two trials)."""
    f = tmp_path / "two.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "name": "two",
                "data": "synthetic:600",
                "epochs": 2,
                "batch_size": 50,
                "model": {"hidden": 32, "intermediate": 64, "num_heads": 4},
                "training": {"head_images": 4},
                "grid": {"layers": [1, 4]},
                "seeds": [0, 1],
                "resources": {"cpus_per_trial": 1},
                "max_concurrent": 1,
            }
        )
    )
    from study.results.tables import read_table

    r = run_cli(tmp_path, "run", str(f), "--storage", str(tmp_path / "st"), "--num-cpus", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"^plan: 4 trials, [\d.]+ GFLOP \(training", r.stderr, re.M), "the one-line total first"
    runs = read_table(tmp_path / "st" / "two" / "tables", "runs").set_index("trial_id")
    deep_ids, shallow_ids = sorted(runs.index[runs.layers == 4]), sorted(runs.index[runs.layers == 1])
    assert len(deep_ids) == len(shallow_ids) == 2, runs
    started = list(
        dict.fromkeys(ln.split()[0] for ln in r.stderr.splitlines() if re.match(r"c\d{3}-s\d{3} ", ln))
    )
    assert set(started[:2]) == set(deep_ids), f"the 4-layer trials started first: {started}"
    device = runs.device_seconds
    deep = min(deep_ids, key=lambda k: device[k])
    first = next(t for t in plan_trials(load_spec(f)) if t.key == deep)
    tflops = (first.train_flops + first.eval_flops) / device[deep] / 1e12
    out = run_cli(
        tmp_path,
        "plan",
        str(f),
        "--tflops",
        repr(float(tflops)),
        "--against",
        str(tmp_path / "st" / "two"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    ratios = {t["trial_id"]: t["predicted_over_measured"] for t in json.loads(out.stdout)["trials"]}
    assert ratios[deep] == pytest.approx(1.0)  # the calibration
    # wall-clock device-seconds of trials run one after the other: on a loaded 2-core
    # machine load alone moved the ratio to 0.69 (0.87 quiet; the 1-layer trial's fixed
    # costs are not FLOPs).  A prediction that missed the layers' share would say ~3.
    assert 0.5 <= max(ratios[k] for k in shallow_ids) <= 1.5, ratios


@pytest.mark.parametrize(
    "args,message",
    [
        (["--tflops", "5e-324"], "--tflops: must be from 1e-06 to 1e+06"),
        (["--tflops", "1e300"], "--tflops: must be from 1e-06 to 1e+06"),
        (["--tflops", "inf"], "--tflops: must be a positive number"),
        (["--images-per-s", "5e-324"], "--images-per-s: must be from 1e-06 to 1e+09"),
        (["--images-per-s", "nan"], "--images-per-s: must be a positive number"),
        (["--bench", "TINY_RATE"], "images_per_s 1e-320 is not from 1e-06 to 1e+09"),
        (["--bench", "HUGE_RATE"], "images_per_s 1e+300 is not from 1e-06 to 1e+09"),
        (["--bench", "FIFO"], "is a FIFO, not a regular file"),
        (["--bench", "DEEP"], "nested deeper than"),
        (["--bench", "/dev/zero"], "is a character device"),
        (["--bench", "."], "is a folder"),
    ],
)
def test_study_plan_refuses_rates_and_bench_reports_beyond_their_limits(tmp_path, args, message):
    """Rates a device cannot have (5e-324 made every duration infinite: OverflowError),
    and a bench report that is not a regular file or nests without end (a FIFO blocked
    forever, 200,000 levels a RecursionError): one line, exit 2, without blocking."""
    import os

    def bench(ips):
        return json.dumps({"models": [{"key": "sa_quadratic", "fast": {"images_per_s": ips}}]})

    (tmp_path / "TINY_RATE").write_text(bench(1e-320))
    (tmp_path / "HUGE_RATE").write_text(bench(1e300))
    (tmp_path / "DEEP").write_text("[" * 200_000 + "]" * 200_000)
    os.mkfifo(tmp_path / "FIFO")
    args = [str(tmp_path / a) if a.isupper() else a for a in args]
    r = run_cli(".", "plan", FIG2, *args, timeout=60)
    assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("flag,low", [("--tflops", "1e-6"), ("--images-per-s", "1e-6")])
def test_study_plan_at_the_slowest_rate_writes_its_durations(flag, low):
    r = run_cli(".", "plan", FIG2, flag, low, "--workers", "1")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert re.search(r"device-hours, wall (\d+:\d\d:\d\d|[\d.e+]+ years) on 1 worker", r.stdout), r.stdout


def test_durations_past_ten_thousand_hours_are_years_and_never_fail():
    from study.cost.plan import hms

    assert hms(3661) == "1:01:01" and hms(9_999 * 3600) == "9999:00:00"
    assert hms(10_000 * 3600) == "1.14 years" and hms(1e300) == "3.17e+292 years"
    assert hms(float("inf")) == "unbounded" and hms(float("nan")) == "undefined"


PROTOCOL = str(REPO_ROOT / "search_spaces" / "protocol.yaml")


def test_study_plan_on_the_protocol_study_prints_the_cost_its_header_states():
    r = run_cli(".", "plan", PROTOCOL, "--tflops", "150")
    assert r.returncode == 0, r.stderr
    total = r.stdout.strip().splitlines()[-1]
    header = " ".join(
        ln.lstrip("#").strip() for ln in Path(PROTOCOL).read_text().splitlines() if ln.startswith("#")
    )
    assert total.startswith("plan: 20 trials, ") and total in header, total
    # every (encoding, protocol) pair once: 4 encodings x 5 protocols
    spec = load_spec(PROTOCOL)
    pairs = {
        (c.model["encoding"], c.model.get("isotropic"), tuple(sorted((k, v) for k, v in c.train.items())))
        for c in spec.cells
    }
    assert len(pairs) == spec.num_trials == 20
    protocols = {p for _, _, p in pairs}
    assert protocols == {
        (),
        (("cutmix_alpha", 1.0),),
        (("mixup_alpha", 0.8),),
        (("randaugment_magnitude", 9), ("randaugment_ops", 2)),
        (("label_smoothing", 0.1),),
    }
