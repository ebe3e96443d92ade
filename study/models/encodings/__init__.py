"""The registry of attention encodings: ``REGISTRY[ModelConfig.encoding]``.  Adding one:
write its file (fields, validation, MAC count, label, layer) and add it to ``_MODULES``.
"""

from __future__ import annotations

from . import gpsa, learned, learned_content, quadratic, relative_bias, rope2d
from .base import ContentEncoding, Encoding, Field

#: the paper's four first (its Table 1 order), then today's encodings
_MODULES = (quadratic, learned, learned_content, gpsa, relative_bias, rope2d)

REGISTRY: dict[str, Encoding] = {m.ENCODING.name: m.ENCODING for m in _MODULES}
#: the encodings of Cordonnier et al. (2020) itself
PAPER_ENCODINGS = ("quadratic", "learned", "learned_content")


def encoding_fields() -> dict[str, Field]:
    """Every encoding-specific field, by name (a field several encodings share, such as
    ``pos_dim``, once), in registry order."""
    out: dict[str, Field] = {}
    for enc in REGISTRY.values():
        for f in enc.fields:
            out.setdefault(f.name, f)
    return out


def variants() -> list[tuple[str, dict]]:
    """(id, config overrides incl. ``encoding``) of every form of every encoding."""
    return [(vid, {"encoding": e.name, **over}) for e in REGISTRY.values() for vid, over in e.variants]


__all__ = [
    "REGISTRY",
    "PAPER_ENCODINGS",
    "ContentEncoding",
    "Encoding",
    "Field",
    "encoding_fields",
    "variants",
]
