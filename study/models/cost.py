"""Multiply-accumulates (MACs) of one forward pass of one image, counted from the
model's equations (DESIGN §3-4), not from the code path a forward takes.

Convention — the paper's Table 1 counts multiply-adds, and so does this: one MAC
per multiply-add of a matrix product, a convolution or a dot product, for one image.
Every head averages all T keys for all T queries (a dense weighted average, no
factorisation).  Scores that depend on the image (content q·k, the query form's
q·r_δ) are counted for every (query, key) pair; a purely positional score is a
function of the shift δ alone (Eq. 9, Section 4.2), so it is counted once per
distinct shift and head.  Not counted: biases, element-wise operations, softmax,
LayerNorm, GELU, pooling.  FLOPs = 2 × MACs.  So a factorised or shared evaluation
(what ``runs.flops`` counts, from ``torch.utils.flop_counter`` on the executed
path) never changes these numbers: isotropic and non-isotropic quadratic heads
differ only by their D_p (3 vs 5 products per shift).

Pure Python (no torch): ``analysis`` uses it on the configuration columns of ``runs``.
"""

from __future__ import annotations

from typing import Any

#: Defaults of the paper's model (``ModelConfig``), for tables that lack a column.
DEFAULTS = {"arch": "sa", "encoding": "quadratic", "isotropic": True, "num_heads": 9, "pos_dim": None,
            "hidden": 400, "layers": 6, "intermediate": 512, "image_size": 32, "in_channels": 3,
            "num_classes": 10, "downsample": 2, "positional_score": None}


def _get(cfg: dict[str, Any], key: str) -> Any:
    v = cfg.get(key)
    if v is None or (isinstance(v, float) and v != v):
        return DEFAULTS[key]
    return v


def model_macs(cfg: dict[str, Any]) -> int:
    """MACs per image of the model a configuration describes (a ``ModelConfig.to_dict()``
    or a ``runs`` row; missing fields take the paper's defaults)."""
    if _get(cfg, "arch") == "resnet18":
        return resnet18_macs(image_size=int(_get(cfg, "image_size")), in_channels=int(_get(cfg, "in_channels")),
                             num_classes=int(_get(cfg, "num_classes")))
    return self_attention_macs(cfg)


def self_attention_macs(cfg: dict[str, Any]) -> int:
    """The attention-only model (DESIGN §3): space-to-depth + Linear embedding, L post-LN
    blocks, mean pool, Linear classifier.  Per block, with T tokens, D = hidden,
    N_h heads, D_p = pos_dim, I = intermediate:

    - positional scores, per head: quadratic r_δ·v_h (D_p) per shift δ of the
      (2S−1)² shifts of an S×S grid; learned head form w_rowᵀ r_row(δ1) and
      w_colᵀ r_col(δ2) (D_p each) per row and column shift (2·(2S−1)); query form
      q_h[:D/2]·r_row(δ1) and q_h[D/2:]·r_col(δ2) once per query and row / column
      shift (T·(2S−1)·D: the score of a pair adds the two, the rule "positional scores
      once per shift" applied to a score that also depends on the query);
    - content adds q_h·k_h (D) per pair and the query/key projections (2·T·D·N_h·D);
    - weighted average of the raw input per head: N_h·T²·D;
    - Linear(N_h·D → D), Linear(D → D), feed-forward 2·T·D·I."""
    enc = _get(cfg, "encoding")
    down, size = int(_get(cfg, "downsample")), int(_get(cfg, "image_size"))
    side = size // down
    t = side * side
    c_in = int(_get(cfg, "in_channels")) * down * down
    d, h, layers = int(_get(cfg, "hidden")), int(_get(cfg, "num_heads")), int(_get(cfg, "layers"))
    inter = int(_get(cfg, "intermediate"))
    pos_dim = cfg.get("pos_dim")
    if pos_dim is None or pos_dim != pos_dim:
        pos_dim = (3 if _get(cfg, "isotropic") else 5) if enc == "quadratic" else d
    pos_dim = int(pos_dim)
    shifts = 2 * side - 1
    if enc == "quadratic":
        positional = h * shifts * shifts * pos_dim
    elif _positional_score(cfg, enc) == "query":
        positional = h * t * shifts * pos_dim
    else:
        positional = h * 2 * shifts * pos_dim
    content = 2 * t * d * h * d + h * t * t * d if enc == "learned_content" else 0
    block = positional + content + h * t * t * d + t * h * d * d + t * d * d + 2 * t * d * inter
    return t * c_in * d + layers * block + d * int(_get(cfg, "num_classes"))


def resnet18_macs(*, image_size: int = 32, in_channels: int = 3, num_classes: int = 10) -> int:
    """CIFAR ResNet18 (3×3 stem, no max-pool, BasicBlocks [2, 2, 2, 2]): every
    convolution's H_out·W_out·K²·C_in·C_out, the 1×1 shortcuts and the classifier."""
    side = image_size
    macs = side * side * 9 * in_channels * 64
    c_in = 64
    for stage, c_out in enumerate((64, 128, 256, 512)):
        if stage:
            side = (side + 1) // 2  # stride 2, padding 1
        for block in range(2):
            first = block == 0
            macs += side * side * 9 * (c_in if first else c_out) * c_out  # conv1 (stride 2 in a stage's first)
            macs += side * side * 9 * c_out * c_out  # conv2
            if first and c_in != c_out:
                macs += side * side * c_in * c_out  # 1×1 shortcut
        c_in = c_out
    return macs + 512 * num_classes


def _positional_score(cfg: dict[str, Any], encoding: str) -> str:
    """``query`` (q·r_δ, the paper's Table 1 content model) or ``head`` (w·r_δ).  A
    configuration without the field predates it: its content model was the head form."""
    if "positional_score" not in cfg:
        return "head"
    v = cfg["positional_score"]
    if v is None or (isinstance(v, float) and v != v):
        return "query" if encoding == "learned_content" else "head"
    return str(v)
