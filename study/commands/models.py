"""``study models``: size the paper's models (parameters, FLOPs per image)."""

from __future__ import annotations

import argparse
import json

from study.cliutil import add_model_flags, check_model_params, config_from_flags, model_overrides
from study.errors import UsageError
from study.models import ENCODING_MODELS, PAPER_MODELS, ModelConfig, build_model, model_name
from study.models.config import ENCODING_FIELDS

#: the common fields, every encoding's own (``study.models.encodings``), the counts
COLUMNS = ("name", "arch", "encoding", "num_heads", *ENCODING_FIELDS, "n_params", "macs", "flops")


def register(sub) -> None:
    p = sub.add_parser(
        "models",
        help="list the paper's models and today's encodings with parameters and FLOPs",
        description="Print name, arch, encoding, num_heads, every encoding's fields, n_params, the MACs per "
        "32x32 image of the model's equations (Table 1's convention, study.models.cost) and the forward "
        "FLOPs of the executed path (torch.utils.flop_counter) for the paper's models and today's "
        "encodings at the paper's size (N_h=9, D=400, 6 layers), or for one model sized by the flags.",
    )
    add_model_flags(p)
    p.add_argument("--json", action="store_true", help="print a JSON list of objects")
    p.set_defaults(func=run)


def describe(config: ModelConfig) -> dict:
    """Its row: parameters and FLOPs counted on PyTorch's meta device (shapes only: nothing is
    initialised or computed, and a model too large for this machine is still described)."""
    import torch

    from study.cost.flops import count_parameters, forward_flops
    from study.models.cost import model_macs

    with torch.device("meta"):
        model = build_model(config)
    fields = config.to_dict()
    return {
        "name": model_name(config),
        **{k: fields[k] for k in COLUMNS if k in fields},
        "n_params": count_parameters(model),
        "macs": model_macs(fields),
        "flops": forward_flops(model, image_size=config.image_size, in_channels=config.in_channels),
    }


def format_table(rows: list[dict]) -> str:
    import pandas as pd

    def cell(k, v):
        if v is None:
            return "-"
        return f"{v:,}" if k == "n_params" else f"{v / 1e9:.3f} G" if k in ("flops", "macs") else str(v)

    return pd.DataFrame([{k: cell(k, r[k]) for k in COLUMNS} for r in rows]).to_string(index=False)


def run(args: argparse.Namespace) -> int:
    overrides = model_overrides(args)
    if overrides:
        configs = [config_from_flags(**overrides)]
        check_model_params(configs[0])  # counted on the meta device before anything is allocated
    else:
        configs = [*PAPER_MODELS.values(), *ENCODING_MODELS.values()]
    try:
        rows = [describe(c) for c in configs]
    except RuntimeError as e:  # an operation the meta device lacks (nothing is allocated: no MemoryError)
        raise UsageError(f"model: cannot be described ({' '.join(str(e).split())[:160]})") from None
    print(json.dumps(rows, indent=2) if args.json else format_table(rows))
    return 0
