"""Multiply-accumulates (MACs) of one forward pass of one image, counted from the
model's equations (docs/design.md §3-5), not from the code path a forward takes, as the
paper's Table 1 (docs/figures.md "MACs in Table 1"): all T keys for all T queries,
image-dependent scores (q·k, q·r_δ) per (query, key) pair, a purely positional score
once per distinct shift and head (Eq. 9, Section 4.2).  FLOPs = 2 × MACs.

Pure Python (no torch): ``analysis`` uses it on the configuration columns of ``runs``.
"""

from __future__ import annotations

from typing import Any


def config_from_row(cfg: dict[str, Any]):
    """The :class:`~study.models.config.ModelConfig` a configuration dict or ``runs`` row
    describes: its model fields that are set (missing or null ones take the paper's
    defaults, plus an encoding's ``legacy_defaults`` for rows older than a field)."""
    from study.models.config import ENCODING_FIELDS, ModelConfig
    from study.models.encodings import REGISTRY

    fields = set(ModelConfig.model_fields) | set(ENCODING_FIELDS)
    # null or NaN (a null of a numeric column): not set
    known = {
        k: v
        for k, v in cfg.items()
        if k in fields and v is not None and not (isinstance(v, float) and v != v)
    }
    member = ModelConfig.members.get(known.get("encoding", "quadratic"))
    if member is not None:
        # a row's value of another encoding's field (an old table's isotropic of a learned
        # model) says nothing about this model: left out, not refused
        known = {k: v for k, v in known.items() if k not in ENCODING_FIELDS or k in member.model_fields}
        spec = REGISTRY[member.name()]
        if hasattr(spec, "legacy_defaults"):
            known = {**spec.legacy_defaults(cfg), **known}
    ints = {k for k, f in _annotations(member).items() if f is int}
    for k, v in known.items():
        v = v.item() if hasattr(v, "item") else v  # a runs row read by pandas holds numpy scalars
        # an integer column with nulls (another encoding's rows) reads as float
        known[k] = int(v) if k in ints and isinstance(v, float) and v.is_integer() else v
    return ModelConfig(**known)


def _annotations(member) -> dict[str, Any]:
    """Field → its type without ``None`` (``int | None`` → int), of ``member`` and the common fields."""
    import typing

    from study.models.config import ModelConfig

    out = {}
    for cls in filter(None, (ModelConfig, member)):
        for k, f in cls.model_fields.items():
            kinds = [a for a in typing.get_args(f.annotation) or (f.annotation,) if a is not type(None)]
            out[k] = kinds[0] if len(kinds) == 1 else f.annotation
    return out


#: A forward pass is a third of a training step (forward + backward ≈ 3 forwards): a training image's
#: weight in a trial's cost and progress (:mod:`study.cost.plan`, ``study.trial.loop``).
TRAIN_FORWARDS = 3


def model_macs(cfg: dict[str, Any]) -> int:
    """MACs per image of the model a configuration describes (a ``ModelConfig.to_dict()``
    or a ``runs`` row; missing fields take the paper's defaults).  The attention-only model
    (docs/design.md §3): space-to-depth + Linear embedding, L post-LN blocks, mean pool, Linear
    classifier.  Per block (T tokens, D = hidden, N_h heads, I = intermediate):
    ``Encoding.positional_macs``; for content q_h·k_h per pair and the query/key projections;
    the weighted average N_h·T²·D; Linear(N_h·D → D), Linear(D → D), feed-forward 2·T·D·I.
    Heads of width D (the layout the study trains)."""
    mc = config_from_row(cfg)
    if mc.arch == "resnet18":
        return resnet18_macs(image_size=mc.image_size, in_channels=mc.in_channels, num_classes=mc.num_classes)
    spec, side = mc.spec, mc.grid
    t = side * side
    c_in = mc.in_channels * mc.downsample**2
    d, h, inter = mc.hidden, mc.num_heads, mc.intermediate
    positional = spec.positional_macs(mc, tokens=t, side=side)
    content = 2 * t * d * h * d + h * t * t * d if spec.content else 0
    block = positional + content + h * t * t * d + t * h * d * d + t * d * d + 2 * t * d * inter
    return t * c_in * d + mc.layers * block + d * mc.num_classes


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
            macs += (
                side * side * 9 * (c_in if first else c_out) * c_out
            )  # conv1 (stride 2 in a stage's first)
            macs += side * side * 9 * c_out * c_out  # conv2
            if first and c_in != c_out:
                macs += side * side * c_in * c_out  # 1×1 shortcut
        c_in = c_out
    return macs + 512 * num_classes
