"""``study theorem``: check Theorem 1 numerically on a random convolution."""

from __future__ import annotations

import argparse

from study.cliutil import SEED, BoundedInt, model_int
from study.errors import UsageError
from study.limits import MAX_MODEL_FIELD, MAX_THEOREM_ELEMENTS, MAX_THEOREM_MACS

MAX_KERNEL = int(MAX_MODEL_FIELD["num_heads"] ** 0.5)  # 32: K² heads
BATCH = 2  # images of the check (study.theory.theorem.theorem_error's default)


def register(sub) -> None:
    p = sub.add_parser(
        "theorem",
        help="check that a random conv equals its MHSA construction",
        description="Build a random KxK conv (zero padding K//2), convert it with "
        "study.theory.theorem.mhsa_from_conv (Lemma 1 + 2) and print max |conv(x) - MHSA(x)|.",
    )
    # K² heads: K is bounded as a study file bounds num_heads; channels as hidden; the side as image_size
    p.add_argument(
        "--kernel",
        type=BoundedInt(1, MAX_KERNEL, "MAX_MODEL_FIELD['num_heads'] = K^2"),
        default=3,
        help="odd kernel size K (default 3)",
    )
    p.add_argument("--in", dest="in_channels", type=model_int("hidden"), default=8, help="input channels")
    p.add_argument("--out", dest="out_channels", type=model_int("hidden"), default=8, help="output channels")
    p.add_argument("--size", type=model_int("image_size"), default=12, help="image side (default 12)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    p.add_argument("--seed", type=SEED, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.kernel % 2 == 0:
        raise UsageError(f"--kernel: must be a positive odd integer, got {args.kernel}")
    heads, tokens = args.kernel**2, (args.size + args.kernel - 1) ** 2  # T: zero-padded tokens
    # the largest tensor the check builds: probabilities (batch, K² heads, T, T) or value maps
    # (K², D_in, D_out)
    n = max(
        BATCH * heads * tokens**2,
        heads * args.in_channels * args.out_channels,
        BATCH * args.in_channels * tokens,
    )
    work = BATCH * tokens * heads * args.in_channels * args.out_channels
    flags = f"--kernel {args.kernel} --in {args.in_channels} --out {args.out_channels} --size {args.size}"
    if n > MAX_THEOREM_ELEMENTS:
        raise UsageError(
            f"{flags}: the check would build a tensor of {n:,} elements, more than "
            f"{MAX_THEOREM_ELEMENTS:,} (MAX_THEOREM_ELEMENTS); use a smaller --size or --kernel"
        )
    if work > MAX_THEOREM_MACS:
        raise UsageError(
            f"{flags}: the check would take {work:,} multiply-adds, more than {MAX_THEOREM_MACS:,} "
            "(MAX_THEOREM_MACS)"
        )
    import torch  # here, not at import: `study --help` and bookkeeping commands stay torch-free

    from study.theory.theorem import theorem_error

    err = theorem_error(
        kernel=args.kernel,
        in_channels=args.in_channels,
        out_channels=args.out_channels,
        size=args.size,
        batch=BATCH,
        dtype=getattr(torch, args.dtype),
        seed=args.seed,
    )
    print(
        f"K={args.kernel} D_in={args.in_channels} D_out={args.out_channels} heads={args.kernel**2} "
        f"{args.dtype}: max |conv(x) - MHSA(x)| = {err:.3e}"
    )
    return 0
