#!/usr/bin/env python
"""Does a shortened paper recipe train?  The paper's models (its sizes, lr 0.1, SGD momentum 0.9,
cosine schedule) for a few hundred steps on the CIFAR-10 archive, with the paper's warm-up of 5 %
of the run and with a longer one, side by side; the per-step training loss, the test accuracy at
the end and the verdict of study.trial.verdict (docs/performance.md, "Warm-up").

    python benchmarks/warmup.py --data cifar10-jpeg.tar.gz --out warmup-bench

Long on a CPU (a paper-size step of batch 16 takes seconds): run it in the background.  Prints one
line per run and writes ``warmup.json`` and ``warmup.png`` (the loss curves) into ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/warmup.py` puts only benchmarks/ on the path
    sys.path.insert(0, str(ROOT))


def parse_args(argv=None) -> argparse.Namespace:
    from study.cliutil import BoundedInt, Parser, local_path
    from study.limits import MAX_BENCH_BATCH

    p = Parser(prog="warmup.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a data source (the CIFAR-10 JPEG archive)")
    p.add_argument("--out", type=local_path, default=Path("warmup-bench"), help="report folder")
    p.add_argument("--models", default="sa_learned,sa_quadratic", help="comma-separated paper models")
    p.add_argument(
        "--steps",
        type=BoundedInt(10, 100_000, "a long CPU run"),
        default=300,
        help="optimisation steps of a run",
    )
    p.add_argument(
        "--batch",
        type=BoundedInt(1, MAX_BENCH_BATCH, "MAX_BENCH_BATCH"),
        default=16,
        help="training batch size",
    )
    p.add_argument(
        "--warmups",
        default="0.05,0.3",
        help="comma-separated warm-ups as fractions of the run (default: the paper's 5 %% and 30 %%)",
    )
    p.add_argument(
        "--test-images",
        type=BoundedInt(10, 10_000, "the CIFAR-10 test set"),
        default=500,
        help="test images evaluated at the end (stratified)",
    )
    p.add_argument("--seed", type=BoundedInt(0, 2**31, "a 31-bit seed"), default=0)
    return p.parse_args(argv)


def one_run(*, key: str, warmup: float, splits, args) -> dict:
    """``args.steps`` steps of the paper model ``key`` with a warm-up of ``warmup`` of them."""
    import torch
    import torch.nn.functional as F

    from study.data import DeviceData
    from study.models import build_model
    from study.models.config import PAPER_MODELS
    from study.trial import TrainConfig
    from study.trial.loop import build_optimizer, evaluate
    from study.trial.schedule import learning_rate
    from study.trial.verdict import failed_to_train

    mc = PAPER_MODELS[key].replace(num_classes=len(splits.classes))
    cfg = TrainConfig(
        model=mc, data=args.data, batch_size=args.batch, epochs=1, warmup=warmup, seed=args.seed
    )
    torch.manual_seed(args.seed)
    model = build_model(mc)
    optimizer = build_optimizer(model, cfg)
    train = DeviceData(splits.train_images, splits.train_labels, device=torch.device("cpu"))
    warm = cfg.warmup_steps_for(args.steps)
    losses, t0 = [], time.perf_counter()
    model.train()
    batches = itertools.chain.from_iterable(
        train.batches(batch_size=args.batch, epoch=epoch, seed=args.seed, train=True)
        for epoch in range(math.ceil(args.steps * args.batch / len(train)) + 1)
    )
    for step, (x, y) in enumerate(itertools.islice(batches, args.steps)):
        lr = learning_rate(
            step=step,
            steps_per_epoch=args.steps,
            epochs=1,
            base_lr=cfg.lr,
            schedule="cosine",
            warmup_steps=warm,
        )
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if len(losses) % 20 == 0:
            print(
                f"  {key} warm-up {warmup:g}: step {len(losses)}/{args.steps}, loss {losses[-1]:.3f}, "
                f"{time.perf_counter() - t0:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        if not math.isfinite(losses[-1]):
            break
    seconds = time.perf_counter() - t0
    n = len(splits.test_labels)
    test = DeviceData(splits.test_images, splits.test_labels, device=torch.device("cpu"))
    test_loss, test_acc = evaluate(model, test, batch_size=100, world=1, autocast=contextlib.nullcontext)
    tail = losses[-max(1, len(losses) // 10) :]  # the last tenth of the run: the epoch-mean's stand-in
    train_loss = sum(tail) / len(tail)
    verdict = failed_to_train(
        train_loss=train_loss,
        test_loss=test_loss,
        test_acc=test_acc,
        num_classes=mc.num_classes,
        n_test=n,
        warmed_up=True,
    )
    return {
        "model": key,
        "warmup": warmup,
        "warmup_steps": warm,
        "steps": len(losses),
        "batch": args.batch,
        "losses": losses,
        "train_loss_last_tenth": train_loss,
        "test_loss": test_loss,
        "test_acc": test_acc,
        "n_test": n,
        "seconds": seconds,
        "verdict": verdict or "trained",
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from study.data import load_splits
    from study.data.splits import stratified_subset

    splits = load_splits(args.data)
    # a class-stratified, seeded choice of test images (the same for every run)
    keep = stratified_subset(
        splits.test_labels,
        k=min(args.test_images, len(splits.test_labels)),
        generator=torch.Generator().manual_seed(args.seed),
    )
    splits = dataclasses.replace(
        splits, test_images=splits.test_images[keep], test_labels=splits.test_labels[keep]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for key in args.models.split(","):
        for warmup in (float(w) for w in args.warmups.split(",")):
            r = one_run(key=key, warmup=warmup, splits=splits, args=args)
            runs.append(r)
            print(
                f"{key} warm-up {warmup:g} ({r['warmup_steps']} steps): "
                f"{r['steps']} steps of batch {args.batch}, "
                f"last-tenth train loss {r['train_loss_last_tenth']:.3f}, "
                f"test acc {100 * r['test_acc']:.1f} % "
                f"on {r['n_test']} images, {r['verdict']}, {r['seconds']:.0f} s",
                flush=True,
            )
            (args.out / "warmup.json").write_text(json.dumps(runs, indent=1))
    plot(runs, args.out / "warmup.png")
    return 0


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in runs))
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 3.2), squeeze=False, sharey=True)
    for ax, m in zip(axes[0], models):
        for r in (r for r in runs if r["model"] == m):
            ax.plot(
                range(1, len(r["losses"]) + 1),
                r["losses"],
                linewidth=0.8,
                label=(
                    f"warm-up {r['warmup']:g} = {r['warmup_steps']} steps: test {100 * r['test_acc']:.1f} %"
                ),
            )
        ax.axhline(math.log(10), color="0.5", linestyle=":", linewidth=0.8)
        ax.text(1, math.log(10), " ln 10 (chance)", fontsize=7, color="0.4", va="bottom")
        ax.set_title(
            f"{m} (paper size), batch {runs[0]['batch']}, lr 0.1, {len(r['losses'])} steps", fontsize=8
        )
        ax.set_xlabel("step")
        ax.set_yscale("log")  # a diverging step is 10-40x chance's loss: a linear axis hides the rest
        ax.set_ylim(1.5, 60)
        ticks = (2, 3, 5, 10, 20, 40)
        ax.set_yticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("training loss")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
