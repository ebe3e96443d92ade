#!/usr/bin/env python
"""One command for a lent GPU: the CUDA tests, one epoch of every paper model through ``study train``
(eager and compiled, each must train), ``study bench`` of every paper model and today's encodings
(with and without ``--compile``) and a 2-epoch full-CIFAR study through ``study run``;
one JSON and one Markdown report (docs/performance.md, "One command for a lent GPU").

    # the GPU machine (≤ 30 min, one H100):
    python benchmarks/gpu_check.py --data cifar10-jpeg.tar.gz
    python benchmarks/gpu_check.py --data cifar10-jpeg.tar.gz --parts tests,train,bench --budget-minutes 7
    python benchmarks/gpu_check.py --device cpu --small --data synthetic:300 # the same parts, CI-sized

A part that fails is recorded with its cause and the next runs.
Exit status: 0 every part passed or was skipped for a stated reason, 1 a part failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/gpu_check.py` puts only benchmarks/ on the path
    sys.path.insert(0, str(ROOT))

PARTS = ("tests", "train", "bench", "study")
#: share of the budget per part (the rest is margin: machine start, imports, reports)
SHARES = {"tests": 0.15, "train": 0.35, "bench": 0.3, "study": 0.1}
#: the train part's warm-up: 150 steps trained the paper's models to ~40 % in one epoch on an H100
#: where the paper's 5 % of one epoch (25 steps) left them at chance (docs/performance.md, "Warm-up")
TRAIN_WARMUP_STEPS = 150
#: the tests that exercise the CUDA branches (skipped without CUDA)
CUDA_TESTS = (
    "tests/study/device/test_paths.py",
    "tests/study/models/test_fast_paths.py",
    "tests/study/models/test_compiled_equals_eager.py",
)
#: a smoke run's models (--small): the paper's architectures at toy sizes
SMALL_MODEL = {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 4}  # N_h square: gpsa's lattice
#: the fields of a bench run's fast record the report keeps
FAST_FIELDS = ("images_per_s", "mfu", "tflops", "peak_memory_mb", "step_memory_mb", "path", "warmup_s")


def parse_args(argv=None) -> argparse.Namespace:
    from study.cliutil import BoundedFloat, BoundedInt, Parser, local_path
    from study.commands.bench import check_device_flag, device_from_flag, names_from_flag
    from study.device.compilers import COMPILE_BACKENDS
    from study.limits import MAX_BENCH_BATCH, MAX_EPOCHS

    p = Parser(
        prog="gpu_check.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if available)")
    p.add_argument(
        "--data",
        help="the study part's data (required with it): the CIFAR-10 JPEG archive or any "
        "source `study run --data` takes (synthetic:N for a smoke run)",
    )
    p.add_argument(
        "--out", type=local_path, default=Path("gpu-check"), help="report folder (default ./gpu-check)"
    )
    p.add_argument(
        "--budget-minutes",
        type=BoundedFloat(0.1, 24 * 60, "a day"),
        default=25.0,
        help="device time for all parts (default 25: 30 minutes minus the machine's start)",
    )
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    p.add_argument(
        "--small",
        action="store_true",
        help="CI size: toy model dims, batch 2, one timed step, a study of 1 epoch on 200 images",
    )
    p.add_argument(
        "--tests",
        nargs="*",
        default=list(CUDA_TESTS),
        metavar="NODE",
        help=f"pytest node ids of the tests part (default: {' '.join(CUDA_TESTS)})",
    )
    p.add_argument(
        "--models",
        default=None,
        metavar="LIST",
        help="comma-separated keys of study.bench.options.BENCH_MODELS to bench and study "
        "(default: the paper's models and today's encodings, study.models.PAPER_MODELS and ENCODING_MODELS)",
    )
    p.add_argument(
        "--batch",
        type=BoundedInt(1, MAX_BENCH_BATCH, "MAX_BENCH_BATCH"),
        default=None,
        help="bench batch (default 128 on CUDA, 8 on CPU, 2 --small)",
    )
    p.add_argument(
        "--compile-backend",
        default="inductor",
        choices=COMPILE_BACKENDS,
        help="backend of the --compile bench runs",
    )
    p.add_argument(
        "--assumed-mfu",
        type=BoundedFloat(1e-3, 1, "a fraction of the peak"),
        default=0.15,
        help="achieved / peak assumed when sizing each part by its FLOPs (default 0.15)",
    )
    p.add_argument(
        "--epochs",
        type=BoundedInt(1, MAX_EPOCHS, "MAX_EPOCHS"),
        default=None,
        help="study epochs (default 2; 1 with --small)",
    )
    p.add_argument(
        "--min-accuracy",
        type=BoundedFloat(0, 1, "an accuracy"),
        default=None,
        help="test accuracy each paper model must reach in the train part's epoch (default 0.30; "
        "0 with --small, whose toy models only have to run)",
    )
    args = p.parse_args(argv)
    # what needs no torch first: a refusal is one line in well under a second
    from study.bench.targets import BENCH_MODELS
    from study.models.config import ENCODING_MODELS, PAPER_MODELS

    def names(text: str, what: str, known) -> tuple[str, ...]:  # --{what}s: each a key of ``known``
        choices = ", ".join(known)
        return names_from_flag(
            text, flag=f"--{what}s", what=what, known=known.__contains__, choices=choices, error=p.error
        )

    args.parts = names(args.parts, "part", PARTS)
    args.models = (
        (*PAPER_MODELS, *ENCODING_MODELS)
        if args.models is None
        else names(args.models, "model", BENCH_MODELS)
    )
    check_device_flag(args.device, p.error)
    for part in ("train", "study"):
        if part in args.parts and args.data is None:
            p.error(
                f"--data: the {part} part needs its data (the CIFAR-10 JPEG archive, or synthetic:N for a "
                "smoke run)"
            )
    if args.data is not None and {"train", "study"} & set(args.parts):  # as `study train --data` checks it
        from study.datachecks import check_data
        from study.errors import UsageError

        try:
            check_data("--data", args.data)
        except UsageError as e:
            p.error(str(e))
    args.device = device_from_flag(args.device, p.error)
    from study.bench.options import default_options

    if args.min_accuracy is None:
        args.min_accuracy = 0.0 if args.small else 0.30
    args.epochs = args.epochs or (1 if args.small else 2)  # both >= 1 when given
    args.batch = args.batch or (2 if args.small else (128 if args.device.type == "cuda" else 8))
    args.model_overrides = dict(SMALL_MODEL) if args.small else {}
    args.train_warmup_steps = 2 if args.small else TRAIN_WARMUP_STEPS
    probe = default_options(args.device, model_overrides=args.model_overrides)
    args.configs = {key: probe.model_config(key) for key in args.models}  # both parts' (--small: toy sizes)
    return args


# ------------------------------------------------------------------ budget
def device_peak(device) -> dict:
    """The device's bf16 dense peak (stated for GPUs, measured on CPU) and its fp32 one."""
    import torch

    from study.bench.peaks import resolve_peak

    peaks = {
        "bf16": resolve_peak(device, torch.bfloat16 if device.type == "cuda" else None, None),
        "fp32": resolve_peak(device, None, None),
    }
    return {f"{name}_{k}": getattr(p, k) for name, p in peaks.items() for k in ("tflops", "source")}


