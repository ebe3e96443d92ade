"""Self-attention ↔ convolution study framework (Cordonnier, Loukas & Jaggi, ICLR 2020)."""

__version__ = "0.1.0"
