"""``study bench``: training throughput, FLOPs, MFU and memory of the paper's models
and of one attention layer, against two references of the same equations: a naive one
(correctness) and the original implementation's einsum formulation (speed)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import NoReturn

from study.cliutil import SEED, BoundedInt
from study.device.compilers import COMPILE_BACKENDS
from study.errors import UsageError
from study.limits import MAX_BENCH_BATCH, MAX_BENCH_REPEATS, MAX_BENCH_STEPS, MAX_CPUS_PER_TRIAL

_STEPS = BoundedInt(1, MAX_BENCH_STEPS, "MAX_BENCH_STEPS")


def register(sub) -> None:
    from study.models import PAPER_MODELS

    targets = ", ".join([*PAPER_MODELS, "attention"])
    p = sub.add_parser(
        "bench",
        help="measure training images/s, TFLOP/s, MFU and memory vs reference formulations",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "For each paper model (configs of study.models.PAPER_MODELS) on the current device:\n"
            "steady-state training images/s (forward + backward + SGD step on a device-resident\n"
            "batch, after warm-up, timed with torch.cuda.synchronize on GPU), forward FLOPs per\n"
            "image (study.cost.flops.forward_flops), achieved TFLOP/s (3 x forward FLOPs of the timed\n"
            "path), MFU against the stated peak and peak memory; then the references (--references)\n"
            "and the ratios fast/reference:\n"
            "  naive  = study.bench.naive: per-image (B,N_h,T,T) scores, generic einsum, float32,\n"
            "           eager, no dropout (a correctness reference);\n"
            "  einsum = study.bench.einsum_ref: the original implementation's plain einsums, float32,\n"
            "           eager, with the layer's dropout (the speed baseline of the training path).\n"
            "'attention' times one RelativeSelfAttention at paper dims (D 400, N_h 9, 16x16) for\n"
            "every encoding: without probability dropout (factorised P_row x P_col for separable\n"
            "encodings, SDPA on CUDA / explicit on CPU for content), with the paper's dropout 0.1\n"
            "(the training path), the references, and the attention core without the output\n"
            "projection; its variants interleave their timed windows.\n\n"
            "Peaks (dense, TFLOP/s): H100 SXM / H200 bf16 989, tf32 495, fp32 67; H100 PCIe bf16\n"
            "756; A100 bf16 312, tf32 156, fp32 19.5.  On CPU the peak is measured (best 1024^3\n"
            "matmul in the run's precision).  Other devices: n/a unless --peak-tflops.\n\n"
            f"targets: {targets}; attention:KEY times the layer of one SA model only"
        ),
    )
    p.add_argument(
        "--models", default="all", metavar="LIST", help="comma-separated targets, or 'all' (default)"
    )
    p.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda if available)")
    p.add_argument(
        "--batch",
        type=BoundedInt(1, MAX_BENCH_BATCH, "MAX_BENCH_BATCH"),
        help="images per step (default: 128 on CUDA, 8 on CPU)",
    )
    p.add_argument("--steps", type=_STEPS, help="timed steps (default: 50 on CUDA, 3 on CPU)")
    p.add_argument(
        "--warmup",
        type=_STEPS,
        help="untimed steps first (compilation; memory is read here), >= 1 (default: 10 on CUDA, 1 on CPU)",
    )
    p.add_argument(
        "--repeats",
        type=BoundedInt(1, MAX_BENCH_REPEATS, "MAX_BENCH_REPEATS"),
        help="timed windows of --steps steps per variant; img/s from the median window "
        "(default 1); attention-layer variants interleave their windows",
    )
    p.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        help="autocast dtype of the fast paths; float32 = no autocast "
        "(default: bfloat16 on CUDA, float32 on CPU); the naive reference is always float32",
    )
    p.add_argument(
        "--amp",
        action=argparse.BooleanOptionalAction,
        help="shorthand: --amp = --dtype bfloat16, --no-amp = --dtype float32",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the fast model / layer")
    p.add_argument(
        "--compile-backend",
        choices=COMPILE_BACKENDS,
        help="torch.compile backend with --compile (default inductor; aot_eager traces the same "
        "graphs without code generation)",
    )
    p.add_argument(
        "--lr",
        type=float,
        metavar="LR",
        help="SGD step size of a whole model's timed steps (default 0.01); a run whose steps give "
        "non-finite values is one line of the report, and the exit status is 1",
    )
    p.add_argument(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        help="ResNet in channels-last (NHWC) memory format (default: on CUDA only)",
    )
    p.add_argument(
        "--references",
        metavar="LIST",
        help="comma-separated references to time: naive, einsum, or none (default: naive,einsum)",
    )
    p.add_argument(
        "--naive",
        action=argparse.BooleanOptionalAction,
        help="shorthand: --no-naive drops the naive reference, --naive adds it",
    )
    p.add_argument(
        "--peak-tflops",
        type=float,
        metavar="TFLOPS",
        help="peak for MFU, overriding the table / CPU measurement",
    )
    p.add_argument(
        "--threads",
        type=BoundedInt(1, MAX_CPUS_PER_TRIAL, "MAX_CPUS_PER_TRIAL"),
        help="CPU threads for torch (default: torch's); 1 is steadier on a shared machine",
    )
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run)


def refuse(message: str) -> NoReturn:
    """The default ``error`` of the flag readers below: a refusal ``study.cli.main`` prints, exit 2."""
    raise UsageError(message)


def names_from_flag(
    text: str,
    *,
    flag: str,
    what: str,
    known: Callable[[str], bool],
    choices: str,
    error: Callable[[str], NoReturn] = refuse,
) -> tuple[str, ...]:
    """The comma-separated names of ``text``, each ``known``, else ``error`` one line."""
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [t for t in names if not known(t)]
    if bad or not names:
        error(f"{flag}: unknown {what} {bad[0] if bad else text!r}; choose from {choices}")
    return names


def check_device_flag(text: str | None, error: Callable[[str], NoReturn] = refuse) -> None:
    """``--device`` spelled cuda, cuda:N or cpu (or not given), without importing torch; else one line."""
    if text is not None and not re.fullmatch(r"(cpu|cuda)(:\d{1,4})?", text.strip()):
        error(f"--device: only cuda, cuda:N and cpu are supported, got {text[:40]!r}")


def device_from_flag(text: str | None, error: Callable[[str], NoReturn] = refuse):
    """``--device``: cuda, cuda:N or cpu (checked before torch is imported), else one line; default
    cuda if any."""
    check_device_flag(text, error)
    import torch

    device = torch.device(text.strip() if text else "cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        error("--device: CUDA is not available on this machine")
    return device


def options_from_args(args: argparse.Namespace):
    # what needs no torch first (sizes are bounded by their argparse types): a refusal costs < 1 s CPU
    if args.peak_tflops is not None and not 0 < args.peak_tflops < float("inf"):
        raise UsageError(f"--peak-tflops: must be > 0 and finite, got {args.peak_tflops}")
    if args.dtype is not None and args.amp is not None:
        raise UsageError("--amp/--no-amp: give either --dtype or --amp, not both")
    if args.lr is not None and not 0 < args.lr < float("inf"):
        raise UsageError(f"--lr: must be > 0 and finite, got {args.lr}")
    if args.compile_backend is not None and not args.compile:
        raise UsageError("--compile-backend: only with --compile")
    from study.bench.targets import ALL_TARGETS, is_target

    targets = (
        ALL_TARGETS
        if args.models.strip() == "all"
        else names_from_flag(
            args.models,
            flag="--models",
            what="target",
            known=is_target,
            choices=f"{', '.join(ALL_TARGETS)}, attention:KEY or all",
        )
    )
    device = device_from_flag(args.device)
    import torch

    from study.bench.references import REFERENCES
    from study.bench.runner import default_options

    if args.references is None:  # --references (default every reference), then --naive/--no-naive
        refs = list(REFERENCES)
    elif args.references.strip() == "none":
        refs = []
    else:
        refs = list(
            names_from_flag(
                args.references,
                flag="--references",
                what="reference",
                known=REFERENCES.__contains__,
                choices=f"{', '.join(REFERENCES)} or none",
            )
        )
    if args.naive is False:
        refs = [r for r in refs if r != "naive"]
    elif args.naive and "naive" not in refs:
        refs.insert(0, "naive")
    opts = default_options(
        device,
        batch=args.batch,
        steps=args.steps,
        warmup=args.warmup,
        repeats=args.repeats,
        compile=args.compile,
        compile_backend=args.compile_backend,
        channels_last=args.channels_last,
        references=tuple(dict.fromkeys(refs)),
        targets=targets,
        peak_tflops=args.peak_tflops,
        seed=args.seed,
        threads=args.threads,
        lr=args.lr,
    )
    dtype = args.dtype or ({True: "bfloat16", False: "float32"}.get(args.amp))
    if dtype is not None:
        opts.amp_dtype = None if dtype == "float32" else getattr(torch, dtype)
    if not args.quiet:
        opts.progress = lambda msg: print(f"[bench] {msg}", file=sys.stderr, flush=True)
    return opts


def run(args: argparse.Namespace) -> int:
    opts = options_from_args(args)  # flags first: a refused one costs no import of the runner
    from study.bench.report import format_report
    from study.bench.runner import run_bench

    report = run_bench(opts)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    for line in report["non_finite"]:  # after the whole report: every other target was timed
        print(f"study bench: error: {line}", file=sys.stderr)
    return 1 if report["non_finite"] else 0