def planned_seconds(flops: float, tflops: float | None, mfu: float) -> float | None:
    """Seconds ``flops`` take at ``mfu`` of a ``tflops`` peak (None: peak unknown)."""
    return None if not tflops else flops / (mfu * tflops * 1e12)


# ------------------------------------------------------------------- tests
def run_tests(args, budget_s: float, out: Path) -> dict:
    """The CUDA tests in a subprocess (pytest, JUnit XML read back)."""
    xml = out / "tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *args.tests]
    t0 = time.perf_counter()
    rc, tail = _subprocess(cmd, budget_s)
    cases = list(ET.parse(xml).iter("testcase")) if xml.is_file() else []
    failures = [
        f"{c.get('classname')}::{c.get('name')}" for c in cases if {"failure", "error"} & {e.tag for e in c}
    ]
    skips = [s.get("message", "") for c in cases if (s := c.find("skipped")) is not None]
    res = {
        "command": " ".join(["python", *cmd[1:]]),
        "nodes": args.tests,
        "planned_s": budget_s,
        "seconds": time.perf_counter() - t0,
        "exit_status": rc,
        "passed": len(cases) - len(failures) - len(skips),
        "failed": len(failures),
        "skipped": len(skips),
        "failures": failures,
        "skip_reasons": list(dict.fromkeys(skips)),
    }
    return _verdict(res, rc == 0 and res["failed"] == 0, tail)


