"""Table 1 as Markdown and CSV: docs/figures.md, ``table1.md``, "MACs in Table 1" and "Beside the paper"."""

from __future__ import annotations

import pandas as pd

from analysis.figures.context import Skip
from analysis.meta import describe, did_not_train, selection_note
from analysis.paper import paper_row
from analysis.variants import variant_order
from study.models.cost import model_macs  # pure Python: no torch

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
        every = t[t["label"] == label]
        # a trial that did not train is no result: its accuracy is left out, and the row says so
        failed = did_not_train(every)
        s = every[~failed] if not failed.all() else every.iloc[:0]
        first = every.iloc[0].to_dict()
        macs = model_macs(first)
        paper, paper_why = paper_row(first)
        val = s["best_val_acc"].astype(float) if "best_val_acc" in s else pd.Series(dtype=float)
        rows.append(
            {
                "model": label,
                "seeds": len(s),  # n, the number of seeds averaged
                "seed_values": ",".join(str(int(v)) for v in sorted(s["seed"])) if "seed" in s else "",
                "did_not_train": int(failed.sum()),
                "epochs_done": int(every["epochs_done"].min()),
                "epochs": int(every["epochs"].max()) if "epochs" in every else pd.NA,
                "status": ",".join(sorted(set(every["status"].astype(str)))),
                "best_test_acc": float(s["best_test_acc"].mean()),
                "best_test_acc_std": float(s["best_test_acc"].std()),  # NaN for one seed (ddof=1)
                "final_test_acc": float(s["final_test_acc"].mean()),
                "final_test_acc_std": float(s["final_test_acc"].std()),
                "best_val_acc": float(val.mean()),  # NaN when no trial has a validation split
                "best_val_acc_std": float(val.std()),
                "n_test": _first_int(every, "n_test"),
                "n_params": _first_int(every, "n_params"),
                "macs": int(macs),
                "flops_math": int(2 * macs),
                "flops": _first_int(every, "flops"),  # executed path (runs.flops)
                # the paper's Table 1, where this row has its model, data and budget
                "paper_model": paper.model if paper else "",
                "paper_acc": paper.accuracy if paper else float("nan"),
                "paper_params": paper.params if paper else float("nan"),
                "paper_flops": paper.flops if paper else float("nan"),
                "paper_note": paper_why,
            }
        )
    return pd.DataFrame(rows)


def _first_int(s: pd.DataFrame, col: str):
    """The variant's ``col`` (its trials share it), NA when the tables do not record it."""
    v = s[col].dropna() if col in s else pd.Series(dtype=float)
    return int(v.iloc[0]) if len(v) else pd.NA


def _acc(mean: float, std: float) -> str:
    if mean != mean:
        return "–"
    return f"{100 * mean:.2f}" + ("" if std != std else f" ± {100 * std:.2f}")


def _seeds(r) -> str:
    """n, the seeds averaged, and how many more did not train (left out)."""
    failed = int(r.get("did_not_train", 0) or 0)
    return str(r["seeds"]) + (f" (+{failed} did not train)" if failed else "")


def _count(n) -> str:
    return "–" if n is pd.NA else f"{n:,}"


def _flops(f: int) -> str:
    if f is pd.NA:
        return "–"
    return f"{f / 1e9:.2f} G" if f >= 1e9 else f"{f / 1e6:.1f} M"


def _paper(r) -> str:
    """The paper's published numbers beside a matching row, else why none is shown."""
    if not r["paper_model"]:
        return f"none shown: {r['paper_note']}"
    return (
        f"{100 * r['paper_acc']:.1f} / {r['paper_params'] / 1e6:.1f}M / {r['paper_flops'] / 1e9:g}G "
        f"({r['paper_model']})"
    )


def _unfinished(r) -> str:
    """Why a row has fewer epochs than planned, from its trials' statuses: " (diverged)",
    " (error)", " (stopped)", " (running)"...; empty when every epoch was done."""
    if r["epochs_done"] >= (r["epochs"] if r["epochs"] is not pd.NA else 0):
        return ""
    why = sorted(set(str(r["status"]).split(",")) - {"finished", ""})
    return f" ({', '.join(why) or 'running'})"


def cells(d: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Table 1's header and rows as text (``table1.md`` and the report's Table 1)."""
    val = d["best_val_acc"].notna().any()
    head = [
        "Model",
        "n",
        "Epochs",
        "Best test acc. (%)",
        "Final test acc. (%)",
        *(["Best val. acc. (%)"] if val else []),
        "Params",
        "MACs/image",
        "FLOPs/image (= 2 MACs)",
        "FLOPs executed",
        "Paper (Table 1): acc. (%) / params / FLOPs",
    ]
    rows = [
        [
            str(r["model"]),
            _seeds(r),
            f"{r['epochs_done']}/{r['epochs']}{_unfinished(r)}",
            _acc(r["best_test_acc"], r["best_test_acc_std"]),
            _acc(r["final_test_acc"], r["final_test_acc_std"]),
            *([_acc(r["best_val_acc"], r["best_val_acc_std"])] if val else []),
            _count(r["n_params"]),
            _flops(r["macs"]),
            _flops(r["flops_math"]),
            _flops(r["flops"]),
            _paper(r),
        ]
        for _, r in d.iterrows()
    ]
    return head, rows


def markdown(d: pd.DataFrame, runs: pd.DataFrame) -> str:
    head, rows = cells(d)
    lines = [
        f"Data: {describe(runs)}.",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    n_test = [int(v) for v in d["n_test"].dropna().unique()] if "n_test" in d else []
    one = (
        " One test image is worth "
        + "/".join(f"{100 / n:.2g}" for n in n_test)
        + " pp (percentage points) of "
        "accuracy."
        if n_test
        else ""
    )
    lines += [
        "",
        "Accuracy: mean over the n seeds (± sample standard deviation when n > 1); best = highest test "
        "accuracy over the epochs, final = after the last epoch done." + one,
        "MACs: multiply-adds of one forward pass of one image counted from the model's equations "
        "(dense attention over all keys, scores that depend on the image per query-key pair, positional "
        "scores once per shift; no biases, element-wise ops, softmax or normalisation), the paper's "
        "convention (its Table 1 counts multiply-adds); FLOPs = 2 × MACs. 'FLOPs executed': "
        "torch.utils.flop_counter on the path a forward in evaluation mode runs (factorised attention "
        "where exact), so it depends on the code path, not only on the model.",
        "Paper: the accuracy, parameters and FLOPs its Table 1 publishes for the same model (full CIFAR-10, "
        "300 epochs; its FLOPs count multiply-adds, so compare them with MACs/image), shown only where the "
        "row has that model's sizes, data and budget (analysis/paper.py).",
    ]
    if d["did_not_train"].any():
        lines.append(
            "Did not train: a trial whose training loss exceeds ln C (chance's) or whose test accuracy is "
            "within 3 σ of chance after its warm-up (runs.failed_to_train, the latest epoch's verdict) "
            "is left out of its row's accuracy; a row none of whose trials trained shows –."
        )
    if note := selection_note(runs):
        lines.append(note)
    return "\n".join(lines) + "\n"


def draw(ctx) -> list:
    d = data(ctx)
    ctx.out.mkdir(parents=True, exist_ok=True)
    md, csv = ctx.out / f"{STEM}.md", ctx.out / f"{STEM}.csv"
    md.write_text(markdown(d, ctx.trials))
    d.assign(data=describe(ctx.trials)).to_csv(csv, index=False)
    return [md, csv]


__all__ = ["cells", "data", "draw", "markdown"]
