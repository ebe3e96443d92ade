"""``study theorem``: check Theorem 1 numerically on a random convolution."""

from __future__ import annotations

import argparse

from study.cliutil import fail


def register(sub) -> None:
    p = sub.add_parser(
        "theorem", help="check that a random conv equals its MHSA construction",
        description="Build a random KxK conv (zero padding K//2), convert it with "
        "study.theory.mhsa_from_conv (Lemma 1 + 2) and print max |conv(x) - MHSA(x)|.",
    )
    p.add_argument("--kernel", type=int, default=3, help="odd kernel size K (default 3)")
    p.add_argument("--in", dest="in_channels", type=int, default=8, help="input channels")
    p.add_argument("--out", dest="out_channels", type=int, default=8, help="output channels")
    p.add_argument("--size", type=int, default=12, help="image side (default 12)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch  # here, not at import: `study --help` and bookkeeping commands stay torch-free

    from study.theory import theorem_error

    prog = "study theorem"
    if args.kernel < 1 or args.kernel % 2 == 0:
        fail(prog, f"--kernel: must be a positive odd integer, got {args.kernel}")
    for name, v in (("--in", args.in_channels), ("--out", args.out_channels), ("--size", args.size)):
        if v < 1:
            fail(prog, f"{name}: must be >= 1, got {v}")
    err = theorem_error(
        kernel=args.kernel, in_channels=args.in_channels, out_channels=args.out_channels,
        size=args.size, dtype=getattr(torch, args.dtype), seed=args.seed,
    )
    print(f"K={args.kernel} D_in={args.in_channels} D_out={args.out_channels} heads={args.kernel**2} "
          f"{args.dtype}: max |conv(x) - MHSA(x)| = {err:.3e}")
    return 0
