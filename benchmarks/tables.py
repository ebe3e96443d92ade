"""Benchmark of the results store: a synthetic study written with the project's own
``TableWriter``, then its files, bytes and ``analysis query`` wall times.

    python benchmarks/tables.py --out /tmp/tables-bench            # 64 x 300

What it measures, and the results: docs/results.md, "The results store" ("Measured").
Prints numbers; asserts nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
from scipy.special import softmax

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
QUERIES = {
    "count epochs": "SELECT count(*) FROM epochs",
    "last-epoch heads": "SELECT layer, count(*) AS n, avg(max_prob) AS max_prob, avg(entropy) AS entropy "
    "FROM heads WHERE epoch = (SELECT max(epoch) FROM heads) GROUP BY layer ORDER BY layer",
}
#: the measured per-head statistics, columns of the synthetic draws
HEAD_STATS = ("center_x", "center_y", "cov_xx", "cov_xy", "cov_yy", "entropy", "mean_distance", "max_prob")


def synthetic_rows(rng: np.random.Generator, *, layers: int, heads: int, window: int, maps: bool) -> dict:
    """One epoch of one trial, shaped like the trial loop's rows: table -> rows."""
    from study.results.tables import SCHEMA

    n, nan = layers * heads, float("nan")
    r, v = rng.random(6), rng.normal(size=(n, 8))
    v[:, [2, 4, 5, 6, 7]] = np.abs(v[:, [2, 4, 5, 6, 7]])  # variances, entropy, distance, probability
    v[:, 7] %= 1
    params = [c for c in SCHEMA["heads"] if c.startswith("param_")]  # learned-Gaussian fields: none here
    rows = {
        "epochs": [
            {
                "train_loss": 2.3 * r[0],
                "train_acc": r[1],
                "test_loss": 2.3 * r[2],
                "test_acc": r[3],
                "lr": 0.1 * r[4],
                "seconds": 30 + r[5],
                "images_per_s": 2000.0,
                "head_stats_seconds": 0.1,
            }
        ],
        "heads": [
            {
                "layer": i // heads,
                "head": i % heads,
                **dict(zip(HEAD_STATS, v[i])),
                **dict.fromkeys(params, nan),
            }
            for i in range(n)
        ],
    }
    if maps:
        p = softmax(rng.normal(scale=3.0, size=(n, window * window)), axis=1)
        rows["maps"] = [
            {"layer": i // heads, "head": i % heads, "window": window, "probs": p[i].tolist()}
            for i in range(n)
        ]
    return rows


def _write_trials(
    tables: Path, ids: list[str], gen_args: dict, epochs: int, span: range, maps_at, close: bool
) -> None:
    """One worker's share of the trials (``--jobs``), the epochs of ``span``, with this tree's writer."""
    from study.results.tables import TableWriter

    rng = np.random.default_rng(zlib.crc32(ids[0].encode()))  # hash() differs per process
    writers = [TableWriter(tables, trial_id=t) for t in ids]
    for epoch in span:
        for w in writers:
            for table, rows in synthetic_rows(rng, **gen_args, maps=epoch in maps_at).items():
                w.rows(table, epoch, rows)
            w.run(
                {
                    "study": "bench",
                    "name": "SA bench",
                    "status": "running" if epoch + 1 < epochs else "finished",
                    "epochs_done": epoch + 1,
                    "epochs": epochs,
                    "best_test_acc": 0.5,
                    "final_test_acc": 0.5,
                }
            )
    if close:
        for w in writers:
            w.close()


def write_parallel(tables: Path, ids: list[str], jobs: int, *args) -> None:
    """Trials written side by side by ``jobs`` processes, as a study's trials are; ``args``: those of
    :func:`_write_trials` after ``ids``."""
    from multiprocessing import get_context

    shares = [ids[i::jobs] for i in range(jobs) if ids[i::jobs]]
    with get_context("spawn").Pool(len(shares)) as pool:
        pool.starmap(_write_trials, [(tables, s, *args) for s in shares])


def time_queries(study: Path, repeats: int) -> dict:
    """Wall and CPU (user + system) seconds of ``analysis query`` run from this tree."""
    import resource

    out = {}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for label, sql in QUERIES.items():
        walls, cpus, answer = [], [], ""
        for _ in range(repeats):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            r = subprocess.run(
                [sys.executable, "-m", "analysis", "query", str(study), sql, "--format", "csv"],
                capture_output=True,
                text=True,
                env=env,
            )
            walls.append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if r.returncode != 0:
                raise SystemExit(f"analysis query failed: {r.stderr.strip()}")
            rows = r.stdout.strip().splitlines()
            answer = rows[1] if label == "count epochs" else f"{len(rows) - 1} rows"
        out[label] = {
            "wall_best_s": round(min(walls), 2),
            "wall_median_s": round(statistics.median(walls), 2),
            "cpu_best_s": round(min(cpus), 2),
            "answer": answer,
        }
    return out


def measure(label: str, study: Path, repeats: int) -> dict:
    """The files and bytes of ``study``'s tables and its query times, printed as one JSON line."""
    files = [p for p in (study / "tables").rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    load = os.getloadavg()[0]
    queries = time_queries(study, repeats)
    result = {
        "state": label,
        "files": len(files),
        "bytes": size,
        "MB": round(size / 1e6, 1),
        "load_1min_before": round(load, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
        "queries": queries,
    }
    print(json.dumps(result), flush=True)
    return result


def main(argv=None) -> int:
    from study import limits
    from study.cliutil import BoundedInt, Parser, local_path, model_int

    ap = Parser(prog="tables.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=local_path, required=True, help="folder for the synthetic study (replaced)")
    ap.add_argument("--trials", type=BoundedInt(1, limits.MAX_TRIALS, "MAX_TRIALS"), default=64)
    ap.add_argument("--epochs", type=BoundedInt(1, limits.MAX_EPOCHS, "MAX_EPOCHS"), default=300)
    ap.add_argument("--layers", type=model_int("layers"), default=6)
    ap.add_argument("--heads", type=model_int("num_heads"), default=9)
    ap.add_argument(
        "--window", type=BoundedInt(1, limits.MAX_MODEL_FIELD["image_size"], "MAX_MODEL_FIELD"), default=15
    )
    ap.add_argument("--repeats", type=BoundedInt(1, limits.MAX_BENCH_REPEATS, "MAX_BENCH_REPEATS"), default=3)
    ap.add_argument(
        "--jobs",
        type=BoundedInt(1, limits.MAX_CPUS_PER_TRIAL, "MAX_CPUS_PER_TRIAL"),
        default=1,
        help="processes writing trials side by side",
    )
    ap.add_argument("--keep", action="store_true", help="keep the study folder afterwards")
    args = ap.parse_args(argv)

    from study.trial.config import TrainConfig

    study = args.out / "bench"
    shutil.rmtree(study, ignore_errors=True)
    tables = study / "tables"
    tables.mkdir(parents=True)
    (study / "study.json").write_text(json.dumps({"name": study.name}))
    ids = [f"c{i:03d}-s000" for i in range(args.trials)]
    print(
        f"{args.trials} trials x {args.epochs} epochs, {args.layers} x {args.heads} heads, "
        f"{args.window}x{args.window} maps -> {study}",
        file=sys.stderr,
        flush=True,
    )
    maps_at = set(TrainConfig(epochs=args.epochs).maps_at)
    # mid-way between two compactions (parts present), within the run: a short one is all parts
    half = min(args.epochs // 2 + 5, args.epochs)
    gen_args = {"layers": args.layers, "heads": args.heads, "window": args.window}
    t0 = time.time()
    for state, span in (("running", range(half)), ("finished", range(half, args.epochs))):
        write_parallel(tables, ids, args.jobs, gen_args, args.epochs, span, maps_at, state == "finished")
        print(
            f"  written {span.stop}/{args.epochs} epochs ({time.time() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        measure(state, study, args.repeats)
    if not args.keep:
        shutil.rmtree(study, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
