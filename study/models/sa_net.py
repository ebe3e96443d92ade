"""The paper's fully attentional image classifier (Cordonnier et al. 2020, Section 4).

32×32×3 → 2×2 space-to-depth → Linear(12 → D) → ``layers`` × post-LN encoder block
→ mean over the T = 256 tokens → Linear(D → classes).  No CLS token, no absolute
position embedding, no input LayerNorm, PyTorch default initialisation.
"""

from __future__ import annotations

from torch import Tensor, nn

from .attention import RelativeSelfAttention
from .blocks import EncoderBlock, SpaceToDepth
from .config import ModelConfig
from .positional import GaussianScores, LearnedScores, QueryScores
from .registry import register_model


def positional_scores(config: ModelConfig) -> nn.Module:
    """The positional score module for ``config.encoding`` (one per layer)."""
    if config.encoding == "quadratic":
        return GaussianScores(
            num_heads=config.num_heads, isotropic=config.isotropic,
            center_init_std=config.center_init_std, spread_init_std=config.spread_init_std,
        )
    if config.positional_score == "query":
        return QueryScores(num_heads=config.num_heads, pos_dim=config.pos_dim, max_size=config.grid)
    return LearnedScores(num_heads=config.num_heads, pos_dim=config.pos_dim, max_size=config.grid)


@register_model("sa")
class SelfAttentionNet(nn.Module):
    """Attention-only classifier; every layer is a :class:`RelativeSelfAttention`."""

    def __init__(self, *, config: ModelConfig):
        super().__init__()
        self.config = config
        d = config.hidden
        self.stem = SpaceToDepth(block=config.downsample)
        self.embed = nn.Linear(config.in_channels * config.downsample**2, d)
        self.blocks = nn.ModuleList(
            EncoderBlock(
                dim=d, intermediate=config.intermediate, dropout=config.dropout,
                attention=RelativeSelfAttention(
                    dim=d, num_heads=config.num_heads, positional=positional_scores(config),
                    content=config.encoding == "learned_content",
                    attention_dropout=config.attention_dropout,
                ),
            )
            for _ in range(config.layers)
        )
        self.classifier = nn.Linear(d, config.num_classes)

    def forward(self, images: Tensor, *, return_attention: bool = False):
        """Logits (B, classes); with ``return_attention`` also one probability tensor
        per layer ((1 or B), N_h, T, T)."""
        x = self.embed(self.stem(images))
        maps = []
        for block in self.blocks:
            x = block(x, return_attention=return_attention)
            if return_attention:
                x, probs = x
                maps.append(probs)
        logits = self.classifier(x.mean(dim=(1, 2)))
        return (logits, maps) if return_attention else logits

    @property
    def attention_layers(self) -> list[RelativeSelfAttention]:
        return [b.attention for b in self.blocks]

    def no_weight_decay(self) -> set[str]:
        """Names of parameters trained without weight decay (Gaussian centres/spreads)."""
        return {
            f"blocks.{i}.attention.{n}"
            for i, layer in enumerate(self.attention_layers)
            for n in layer.no_weight_decay()
        }