def _subprocess(cmd: list[str], timeout: float) -> tuple[int | None, str]:
    """Exit status (None: timed out) and the output's tail of ``cmd`` run in this checkout."""
    # the subprocess imports this checkout (and what PYTHONPATH already adds, e.g. /tmp/site)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        return proc.returncode, (proc.stdout + proc.stderr)[-3000:]
    except subprocess.TimeoutExpired as e:
        return None, f"timed out after {timeout:.0f} s: {(e.stdout or b'')[-2000:]!r}"


def _verdict(res: dict, ok: bool, tail: str) -> dict:
    return {**res, "status": "passed"} if ok else {**res, "status": "failed", "error": tail}


# ------------------------------------------------------------------- train
def run_training(args, budget_s: float, out: Path, on_row=None) -> dict:
    """One epoch of every paper model among ``args.models``, eager then compiled (``--compile-backend``),
    through the trial loop ``study train`` runs (no Ray), the data decoded once: each must finish, train
    (``runs.failed_to_train`` null) and reach ``args.min_accuracy``. A compiled configuration not yet
    in ``study.device.paths.VERIFIED_COMPILES`` runs anyway (``unverified_compile``): this part is what
    verifies it. ``on_row(part)`` after each run (a run cut short keeps what was measured)."""
    from study.data import load_splits
    from study.device.paths import DevicePaths
    from study.models import PAPER_MODELS
    from study.trial import TrainConfig, train_trial

    keys = [k for k in args.models if k in PAPER_MODELS]
    t_part = time.perf_counter()
    splits = load_splits(args.data, subset=200 if args.small else None)
    rows, decode_s = [], time.perf_counter() - t_part
    for key in keys:
        mc = args.configs[key]
        for label, compiled in (("eager", False), ("compiled", True)):
            folder = out / "train" / f"{key}-{label}"
            cfg = TrainConfig(
                model=mc,
                data=args.data,
                epochs=1,
                warmup_steps=args.train_warmup_steps,
                head_stats=False,
                compile=compiled,
                batch_size=20 if args.small else 100,
                subset=200 if args.small else None,
                **({"schedule": "step"} if mc.arch == "resnet18" else {}),
            )
            paths = DevicePaths.for_device(
                args.device,
                amp=cfg.amp,
                compile=compiled,
                unverified_compile=True,
                compile_backend=args.compile_backend,
            )
            t0 = time.perf_counter()
            row = {"key": key, "run": label, "backend": paths.compile_backend if compiled else None}
            try:
                train_trial(
                    cfg,
                    trial_id=f"{key}-{label}",
                    tables=folder / "tables",
                    device=args.device,
                    splits=splits,
                    paths=paths,
                )
            except Exception as e:  # one run's failure is recorded; the others still run
                row["exception"] = f"{type(e).__name__}: {e}"
            row["seconds"] = time.perf_counter() - t0
            for trial in _trials(folder / "tables"):
                row.update(trial)
            why = train_failure(row, min_accuracy=args.min_accuracy, judge_chance=not args.small)
            rows.append(row if why is None else {**row, "error": why})
            if on_row is not None:
                on_row({**_train_part(rows, budget_s, t_part, args, decode_s), "status": "running"})
    return _train_part(rows, budget_s, t_part, args, decode_s)


def train_failure(row: dict, *, min_accuracy: float, judge_chance: bool = True) -> str | None:
    """Why a train-part run failed (one line), or None: it raised, did not finish, did not train
    (``runs.failed_to_train``, unless ``judge_chance`` is off for toy runs) or stayed below
    ``min_accuracy``."""
    if "exception" in row:
        return row["exception"]
    if row.get("status") != "finished":
        return f"status {row.get('status', 'not recorded')}"
    if judge_chance and row.get("failed_to_train"):
        return f"did not train: {row['failed_to_train']}"
    if not row.get("final_test_acc", 0.0) >= min_accuracy:
        return f"test accuracy {row.get('final_test_acc', float('nan')):.3f} < {min_accuracy:g}"
    return None


