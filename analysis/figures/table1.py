"""Table 1: per model, best and final test accuracy (mean over seeds, ± std when
there are several), parameters and forward FLOPs per image — Markdown and CSV."""

from __future__ import annotations

import pandas as pd

from analysis.figures import Skip
from analysis.variants import variant_order

KIND = "table1"
STEM = "table1"


def data(ctx) -> pd.DataFrame:
    t = ctx.trials
    if t.empty:
        raise Skip("no trials in the runs table yet")
    t = t[t["epochs_done"].fillna(0).astype(int) > 0]
    if t.empty:
        raise Skip("no trial has finished an epoch yet")
    rows = []
    for label in variant_order(t):
        s = t[t["label"] == label]
        many = len(s) > 1
        rows.append({
            "model": label,
            "seeds": len(s),
            "epochs_done": int(s["epochs_done"].min()),
            "epochs": int(s["epochs"].max()) if "epochs" in s else pd.NA,
            "status": ",".join(sorted(set(s["status"].astype(str)))),
            "best_test_acc": float(s["best_test_acc"].mean()),
            "best_test_acc_std": float(s["best_test_acc"].std()) if many else float("nan"),
            "final_test_acc": float(s["final_test_acc"].mean()),
            "final_test_acc_std": float(s["final_test_acc"].std()) if many else float("nan"),
            "n_params": int(s["n_params"].iloc[0]),
            "flops": int(s["flops"].iloc[0]),
        })
    return pd.DataFrame(rows)


def _acc(mean: float, std: float) -> str:
    return f"{100 * mean:.2f}" + ("" if std != std else f" ± {100 * std:.2f}")


def _flops(f: int) -> str:
    return f"{f / 1e9:.2f} G" if f >= 1e9 else f"{f / 1e6:.1f} M"


def markdown(d: pd.DataFrame) -> str:
    lines = ["| Model | Seeds | Epochs | Best test acc. (%) | Final test acc. (%) | Params | FLOPs/image |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for _, r in d.iterrows():
        running = "" if r["epochs_done"] >= (r["epochs"] if r["epochs"] is not pd.NA else 0) else " (running)"
        lines.append(f"| {r['model']} | {r['seeds']} | {r['epochs_done']}/{r['epochs']}{running} | "
                     f"{_acc(r['best_test_acc'], r['best_test_acc_std'])} | "
                     f"{_acc(r['final_test_acc'], r['final_test_acc_std'])} | {r['n_params']:,} | {_flops(r['flops'])} |")
    lines.append("")
    lines.append("Accuracy: mean over seeds (± sample std when there are several); best = highest "
                 "test accuracy over epochs, final = after the last epoch done. FLOPs: one forward pass "
                 "of one image (torch.utils.flop_counter).")
    return "\n".join(lines) + "\n"


def draw(ctx) -> list:
    d = data(ctx)
    ctx.out.mkdir(parents=True, exist_ok=True)
    md, csv = ctx.out / f"{STEM}.md", ctx.out / f"{STEM}.csv"
    md.write_text(markdown(d))
    d.to_csv(csv, index=False)
    return [md, csv]
