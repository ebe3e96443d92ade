"""The paper's fully attentional image classifier (Cordonnier et al. 2020, Section 4).

32×32×3 → 2×2 space-to-depth → Linear(12 → D) → ``layers`` × post-LN encoder block
→ mean over the T = 256 tokens → Linear(D → classes).  No CLS token, no absolute
position embedding, no input LayerNorm, PyTorch default initialisation.
"""

from __future__ import annotations

from torch import Tensor, nn

from .blocks import EncoderBlock, SpaceToDepth
from .config import ModelConfig


class SelfAttentionNet(nn.Module):
    """Attention-only classifier; every layer is its encoding's (``config.spec.attention``)."""

    def __init__(self, *, config: ModelConfig):
        super().__init__()
        self.config = config
        d = config.hidden
        self.stem = SpaceToDepth(block=config.downsample)
        self.embed = nn.Linear(config.in_channels * config.downsample**2, d)
        self.blocks = nn.ModuleList(
            EncoderBlock(
                dim=d,
                intermediate=config.intermediate,
                dropout=config.dropout,
                attention=config.spec.attention(config),
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
    def attention_layers(self) -> list[nn.Module]:
        return [b.attention for b in self.blocks]

    def no_weight_decay(self) -> set[str]:
        """Names of parameters trained without weight decay (Gaussian centres/spreads,
        an encoding's tables or frequencies where its paper says so)."""
        return {
            f"blocks.{i}.attention.{n}"
            for i, layer in enumerate(self.attention_layers)
            for n in layer.no_weight_decay()
        }
