"""What ``study bench`` and ``benchmarks/gpu_check.py`` can time, torch-free (a bad name is refused before
torch is imported): the models (derived from :data:`study.models.config.PAPER_MODELS` and
:data:`study.models.config.ENCODING_MODELS`) and their attention layers."""

from __future__ import annotations

from study.models.config import ENCODING_MODELS, PAPER_MODELS, ModelConfig

ATTENTION = "attention"  # pseudo-model: the attention layer alone, every encoding

#: the paper's models, the learned + content model with head keys (``positional_score:
#: head``, the original's first version), and every form of today's encodings at the paper's dims
BENCH_MODELS: dict[str, ModelConfig] = {
    **PAPER_MODELS,
    "sa_learned_content_head": ModelConfig(encoding="learned_content", pos_dim=400, positional_score="head"),
    **ENCODING_MODELS,
}
#: the attention layers timed alone: one per self-attention model of BENCH_MODELS
ATTENTION_VARIANTS = tuple(key for key, cfg in BENCH_MODELS.items() if cfg.arch == "sa")
ALL_TARGETS = (*PAPER_MODELS, ATTENTION)


def is_target(name: str) -> bool:
    """A key of BENCH_MODELS (PAPER_MODELS, ``sa_learned_content_head``, ``sa_<encoding>``),
    ``attention`` (the layer, every encoding) or ``attention:KEY`` (the layer of one SA model)."""
    head, _, key = name.partition(":")
    return name in ALL_TARGETS or name in BENCH_MODELS or (head == ATTENTION and key in ATTENTION_VARIANTS)
