"""Readable tables for a ``study bench`` report (the dict of :func:`run_bench`)."""

from __future__ import annotations

COLUMNS = (
    "model",
    "run",
    "path",
    "img/s",
    "ms/step",
    "fwd GFLOP/img",
    "TFLOP/s",
    "MFU",
    "peak MB",
    "step MB",
    "vs naive",
    "vs einsum",
)
CPU_COLUMNS = ("cpu ms/step", "vs naive (cpu time)", "vs einsum (cpu time)")
#: (run, record, its speedup over naive, over einsum): the key of the speedup in the report's row, 1 for the
#: reference itself, None for none; a model's missing reference is left out, the layer's printed as "-"
MODEL_RUNS = (
    ("fast", "fast", "speedup_vs_naive", "speedup_vs_einsum"),
    ("naive", "naive", 1, None),
    ("einsum", "einsum", None, 1),
)
ATTENTION_RUNS = (
    ("fast p=0", "fast", "speedup_vs_naive", None),
    ("train p=0.1", "train", "train_speedup_vs_naive", "train_speedup_vs_einsum"),
    ("einsum p=0.1", "einsum", None, 1),
    ("naive", "naive", 1, None),
    ("core fast", "core_fast", "core_speedup_vs_naive", None),
    ("core naive", "core_naive", 1, None),
)


def or_na(v, fmt: str, unit: str = "") -> str:
    """``v`` formatted with ``unit`` after it, or "n/a" for None."""
    return "n/a" if v is None else format(v, fmt) + unit


def _row(label: str, row: dict, run: str, key: str, naive, einsum, *, cpu: bool) -> list:
    """The table row of record ``row[key]``; ``naive``, ``einsum``: as in :data:`MODEL_RUNS`."""
    n, rec = len(COLUMNS) + (len(CPU_COLUMNS) if cpu else 0), row.get(key)
    if rec is None:
        return [label, run, *["-"] * (n - 2)]
    naive, einsum = (
        (1.0, 1.0) if k == 1 else (row.get(k), row.get(f"{k}_cpu_time")) for k in (naive, einsum)
    )
    cells = [
        label,
        run,
        rec["path"],
        or_na(rec["images_per_s"], ".1f"),
        or_na(rec["step_ms"], ".1f"),
        or_na(rec["forward_flops"] / 1e9, ".3f"),
        or_na(rec["tflops"], ".3f"),
        or_na(rec["mfu"], ".2%"),
        or_na(rec["peak_memory_mb"], ".0f"),
        or_na(rec["step_memory_mb"], ".0f"),
        or_na(naive[0], ".2f", "x"),
        or_na(einsum[0], ".2f", "x"),
    ]
    cpu_cells = [
        or_na(1e3 * rec["cpu_s_per_step"], ".1f"),
        or_na(naive[1], ".2f", "x"),
        or_na(einsum[1], ".2f", "x"),
    ]
    return cells + (cpu_cells if cpu else [])


def format_report(report: dict) -> str:
    import pandas as pd

    cpu = report["device"] == "cpu"
    columns = COLUMNS + (CPU_COLUMNS if cpu else ())
    peak = report["peak_tflops"]
    compiled = f", torch.compile ({report.get('compile_backend') or 'inductor'})" if report["compile"] else ""
    lines = [
        f"study bench: {report['device']} ({report['device_name']}), torch {report['torch']}, "
        f"{report['precision']}{compiled}{', channels-last ResNet' if report.get('channels_last') else ''}, "
        f"batch {report['batch']}, {report['steps']} timed steps x {report['repeats']} window(s) "
        f"after {report['warmup']} warm-up",
        f"peak for MFU: {'n/a' if peak is None else f'{peak:.3f} TFLOP/s'}"
        + (
            f" ({report['peak_cpu_tflops']:.3f} TFLOP per CPU-second)"
            if report.get("peak_cpu_tflops")
            else ""
        )
        + f" ({report['peak_source']})",
        "step = forward + backward + SGD on a device-resident batch; TFLOP/s = 3 x forward FLOPs of the "
        "timed path x img/s (median window); naive = study.bench.naive: float32, eager, no attention "
        "dropout; einsum = study.bench.einsum_ref: the original's einsum formulation, float32, with the "
        "layer's dropout (compare with the training path)",
        "peak MB = torch.cuda.max_memory_allocated (n/a on CPU); step MB = rise over the memory held "
        "before the warm-up steps (CPU: peak RSS rise, approximate)",
    ]
    if cpu:
        lines.append("cpu ms/step = process CPU time per step, all threads (insensitive to other jobs' load)")

    def table(records: list[dict], runs: tuple, *, missing: bool) -> str:
        """A row per run of each record (a run without a record: a row of "-" if ``missing``, else none)."""
        rows = [
            _row("" if i else r["name"], r, *run, cpu=cpu)
            for r in records
            for i, run in enumerate(runs)
            if missing or r.get(run[1]) is not None
        ]
        return pd.DataFrame(rows, columns=columns).to_string(index=False)

    if report["models"]:
        lines += [
            "",
            "Whole model, training mode (paper dropout 0.1 everywhere)",
            table(report["models"], MODEL_RUNS, missing=False),
            "forward FLOPs per image, eval path (study.cost.flops.forward_flops): "
            + "; ".join(f"{m['name']} {m['forward_flops'] / 1e9:.3f} G" for m in report["models"]),
        ]
    if report["attention"]:
        lines += [
            "",
            "Attention layer alone (D=400, N_h=9, 16x16 grid; input requires grad as inside the network).",
            "fast p=0: eval / no probability dropout (every exact fast path); train p=0.1: the paper's "
            "dropout, dense exact path; core = heads before the (N_h*D -> D) output projection",
            table(report["attention"], ATTENTION_RUNS, missing=True),
        ]
    if report.get("non_finite"):  # runs left out of the tables: one line each
        lines += ["", *report["non_finite"]]
    return "\n".join(lines)
