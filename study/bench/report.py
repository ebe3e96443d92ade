"""Readable tables for a ``study bench`` report (the dict of :func:`run_bench`)."""

from __future__ import annotations

COLUMNS = (
    "model", "run", "path", "img/s", "ms/step", "fwd GFLOP/img", "TFLOP/s", "MFU", "peak MB", "step MB", "vs naive",
    "vs einsum",
)
CPU_COLUMNS = ("cpu ms/step", "vs naive (cpu time)", "vs einsum (cpu time)")


def or_na(v, fmt: str) -> str:
    """``v`` formatted, or "n/a" for None."""
    return "n/a" if v is None else format(v, fmt)


def _row(label: str, run: str, rec: dict | None, naive=(None, None), einsum=(None, None), *, cpu: bool) -> list:
    """One table row; ``naive`` and ``einsum``: the (images/s, CPU-time) speedups against them."""
    n = len(COLUMNS) + (len(CPU_COLUMNS) if cpu else 0)
    if rec is None:
        return [label, run, *["-"] * (n - 2)]
    cells = [label, run, rec["path"], or_na(rec["images_per_s"], ".1f"), or_na(rec["step_ms"], ".1f"),
             or_na(rec["forward_flops"] / 1e9, ".3f"), or_na(rec["tflops"], ".3f"),
             "n/a" if rec["mfu"] is None else f"{100 * rec['mfu']:.2f}%",
             or_na(rec["peak_memory_mb"], ".0f"), or_na(rec["step_memory_mb"], ".0f"),
             _ratio(naive[0]), _ratio(einsum[0])]
    return cells + ([or_na(1e3 * rec["cpu_s_per_step"], ".1f"), _ratio(naive[1]), _ratio(einsum[1])] if cpu else [])


def _ratio(v) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _table(rows: list[list[str]], columns: tuple[str, ...]) -> str:
    import pandas as pd

    return pd.DataFrame(rows, columns=list(columns)).to_string(index=False)


def format_report(report: dict) -> str:
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
        + (f" ({report['peak_cpu_tflops']:.3f} TFLOP per CPU-second)" if report.get("peak_cpu_tflops") else "")
        + f" ({report['peak_source']})",
        "step = forward + backward + SGD on a device-resident batch; TFLOP/s = 3 x forward FLOPs of the "
        "timed path x img/s (median window); naive = study.bench.naive: float32, eager, no attention dropout; "
        "einsum = study.bench.einsum_ref: the original's einsum formulation, float32, with the layer's dropout "
        "(compare with the training path)",
        "peak MB = torch.cuda.max_memory_allocated (n/a on CPU); step MB = rise over the memory held "
        "before the warm-up steps (CPU: peak RSS rise, approximate)",
    ]
    if cpu:
        lines.append("cpu ms/step = process CPU time per step, all threads (insensitive to other jobs' load)")
    def vs(row: dict, key: str) -> tuple:
        return row.get(key), row.get(key + "_cpu_time")

    if report["models"]:
        rows = []
        for m in report["models"]:
            rows.append(_row(m["name"], "fast", m["fast"], vs(m, "speedup_vs_naive"), vs(m, "speedup_vs_einsum"),
                             cpu=cpu))
            rows += [_row("", "naive", m["naive"], (1.0, 1.0), cpu=cpu)] if m["naive"] is not None else []
            rows += [_row("", "einsum", m["einsum"], einsum=(1.0, 1.0), cpu=cpu)] if m.get("einsum") else []
        lines += ["", "Whole model, training mode (paper dropout 0.1 everywhere)", _table(rows, columns)]
        lines.append("forward FLOPs per image, eval path (study.flops.forward_flops): " + "; ".join(
            f"{m['name']} {m['forward_flops'] / 1e9:.3f} G" for m in report["models"]))
    if report["attention"]:
        rows = []
        for a in report["attention"]:
            rows += [
                _row(a["name"], "fast p=0", a["fast"], vs(a, "speedup_vs_naive"), cpu=cpu),
                _row("", "train p=0.1", a["train"], vs(a, "train_speedup_vs_naive"),
                     vs(a, "train_speedup_vs_einsum"), cpu=cpu),
                _row("", "einsum p=0.1", a.get("einsum"), einsum=(1.0, 1.0), cpu=cpu),  # rec None: a row of "-"
                _row("", "naive", a["naive"], (1.0, 1.0), cpu=cpu),
                _row("", "core fast", a["core_fast"], vs(a, "core_speedup_vs_naive"), cpu=cpu),
                _row("", "core naive", a["core_naive"], (1.0, 1.0), cpu=cpu),
            ]
        lines += [
            "",
            "Attention layer alone (D=400, N_h=9, 16x16 grid; input requires grad as inside the network).",
            "fast p=0: eval / no probability dropout (every exact fast path); train p=0.1: the paper's "
            "dropout, dense exact path; core = heads before the (N_h*D -> D) output projection",
            _table(rows, columns),
        ]
    return "\n".join(lines)
