"""``study plan FILE``: a study's compute before anything runs (:mod:`study.cost.plan`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from study import limits
from study.cliutil import BoundedFloat, BoundedInt
from study.commands.studies import add_study_file
from study.device.cpus import local_cpus
from study.driver import load_checked
from study.errors import UsageError, refused
from study.results.metafile import MetaFileError, read_json
from study.results.storage import resolve_storage, study_root

#: A `study bench --json` report is a few kilobytes; refuse anything far larger.
MAX_BENCH_BYTES = 16 * 2**20


def register(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="a study's FLOPs, device-hours and wall time, before it runs",
        description="Per trial and in total: training FLOPs (3 x forward x training images x epochs), "
        "evaluation FLOPs (forward x (test + validation) images x epochs) and head-statistics FLOPs, "
        "counted from the models' equations (2 x MACs per image). With a throughput (--tflops, "
        "--images-per-s or --bench) also the predicted device-seconds per trial (what runs.device_seconds "
        "will measure: training + evaluation), the device-hours, and the wall time on --workers workers "
        "with the trials started longest-predicted first (as `study run` starts them). Trials are "
        "listed in that order.",
        epilog="Without a throughput only FLOPs are printed (no timing is guessed). A folder or archive "
        "data source is listed (not decoded) to count its images.",
    )
    add_study_file(p)
    rate = p.add_mutually_exclusive_group()
    rate.add_argument(
        "--tflops",
        type=BoundedFloat(limits.MIN_TFLOPS, limits.MAX_TFLOPS, "MIN/MAX_TFLOPS"),
        help="sustained throughput in TFLOP/s of the counted FLOPs (e.g. 150 on one H100 in bf16)",
    )
    rate.add_argument(
        "--images-per-s",
        type=BoundedFloat(limits.MIN_IMAGES_PER_S, limits.MAX_IMAGES_PER_S, "MIN/MAX_IMAGES_PER_S"),
        help="training images per second of every trial's model (one model's study)",
    )
    rate.add_argument(
        "--bench",
        metavar="FILE",
        help="a `study bench --json` report: each trial at the bench's images/s of the same model, "
        "else at the FLOP rate of the bench models with its encoding",
    )
    p.add_argument(
        "--workers",
        type=BoundedInt(1, limits.MAX_CLUSTER_CPUS, "MAX_CLUSTER_CPUS"),
        help="trials running at once (default: what the study's resources allow on this machine)",
    )
    p.add_argument(
        "--against",
        metavar="STUDY",
        help="a finished run of this study (a study folder, or a name under $STUDY_STORAGE / ./results): "
        "beside each trial its measured runs.device_seconds and predicted / measured",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def read_bench(path: str) -> dict:
    """A ``study bench --json`` report, or one line naming what is wrong (exit 2);
    :mod:`study.results.metafile` refuses a FIFO, a device or a folder without blocking and bounds nesting
    and size."""
    try:
        report = read_json(path, max_bytes=MAX_BENCH_BYTES)
    except FileNotFoundError:
        raise UsageError(f"--bench: cannot read {path} (No such file or directory)") from None
    except MetaFileError as e:
        raise UsageError(f"--bench: {e}") from None
    except OSError as e:
        raise UsageError(f"--bench: cannot read {path} ({e.strerror or e})") from None
    from study.cost.plan import PlanError, bench_models

    with refused(PlanError, f"--bench: {path}: "):
        bench_models(report)
    return report


def default_workers(spec) -> tuple[int, str]:
    """Trials this machine runs at once under the study's resources (at least 1), and a note when it cannot
    run one."""
    from study.tuning.preflight import local_gpus

    res, note = spec.study.resources, ""
    n = int(local_cpus() // max(res.cpus_per_trial * res.workers_per_trial, 1e-9))
    if res.gpus_per_trial:
        gpus = local_gpus()
        n = min(n, int(gpus // (res.gpus_per_trial * res.workers_per_trial)))
        if n < 1:
            note = (
                f"this machine has {gpus} GPU(s) for gpus_per_trial {res.gpus_per_trial:g}: "
                "wall time for 1 worker (give --workers)"
            )
    if spec.study.max_concurrent:
        n = min(n, spec.study.max_concurrent)
    return max(n, 1), note


def source_sizes(spec) -> dict[str, tuple[int, int]]:
    """(train, test) images of the study's source if a folder or archive, listed (not decoded), as
    :func:`study.cost.plan.plan_trials` takes them; checked as `study run` checks it (layout, image
    headers)."""
    from study.data.errors import DataError
    from study.data.sources import check_source

    data = spec.study.data  # every trial's (no grid, sample or models entry sets it)
    with refused(DataError, f"{spec.file}: data: "):
        counted = check_source(data)
    return {} if counted is None else {data: counted}


def measured_seconds(study: str) -> dict[str, float]:
    """runs.device_seconds of every finished trial of a study (folder or name)."""
    with refused(ValueError, "--against: "):
        root = study if Path(study, "tables").is_dir() else study_root(resolve_storage(None), study)
    if "://" not in root and not Path(root, "tables").is_dir():
        raise UsageError(
            f"--against: no study at {root} (a study folder, or a name under $STUDY_STORAGE / ./results)"
        )
    from study.results.tables import read_table

    try:
        runs = read_table(f"{root}/tables", "runs")
    except (OSError, ValueError) as e:
        raise UsageError(
            f"--against: cannot read the runs table of {study} ({' '.join(str(e).split())[:160]})"
        ) from None
    if runs.empty or "device_seconds" not in runs:
        raise UsageError(f"--against: {study}: no trials with device_seconds in its runs table")
    done = runs[runs["status"] == "finished"]
    return {str(k): float(v) for k, v in zip(done["trial_id"], done["device_seconds"]) if v == v and v > 0}


def run(args: argparse.Namespace) -> int:
    from study.cost.plan import PlanError, Throughput, make_plan, table, to_json, total_line

    spec = load_checked(args.file, data=args.data, overrides=args.overrides)
    rates = dict(
        tflops=args.tflops,
        images_per_s=args.images_per_s,  # at most one: a mutually exclusive group
        bench=None if args.bench is None else read_bench(args.bench),
    )
    throughput = (
        Throughput(**rates, source=args.bench or "") if any(v is not None for v in rates.values()) else None
    )
    workers, note = (args.workers, "") if args.workers else default_workers(spec)
    with refused(PlanError, f"{spec.file}: "):
        plan = make_plan(spec, throughput=throughput, workers=workers, sizes=source_sizes(spec))
    if note:
        plan.notes.append(note)
    if args.against is not None:
        plan.measured = measured_seconds(args.against)
        if not set(plan.measured) & {t.key for t in plan.trials}:
            raise UsageError(
                f"--against: {args.against} has no finished trial of {spec.file} (trial ids differ)"
            )
    if throughput is None:
        plan.notes.append(
            "device-hours and wall time need a throughput: --tflops, --images-per-s or --bench "
            "(a `study bench --json` report)"
        )
    if args.json:
        print(json.dumps(to_json(plan), indent=2))
        return 0
    print(f"{spec.file}: {spec.num_trials} trials, in launch order (longest-predicted first)")
    print(table(plan))
    print(total_line(plan))
    for n in plan.notes:
        print(f"note: {n}", file=sys.stderr)
    return 0
