"""Readable tables for a ``study bench`` report (the dict of :func:`run_bench`)."""

from __future__ import annotations

from study.bench.timing import _cpu_ratio

COLUMNS = (
    "model", "run", "path", "img/s", "ms/step", "fwd GFLOP/img", "TFLOP/s", "MFU", "peak MB", "step MB", "vs naive",
    "vs einsum",
)
CPU_COLUMNS = ("cpu ms/step", "vs naive (cpu time)", "vs einsum (cpu time)")


def _num(v, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _ratio(v) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _mfu(v) -> str:
    return "n/a" if v is None else f"{100 * v:.2f}%"


def _row(label: str, run: str, rec: dict | None, ratio, cpu_ratio, *, cpu: bool,
         einsum=None, einsum_cpu=None) -> list[str]:
    n = len(COLUMNS) + (len(CPU_COLUMNS) if cpu else 0)
    if rec is None:
        return [label, run, *["-"] * (n - 2)]
    cells = [
        label, run, rec["path"],
        _num(rec["images_per_s"], ".1f"),
        _num(rec["step_ms"], ".1f"),
        _num(rec["forward_flops"] / 1e9, ".3f"),
        _num(rec["tflops"], ".3f"),
        _mfu(rec["mfu"]),
        _num(rec["peak_memory_mb"], ".0f"),
        _num(rec["step_memory_mb"], ".0f"),
        _ratio(ratio),
        _ratio(einsum),
    ]
    if cpu:
        cells += [_num(1e3 * rec["cpu_s_per_step"], ".1f"), _ratio(cpu_ratio), _ratio(einsum_cpu)]
    return cells


def _table(rows: list[list[str]], columns: tuple[str, ...]) -> str:
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    numeric = set(range(3, len(columns)))
    fmt = lambda cells: "  ".join(  # noqa: E731
        c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
    ).rstrip()
    return "\n".join([fmt(list(columns)), fmt(["-" * w for w in widths]), *map(fmt, rows)])


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
    one = lambda rec: 1.0 if rec else None  # noqa: E731
    if report["models"]:
        rows = []
        for m in report["models"]:
            cpu_ratio = _cpu_ratio(m["fast"], m["naive"])
            rows.append(_row(m["name"], "fast", m["fast"], m["speedup_vs_naive"], cpu_ratio, cpu=cpu,
                             einsum=m.get("speedup_vs_einsum"), einsum_cpu=m.get("speedup_vs_einsum_cpu_time")))
            if m["naive"] is not None:
                rows.append(_row("", "naive", m["naive"], 1.0, 1.0, cpu=cpu))
            if m.get("einsum") is not None:
                rows.append(_row("", "einsum", m["einsum"], None, None, cpu=cpu, einsum=1.0, einsum_cpu=1.0))
        lines += ["", "Whole model, training mode (paper dropout 0.1 everywhere)", _table(rows, columns)]
        lines.append("forward FLOPs per image, eval path (study.flops.forward_flops): " + "; ".join(
            f"{m['name']} {m['forward_flops'] / 1e9:.3f} G" for m in report["models"]))
    if report["attention"]:
        rows = []
        for a in report["attention"]:
            rows += [
                _row(a["name"], "fast p=0", a["fast"], a["speedup_vs_naive"],
                     a.get("speedup_vs_naive_cpu_time"), cpu=cpu),
                _row("", "train p=0.1", a["train"], a["train_speedup_vs_naive"],
                     a.get("train_speedup_vs_naive_cpu_time"), cpu=cpu, einsum=a.get("train_speedup_vs_einsum"),
                     einsum_cpu=a.get("train_speedup_vs_einsum_cpu_time")),
                _row("", "einsum p=0.1", a.get("einsum"), None, None, cpu=cpu, einsum=one(a.get("einsum")),
                     einsum_cpu=one(a.get("einsum"))),
                _row("", "naive", a["naive"], one(a["naive"]), one(a["naive"]), cpu=cpu),
                _row("", "core fast", a["core_fast"], a["core_speedup_vs_naive"],
                     a.get("core_speedup_vs_naive_cpu_time"), cpu=cpu),
                _row("", "core naive", a["core_naive"], one(a["core_naive"]), one(a["core_naive"]), cpu=cpu),
            ]
        lines += [
            "",
            "Attention layer alone (D=400, N_h=9, 16x16 grid; input requires grad as inside the network).",
            "fast p=0: eval / no probability dropout (every exact fast path); train p=0.1: the paper's "
            "dropout, dense exact path; core = heads before the (N_h*D -> D) output projection",
            _table(rows, columns),
        ]
    return "\n".join(lines)
