"""Multi-head self-attention with relative positional scores (Eq. 5-7 of the paper).

Each head averages the raw input (head dimension = input dimension: W_val is folded
into ``out_proj``, ``Linear(N_h·D → D_out)``, as in the original code and Lemma 1):

    MHSA(X)_q = Σ_h  (Σ_k softmax_k(A_h[q, :])_k · X_k) W_out,hᵀ + b_out

with A_h = positional scores plus, for content attention, q·k/√D (``query``/``key`` =
``Linear(D → N_h·D)``; Eq. 7).

Three exact paths (docs/design.md §12), each checked against
:func:`study.bench.naive.naive_relative_attention`: **separable** (softmax(s_row ⊕ s_col) =
P_row ⊗ P_col, no dropout on the probabilities), **shared dense** (one (N_h, T, T) matrix and
one dropout mask per step for the batch, as the original: the mask would not factorise),
**content** (SDPA with the positional scores as additive bias, by default on CUDA only,
``fused_content``: on CPU the trainable bias sends SDPA to its math fallback, no faster than
the explicit form and 12 % more memory).  ``return_attention=True`` returns the full
probabilities on every path; no path synchronises with the host.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from study.models.dropout import probability_dropout
from study.models.heads import HeadsLayer, content_scores, shared_value_heads, softmax32


def _register_flop_formulas() -> None:
    """Teach ``torch.utils.flop_counter`` the kernels it misses but this module runs (the
    in-place ``baddbmm_`` of the explicit content path, SDPA's CPU flash kernels), so
    ``runs.flops`` counts the executed path."""
    from torch.utils import flop_counter as fc

    formulas = {
        "baddbmm_": lambda bias, a, b, *args, out_shape=None, **kwargs: fc.bmm_flop(a, b),
        "_scaled_dot_product_flash_attention_for_cpu": lambda q, k, v, *args, out_shape=None, **kwargs: (
            fc.sdpa_flop_count(q, k, v)
        ),
        "_scaled_dot_product_flash_attention_for_cpu_backward": lambda g, q, k, v, *a, out_shape=None, **kw: (
            fc.sdpa_backward_flop_count(g, q, k, v)
        ),
    }
    for name, formula in formulas.items():
        op = getattr(torch.ops.aten, name, None)
        if op is not None and op not in fc.flop_registry:
            fc.register_flop_formula(op)(formula)


_register_flop_formulas()


def kron_probs(p_row: Tensor, p_col: Tensor) -> Tensor:
    """(N_h, H, H) ⊗ (N_h, W, W) → (N_h, T, T), T = H·W row-major:
    P[h, (qr, qc), (kr, kc)] = P_row[h, qr, kr] · P_col[h, qc, kc]."""
    n, hh, _ = p_row.shape
    w = p_col.shape[-1]
    return (p_row[:, :, None, :, None] * p_col[:, None, :, None, :]).reshape(n, hh * w, hh * w)


class RelativeSelfAttention(HeadsLayer):
    """MHSA over a 2-D token grid: ``positional`` maps (height, width) → (N_h, T, T) scores,
    or with ``needs_query`` (queries, height, width) → (B, N_h, T, T); ``content`` adds
    q·k/√D.  ``forward``: (B, H, W, D) → (B, H, W, out_dim), and with ``return_attention``
    the probabilities, (1, N_h, T, T) when shared by the batch."""

    #: the factorised path where exact (tests switch it off to compare with shared dense)
    factorise: bool = True
    #: content attention through SDPA: None (default) on CUDA only, True/False to force
    fused_content: bool | None = None

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        positional: nn.Module,
        content: bool = False,
        out_dim: int | None = None,
        attention_dropout: float = 0.0,
    ):
        super().__init__()
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim  # every head averages the raw input (module doc)
        self.positional = positional
        self.content = content
        if content:
            self.query = nn.Linear(dim, num_heads * dim)
            self.key = nn.Linear(dim, num_heads * dim)
        self.attention_dropout = nn.Dropout(attention_dropout)
        self.out_proj = nn.Linear(num_heads * dim, out_dim or dim)

    def attention_scores(self, x: Tensor) -> Tensor:
        """Pre-softmax scores: (N_h, T, T) positional, or (B, N_h, T, T) with content, the positional
        bias plus q·kᵀ (Eq. 7's 1/√D folded into the query projection: no (B, N_h, T, ·) tensor
        scaled)."""
        _, h, w, d = x.shape
        if not self.content:
            return self.positional(h, w)
        q, k = self.queries_keys(x, scale=1.0 / math.sqrt(d))
        return content_scores(
            q, k, self.positional(q, h, w) if self.query_positional else self.positional(h, w)
        )

    @property
    def query_positional(self) -> bool:
        """Positional scores from the queries (q·r_δ, ``positional_score: query``)."""
        return bool(getattr(self.positional, "needs_query", False))

    def attention_probs(self, x: Tensor) -> Tensor:
        """Softmax over all keys of the image, before dropout, in at least float32."""
        if not self.content:
            _, h, w, _ = x.shape
            return self.positional_probs(h, w)
        return softmax32(self.attention_scores(x))

    @torch.compiler.disable
    def positional_probs(self, height: int, width: int) -> Tensor:
        """softmax_k of the positional scores (Eq. 9 or Section 4.2), (N_h, T, T) in at least float32:
        one matrix for the batch, as it does not depend on the image.  Never traced by ``torch.compile``
        (``torch.compiler.disable``): it runs eagerly, its backward too, and the compiled graph gets it as
        an input (docs/design.md §12: inductor's CUDA code for this softmax trained to NaN, issue 43)."""
        return softmax32(self.positional(height, width))

    @torch.compiler.disable
    def axis_probs(self, height: int, width: int) -> tuple[Tensor, Tensor]:
        """P_row = softmax(s_row) (N_h, H, H) and P_col = softmax(s_col) (N_h, W, W) of a separable
        positional encoding, outside any compiled graph as :meth:`positional_probs`."""
        rows, cols = self.positional.axis_scores(height, width)
        return softmax32(rows), softmax32(cols)

    @property
    def separable(self) -> bool:
        """Scores are s_row(δ1) + s_col(δ2) (positional only), so softmax factorises."""
        return not self.content and bool(getattr(self.positional, "separable", False))

    def uses_factorised_path(self) -> bool:
        """The separable path: exact only without a dropout mask on the T×T matrix."""
        dropping = self.training and self.attention_dropout.p > 0
        return self.factorise and self.separable and not dropping

    def uses_fused_content(self, device: torch.device) -> bool:
        return self.content and (device.type == "cuda" if self.fused_content is None else self.fused_content)

    def head_outputs(self, x: Tensor, *, return_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        """The concatenated heads before ``out_proj``, (B, T, N_h·D), and the
        probabilities if asked for, by the exact path of the module doc."""
        if self.content:
            if return_attention or not self.uses_fused_content(x.device):
                return self._explicit_content_heads(x)
            return self._fused_content_heads(x), None
        if self.uses_factorised_path():
            return self._separable_heads(x, return_attention=return_attention)
        return self._shared_dense_heads(x)

    def _separable_heads(self, x: Tensor, *, return_attention: bool) -> tuple[Tensor, Tensor | None]:
        """docs/design.md §12: softmax_k(s_row(δ1) + s_col(δ2)) = P_row ⊗ P_col over the
        rectangular key grid, so head_n(X)[qr, qc] = Σ_kr P_row[n,qr,kr] Σ_kc P_col[n,qc,kc] X[kr, kc]:
        a (W×W) product along the columns, then an (H×H) product along the rows."""
        b, h, w, d = x.shape
        n = self.num_heads
        p_row, p_col = self.axis_probs(h, w)  # (N_h, H, H), (N_h, W, W)
        # columns: y[n, qc, b, kr, :] = Σ_kc P_col[n, qc, kc] · X[b, kr, kc, :]
        xc = x.permute(2, 0, 1, 3).reshape(w, b * h * d)
        y = (p_col.to(x.dtype).reshape(n * w, w) @ xc).view(n, w, b, h, d)
        # rows: z[n, qr, qc, b, :] = Σ_kr P_row[n, qr, kr] · y[n, qc, b, kr, :]
        y = y.permute(0, 3, 1, 2, 4).reshape(n, h, w * b * d)
        z = torch.bmm(p_row.to(x.dtype), y).view(n, h, w, b, d)
        heads = z.permute(3, 1, 2, 0, 4).reshape(b, h * w, n * d)
        probs = kron_probs(p_row, p_col)[None] if return_attention else None
        return heads, probs

    def _shared_dense_heads(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """One (N_h, T, T) matrix for the batch (docs/design.md §4); dropout draws one mask
        per step on it.  (N_h·T, T) @ (T, B·D) as a single matrix product."""
        b, h, w, d = x.shape
        t = h * w
        probs = self.attention_probs(x)  # (N_h, T, T)
        dropped = self._dropout(probs).to(x.dtype)
        flat = x.reshape(b, t, d).permute(1, 0, 2).reshape(t, b * d)
        heads = (dropped.reshape(self.num_heads * t, t) @ flat).view(self.num_heads, t, b, d)
        return heads.permute(2, 1, 0, 3).reshape(b, t, self.num_heads * d), probs[None]

    def _fused_content_heads(self, x: Tensor) -> Tensor:
        """Eq. 7 through SDPA: softmax(q·kᵀ/√D + A_pos) v, v the raw input per head,
        dropout inside the kernel (one mask per image and head)."""
        b, h, w, d = x.shape
        t, n = h * w, self.num_heads
        q, k = self.queries_keys(x)
        # the positional scores: q·r_δ/√D (the scale on the small offset tables) or w·r_δ
        bias = (
            self.positional(q, h, w, scale=1.0 / math.sqrt(q.shape[-1]))
            if self.query_positional
            else self.positional(h, w).to(q.dtype)[None]
        ).expand(b, n, t, t)
        v = x.reshape(b, 1, t, d).to(q.dtype).expand(b, n, t, d)
        p = self.attention_dropout.p if self.training else 0.0
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
        return heads.transpose(1, 2).reshape(b, t, n * d)

    def _explicit_content_heads(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, N_h, T, T) @ (B, 1, T, D), with the probabilities; one dropout mask per
        image and head."""
        b, h, w, d = x.shape
        probs = self.attention_probs(x)
        heads = shared_value_heads(self._dropout(probs).to(x.dtype), x)
        return heads.transpose(1, 2).reshape(b, h * w, self.num_heads * d), probs

    def _dropout(self, probs: Tensor) -> Tensor:
        return probability_dropout(probs, self.attention_dropout.p, training=self.training)

    def no_weight_decay(self) -> set[str]:
        """Gaussian centres and spreads are excluded from weight decay (paper, App. B)."""
        if hasattr(self.positional, "centers"):
            return {"positional.centers", "positional.spreads"}
        return set()