def _train_part(rows: list[dict], budget_s: float, t_part: float, args, decode_s: float) -> dict:
    failed = [f"{r['key']} {r['run']}: {r['error'][:300]}" for r in rows if "error" in r]
    fields = {"data": args.data, "min_accuracy": args.min_accuracy, "warmup_steps": args.train_warmup_steps}
    return _part(failed, budget_s, t_part, **fields, runs=rows, decode_s=decode_s)


def _part(failed: list[str], budget_s: float, t_part: float, **fields) -> dict:
    """A part of runs so far: failed (``error``: ``failed``, one cause per run) if any run failed."""
    res = {"budget_s": budget_s, "seconds": time.perf_counter() - t_part, **fields}
    return _verdict(res, not failed, "; ".join(failed))


# ------------------------------------------------------------------- bench
def run_benches(args, budget_s: float, peak: dict, on_row=None) -> dict:
    """``study bench`` of every model, eager with the naive float32 reference, then ``--compile``;
    ``on_row(part)`` gets the part so far after each model (a run cut short keeps what it measured)."""
    import torch

    from study.bench.options import default_options
    from study.bench.runner import run_bench
    from study.cost.flops import forward_flops
    from study.models import build_model

    plan = [(key, forward_flops(build_model(cfg))) for key, cfg in args.configs.items()]
    timed = 0.5 * budget_s / len(plan)  # per model: half for timed steps, half for warm-up and compilation
    rows, t_part = [], time.perf_counter()
    for key, fwd in plan:
        step_flops = 3 * fwd * args.batch
        # eager fast, compiled fast and the naive reference (float32: planned at the fp32 peak)
        per_step = sum(
            planned_seconds(step_flops, peak[p], args.assumed_mfu) or 0.0
            for p in ("bf16_tflops", "bf16_tflops", "fp32_tflops")
        )
        steps, warmup = (
            (1, 1) if args.small else (max(5, min(200, int(timed / per_step) if per_step else 50)), 3)
        )
        row = {
            "key": key,
            "forward_flops": fwd,
            "batch": args.batch,
            "steps": steps,
            "warmup": warmup,
            "planned_s": (steps + warmup) * per_step,
            "train_flops_per_step": step_flops,
        }
        for label, compiled in (("eager", False), ("compiled", True)):
            opts = default_options(
                args.device,
                batch=args.batch,
                steps=steps,
                warmup=warmup,
                targets=(key,),
                references=() if compiled else ("naive",),
                compile=compiled,
                compile_backend=args.compile_backend,
                model_overrides=args.model_overrides,
                unverified_compile=True,
            )  # this run is what verifies a compiled configuration
            t0 = time.perf_counter()
            try:
                torch.compiler.reset()  # each model compiles afresh
                report = run_bench(opts)
                if report.get("non_finite"):
                    raise FloatingPointError("; ".join(report["non_finite"]))
                m = report["models"][0]
                if not compiled:
                    row.update(
                        naive_images_per_s=m["naive"] and m["naive"]["images_per_s"],
                        n_params=m["n_params"],
                        name=m["name"],
                    )
                naive = row.get("naive_images_per_s")  # the eager run's reference (a compiled run times none)
                row[label] = {
                    **{k: m["fast"][k] for k in FAST_FIELDS},
                    "seconds": time.perf_counter() - t0,
                    **{k: report[k] for k in ("precision", "peak_tflops", "peak_source")},
                    "speedup_vs_naive": m["fast"]["images_per_s"] / naive if naive else None,
                }
            except Exception as e:  # one model's failure is recorded; the others still run
                row[label] = {"error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - t0}
        if "error" not in row["eager"] and "error" not in row["compiled"]:
            row["compile_speedup"] = row["compiled"]["images_per_s"] / row["eager"]["images_per_s"]
            row["compile_s"] = row["compiled"]["warmup_s"]  # warm-up = compilation + the warm-up steps
        rows.append(row)
        if on_row is not None and len(rows) < len(plan):
            on_row({**_bench_part(rows, budget_s, t_part, args), "status": "running"})
    return _bench_part(rows, budget_s, t_part, args)


def _bench_part(rows: list[dict], budget_s: float, t_part: float, args) -> dict:
    failed = [
        f"{r['key']} {lab}: {r[lab]['error']}"
        for r in rows
        for lab in ("eager", "compiled")
        if "error" in r[lab]
    ]
    return _part(
        failed,
        budget_s,
        t_part,
        planned_s=sum(r["planned_s"] for r in rows),
        compile_backend=args.compile_backend,
        model_overrides=args.model_overrides,
        models=rows,
    )


# ------------------------------------------------------------------- study
def study_spec(args, budget_s: float, peak: dict) -> tuple[dict, list[dict]]:
    """The study file (``args.epochs`` epochs of the paper's recipe) and its plan: per model the
    FLOPs and predicted seconds; models that would not fit the budget are left out, with the reason."""
    from study.cost.flops import forward_flops
    from study.cost.plan import CIFAR10_SIZES
    from study.models import ModelConfig, build_model, model_name

    n_train, n_test = (200, 100) if args.small else CIFAR10_SIZES
    entries, plan = [], []
    for key, cfg in args.configs.items():
        base = ModelConfig(arch=cfg.arch).to_dict()
        entry = {k: v for k, v in cfg.to_dict().items() if v != base[k] or k == "arch"}
        if cfg.arch == "resnet18":
            entry["training"] = {"schedule": {"type": "step"}}
        fwd = forward_flops(build_model(cfg))
        flops = args.epochs * (3 * fwd * n_train + fwd * n_test)
        plan.append(
            {
                "key": key,
                "name": model_name(cfg),  # the runs table's name of this model's trial
                "forward_flops": fwd,
                "flops": flops,
                "planned_s": planned_seconds(flops, peak["bf16_tflops"], args.assumed_mfu),
            }
        )
        entries.append(entry)
    total = 0.0
    for item in sorted(plan, key=lambda p: p["flops"]):
        item["included"] = (
            args.small or item["planned_s"] is None or total + item["planned_s"] <= 0.8 * budget_s
        )
        if item["included"]:
            total += item["planned_s"] or 0.0
        else:
            item["reason"] = (
                f"{item['planned_s']:.0f} s planned would exceed the part's budget of {budget_s:.0f} s"
            )
    models = [e for e, p in zip(entries, plan) if p["included"]]
    spec = {
        "name": "gpu-check",
        "data": args.data,
        "epochs": args.epochs,
        "batch_size": 20 if args.small else 100,
        "optimizer": {"lr": 0.1, "momentum": 0.9, "weight_decay": 1.0e-4},
        "schedule": {"type": "cosine", "warmup": 0.05},
        "seeds": [0],
        "models": models,
        "training": {"head_images": 4 if args.small else 100},
        "resources": (
            {"gpus_per_trial": 1, "cpus_per_trial": 4}
            if args.device.type == "cuda"
            else {"gpus_per_trial": 0, "cpus_per_trial": 1}
        ),
        "max_failures": 0,
    }
    if args.small:
        spec["subset"] = n_train + n_test
    return spec, plan


def run_study(args, budget_s: float, peak: dict, out: Path) -> dict:
    """``study run`` of :func:`study_spec` (a subprocess: the command users run), then its ``runs`` table."""
    import yaml

    spec, plan = study_spec(args, budget_s, peak)
    res = {
        "data": args.data,
        "epochs": args.epochs,
        "plan": plan,
        "budget_s": budget_s,
        "planned_s": sum(p["planned_s"] or 0.0 for p in plan if p["included"]),
        "trials": [],
    }
    if importlib.util.find_spec("ray") is None:
        res.update(
            status="skipped",
            seconds=0.0,
            reason="needs Ray, which is not importable here (docs/design.md §11: install the wheels into "
            "/tmp/site and export PYTHONPATH=/tmp/site)",
        )
        return res
    spec_path = out / "gpu-check.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    storage = out / "study"
    cmd = [sys.executable, "-m", "study", "run", str(spec_path), "--storage", str(storage), "--quiet"]
    if args.device.type == "cpu":
        cmd += ["--num-cpus", "2"]
    res["command"] = " ".join(["python", *cmd[1:]])
    t0 = time.perf_counter()
    rc, tail = _subprocess(cmd, max(budget_s * 2, 300))
    res["seconds"], res["exit_status"] = time.perf_counter() - t0, rc
    res["trials"] = _trials(storage / spec["name"] / "tables")
    finished = [t for t in res["trials"] if t["status"] == "finished"]
    return _verdict(res, rc == 0 and len(finished) == len(spec["models"]), tail)


def _trials(tables: Path) -> list[dict]:
    """Each trial of the ``runs`` table under ``tables``, its epochs' median images/s and last train loss."""
    from study.results.tables import read_table

    if not tables.exists():
        return []
    runs, epochs = read_table(tables, "runs"), read_table(tables, "epochs")
    stats = {}
    if len(epochs):
        stats = (
            epochs.groupby("trial_id")
            .agg(images_per_s=("images_per_s", "median"), train_loss=("train_loss", "last"))
            .to_dict("index")
        )
    return [
        {
            "name": r["name"],
            "status": r["status"],
            "epochs_done": int(r["epochs_done"]),
            "final_test_acc": float(r["final_test_acc"]),
            "device_seconds": float(r["device_seconds"]),
            **stats.get(r["trial_id"], {"images_per_s": None, "train_loss": None}),
            "failed_to_train": why if isinstance(why := r.get("failed_to_train"), str) else None,
            "n_train": int(r["n_train"]),
            "device": r["device"],
        }
        for _, r in runs.iterrows()
    ]


# ----------------------------------------------------------------- reports
def _section(heading: str, header: str, rows: list[list], *before: str) -> list[str]:
    """``heading``, the lines ``before``, then a Markdown table (``header``: its comma-separated columns)."""
    cells = header.split(",")
    table = ["| " + " | ".join(map(str, r)) + " |" for r in [cells, ["---"] * len(cells), *rows]]
    return ["", heading, "", *before, *table]


def markdown(report: dict) -> str:
    from study.bench.report import or_na

    parts, peak = report["parts"], report["peak"]
    lines = [
        f"# GPU check: {report['device_name']} ({report['device']})",
        *_section(
            f"torch {report['torch']}, budget {report['budget_s'] / 60:.1f} min, "
            f"took {report['seconds'] / 60:.1f} min; peak bf16 {or_na(peak['bf16_tflops'], '.3g')} TFLOP/s "
            f"({peak['bf16_source']}), fp32 {or_na(peak['fp32_tflops'], '.3g')} TFLOP/s; sizes planned at "
            f"MFU {report['assumed_mfu']:.2f}{' (--small)' if report['small'] else ''}",
            "part,status,planned s,seconds",
            [
                [name, part["status"], or_na(part.get("planned_s"), ".3g"), or_na(part.get("seconds"), ".0f")]
                for name, part in parts.items()
            ],
        ),
    ]
    for name, part in parts.items():
        if part.get("error") or part.get("reason"):
            lines += [
                "",
                f"**{name}**: " + (part.get("reason") or ""),
                "",
                "```",
                part.get("error", "")[-1500:],
                "```",
            ]
    # a part that raised has only its status and error (above), none of its tables
    if (t := parts.get("tests")) and "command" in t:
        lines += [
            "",
            "## CUDA tests",
            "",
            f"`{t['command']}`: {t['passed']} passed, {t['failed']} failed, "
            f"{t['skipped']} skipped" + (f" ({'; '.join(t['skip_reasons'])})" if t["skip_reasons"] else ""),
        ]
        lines += [f"- failed: {f}" for f in t["failures"]]
    if (tr := parts.get("train")) and "runs" in tr:
        rows = [
            [
                r["key"],
                r["run"],
                r.get("status", "-"),
                or_na(r.get("final_test_acc"), ".1%"),
                or_na(r.get("train_loss"), ".3f"),
                or_na(r.get("images_per_s"), ".0f"),
                f"{r['seconds']:.0f}",
                "yes" if "error" not in r else f"no: {r['error'][:100]}",
            ]
            for r in tr["runs"]
        ]
        lines += _section(
            f"## study train: one epoch of each paper model on {tr['data']} (warm-up "
            f"{tr['warmup_steps']} steps; passes at test accuracy >= {tr['min_accuracy']:.0%})",
            "model,run,status,test acc,train loss,img/s,seconds,passed",
            rows,
        )
    if (b := parts.get("bench")) and "models" in b:
        rows = []
        for r in b["models"]:
            for label in ("eager", "compiled"):
                rec, head = r[label], [r["key"], r["batch"], r["steps"]]
                if "error" in rec:
                    rows.append([*head, label, f"error: {rec['error'][:80]}", "", "", "", ""])
                    continue
                rows.append(
                    [
                        *head,
                        f"{label} ({rec['precision']})",
                        f"{rec['images_per_s']:.1f}",
                        or_na(rec["mfu"], ".1%"),
                        or_na(rec["peak_memory_mb"], ".0f"),
                        or_na(rec["speedup_vs_naive"], ".2f", "x"),
                        or_na(r.get("compile_s") if label == "compiled" else None, ".1f"),
                    ]
                )
        lines += _section(
            "## study bench, training step (forward + backward + SGD)",
            "model,batch,steps,run,img/s,MFU,peak MB,vs naive fp32,compile s",
            rows,
        )
    if (s := parts.get("study")) and "trials" in s:
        trials = {t["name"]: t for t in s["trials"]}
        rows = []
        for p in s["plan"]:
            tr = trials.get(p["name"], {})
            rows.append(
                [
                    p["key"],
                    or_na(p["planned_s"], ".0f"),
                    "yes" if p["included"] else p["reason"],
                    tr.get("status", "-"),
                    or_na(tr.get("final_test_acc"), ".4f"),
                    or_na(tr.get("device_seconds"), ".0f"),
                    or_na(tr.get("images_per_s"), ".0f"),
                ]
            )
        lines += _section(
            f"## study run: {s['epochs']} epoch(s) on {s['data']}",
            "model,planned s,included,trial status,final test acc,device s,img/s",
            rows,
            *([f"`{s['command']}`", ""] if s.get("command") else []),
        )
    return "\n".join(lines) + "\n"


def write_reports(report: dict, out: Path) -> None:
    """``gpu_check.json`` and ``gpu_check.md`` under ``out``, each replaced atomically."""
    from study.results.atomicio import write_atomic

    write_atomic(out / "gpu_check.json", json.dumps(report, indent=2, default=str).encode(), mode=0o644)
    write_atomic(out / "gpu_check.md", markdown(report).encode(), mode=0o644)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from study.bench.runner import device_name

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    budget_s = 60 * args.budget_minutes
    peak = device_peak(args.device)
    report = {
        "device": str(args.device),
        "device_name": device_name(args.device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "ray": importlib.util.find_spec("ray") is not None,
        "small": args.small,
        "budget_s": budget_s,
        "assumed_mfu": args.assumed_mfu,
        "peak": peak,
        "parts": {},
    }

    def record(name: str, part: dict) -> None:  # after every part: a run cut short still leaves its reports
        report["parts"][name] = part
        report["seconds"] = time.perf_counter() - t0
        write_reports(report, out)

    runners = {
        "tests": lambda b: run_tests(args, b, out),
        "train": lambda b: run_training(args, b, out, lambda part: record("train", part)),
        "bench": lambda b: run_benches(args, b, peak, lambda part: record("bench", part)),
        "study": lambda b: run_study(args, b, peak, out),
    }
    for name in (n for n in PARTS if n in args.parts):
        part_budget = SHARES[name] * budget_s
        print(f"[gpu_check] {name} (budget {part_budget:.0f} s)", file=sys.stderr, flush=True)
        try:
            part = runners[name](part_budget)
        except Exception as e:  # a broken part is recorded; the others still run
            part = {"status": "failed", "error": f"{type(e).__name__}: {e}", "seconds": None}
        record(name, part)
    status = {n: p["status"] for n, p in report["parts"].items()}
    print(f"[gpu_check] {status}; reports: {out / 'gpu_check.json'}, {out / 'gpu_check.md'}", file=sys.stderr)
    return 1 if "failed" in status.values() else 0


if __name__ == "__main__":
    sys.exit(main())
