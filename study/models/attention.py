"""Multi-head self-attention with relative positional scores (Eq. 5-7 of the paper).

Each head returns the attention-weighted average of the raw input (head dimension =
input dimension: W_val is folded into the output projection, as in the original
code and in Lemma 1); heads are concatenated and projected by ``out_proj``
(``Linear(N_h·D → D_out)``, the original's ``value``):

    MHSA(X)_q = Σ_h  (Σ_k softmax_k(A_h[q, :])_k · X_k) W_out,hᵀ + b_out

with A_h = positional scores (image independent) plus, for content attention,
q·k/√D with ``query``/``key`` = ``Linear(D → N_h·D)``.  Content attention has two
positional forms (``ModelConfig.positional_score``): ``head``, A_h = w_h·r_δ + q·k/√D
(image-independent positional part), and ``query`` (the paper's Table 1 model),
A_h = (q_h·r_δ + q_h·k_h)/√D with r_δ = [r_row(δ1); r_col(δ2)] split over the query's
halves (:class:`~study.models.positional.QueryScores`).

The same equations are evaluated by one of three exact paths (docs/design.md §12); every
one is checked against :func:`study.bench.naive.naive_relative_attention`:

* **separable** (isotropic quadratic, learned without content; no dropout on the
  probabilities): the score is s_row(δ1) + s_col(δ2), so the softmax over the
  rectangular key grid factorises, softmax(s_row ⊕ s_col) = P_row ⊗ P_col, and the
  weighted average is one (W×W) product along the columns and one (H×H) along the
  rows: 2·16³ instead of 256² multiply-adds per head and channel.
* **shared dense** (non-isotropic quadratic, and every positional variant while
  attention dropout is active in training): one (N_h, T, T) probability matrix
  per forward serves the whole batch; dropout draws one mask per step on that
  matrix, as the original implementation did.  The factorisation would not be
  exact here: the mask sits on the T×T matrix, not on the two axis factors.
* **content** (``learned_content``): ``scaled_dot_product_attention`` with the
  positional scores as an additive float bias (scale 1/√D, Eq. 7), so the
  (B, N_h, T, T) probabilities are never materialised by fused kernels.  By
  default only on CUDA (``fused_content``): on CPU the bias needs a gradient,
  which sends SDPA to its math fallback; ``study bench`` measured it there at the
  explicit form's speed (0.96x vs 0.98x the naive layer, CPU time) with about
  12 % more step memory in the model (1731 vs 1540 MB at batch 8).

``return_attention=True`` returns the full probabilities in every case (for the
separable path the Kronecker product is built only then; content attention takes
the explicit path).  No path synchronises with the host.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from study.models.dropout import probability_dropout
from study.models.heads import HeadsLayer, shared_value_heads


def _register_flop_formulas() -> None:
    """Give ``torch.utils.flop_counter`` the kernels it does not count but this module
    runs, so ``runs.flops`` is the executed path's true count:

    * the in-place ``baddbmm_`` of the explicit content path (q·kᵀ added into the
      positional bias): the counter knows ``baddbmm`` only, and without this the
      content models' FLOPs missed N_h·T²·D MACs per layer;
    * the CPU flash kernels that ``scaled_dot_product_attention`` picks without
      gradients (the counter has the CUDA fused kernels only)."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    if aten.baddbmm_ not in fc.flop_registry:
        fc.register_flop_formula(aten.baddbmm_)(
            lambda bias, a, b, *args, out_shape=None, **kwargs: fc.bmm_flop(a, b)
        )
    fwd = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    bwd = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if fwd is not None and fwd not in fc.flop_registry:
        fc.register_flop_formula(fwd)(
            lambda q, k, v, *args, out_shape=None, **kwargs: fc.sdpa_flop_count(q, k, v)
        )
    if bwd is not None and bwd not in fc.flop_registry:
        fc.register_flop_formula(bwd)(
            lambda g, q, k, v, *args, out_shape=None, **kwargs: fc.sdpa_backward_flop_count(g, q, k, v)
        )


_register_flop_formulas()


def _softmax(scores: Tensor) -> Tensor:
    """Softmax over the last axis in at least float32 (scores may be bf16 under autocast)."""
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()
    return torch.softmax(scores, dim=-1)


def kron_probs(p_row: Tensor, p_col: Tensor) -> Tensor:
    """(N_h, H, H) ⊗ (N_h, W, W) → (N_h, T, T), T = H·W row-major:
    P[h, (qr, qc), (kr, kc)] = P_row[h, qr, kr] · P_col[h, qc, kc]."""
    n, hh, _ = p_row.shape
    w = p_col.shape[-1]
    return (p_row[:, :, None, :, None] * p_col[:, None, :, None, :]).reshape(n, hh * w, hh * w)


class RelativeSelfAttention(HeadsLayer):
    """MHSA over a 2-D token grid with a pluggable positional score module.

    Args:
        dim: input (and per-head value) dimension D.
        num_heads: N_h.
        positional: module mapping (height, width) → scores (N_h, T, T)
            (:class:`~study.models.positional.GaussianScores` or ``LearnedScores``);
            if it has ``separable`` true and ``axis_scores(h, w)`` the factorised
            path is used whenever it is exact.  With ``needs_query`` true
            (``QueryScores``, content only) it maps (queries, height, width) →
            (B, N_h, T, T) instead.
        content: add content scores q·k/√D (``learned_content`` encoding).
        out_dim: output dimension (default ``dim``).
        attention_dropout: dropout on the attention probabilities.

    ``forward(x)`` takes channels-last ``(B, H, W, D)`` and returns ``(B, H, W, out_dim)``;
    with ``return_attention=True`` also the probabilities, ``(1, N_h, T, T)`` for
    positional-only attention (shared by the batch) or ``(B, N_h, T, T)`` with content.
    """

    #: Use the factorised P_row ⊗ P_col path when it is exact (tests switch it
    #: off to compare with the dense shared path).
    factorise: bool = True
    #: Content attention through ``scaled_dot_product_attention``: ``None`` (default)
    #: where fused kernels take a trainable bias (CUDA), ``True``/``False`` to force.
    fused_content: bool | None = None

    def __init__(
        self, *, dim: int, num_heads: int, positional: nn.Module, content: bool = False,
        out_dim: int | None = None, attention_dropout: float = 0.0,
    ):
        super().__init__()
        self.dim = dim
        self.num_heads = num_heads
        self.positional = positional
        self.content = content
        if content:
            self.query = nn.Linear(dim, num_heads * dim)
            self.key = nn.Linear(dim, num_heads * dim)
        self.attention_dropout = nn.Dropout(attention_dropout)
        self.out_proj = nn.Linear(num_heads * dim, out_dim or dim)

    # ------------------------------------------------------------------ scores
    def attention_scores(self, x: Tensor) -> Tensor:
        """Pre-softmax scores: (N_h, T, T) positional, or (B, N_h, T, T) with content."""
        b, h, w, d = x.shape
        if not self.content:
            return self.positional(h, w)
        return self._content_scores(x)

    def _content_scores(self, x: Tensor) -> Tensor:
        """(B, N_h, T, T) content scores written in two passes over the T×T matrix: the
        positional bias, then ``baddbmm_`` adds q·kᵀ into it in place (no separate q·k,
        scale or sum tensors).  Eq. 7's 1/√D is applied to the query projection's
        weight and bias (:meth:`_queries_keys`), so q·r_δ and q·k come out scaled and
        no (B, N_h, T, ·) tensor is ever multiplied by it, forward or backward."""
        b, h, w, d = x.shape
        t, n = h * w, self.num_heads
        q, k = self._queries_keys(x, scaled=True)
        if self.query_positional:
            bias = self.positional(q, h, w)
        else:
            bias = self.positional(h, w).to(q.dtype).expand(b, n, t, t).contiguous()
        flat = bias.view(b * n, t, t)
        flat.baddbmm_(q.reshape(b * n, t, d), k.reshape(b * n, t, d).transpose(1, 2))
        return flat.view(b, n, t, t)

    @property
    def query_positional(self) -> bool:
        """Positional scores from the queries (q·r_δ, ``positional_score: query``)."""
        return bool(getattr(self.positional, "needs_query", False))

    def _positional_bias(self, q: Tensor, h: int, w: int) -> Tensor:
        """The positional part of content scores, on the scale of the softmax input:
        q·r_δ/√D, (B, N_h, T, T), for the query form (1/√D applied to the small offset
        tables, not to the result); w·r_δ, (1, N_h, T, T), for the head form."""
        if self.query_positional:
            return self.positional(q, h, w, scale=1.0 / math.sqrt(q.shape[-1]))
        return self.positional(h, w).to(q.dtype)[None]

    def attention_probs(self, x: Tensor) -> Tensor:
        """Softmax over all keys of the image, before dropout; see ``attention_scores``.
        Computed in at least float32 (scores may be bf16 under autocast)."""
        return _softmax(self.attention_scores(x))

    @property
    def separable(self) -> bool:
        """Scores are s_row(δ1) + s_col(δ2) (positional only), so softmax factorises."""
        return not self.content and bool(getattr(self.positional, "separable", False))

    def uses_factorised_path(self) -> bool:
        """True when ``forward`` takes the separable path: exact only without a
        dropout mask on the T×T matrix (eval, or p = 0)."""
        dropping = self.training and self.attention_dropout.p > 0
        return self.factorise and self.separable and not dropping

    def uses_fused_content(self, device: torch.device) -> bool:
        """True when content attention goes through ``scaled_dot_product_attention``."""
        if not self.content:
            return False
        return self.fused_content if self.fused_content is not None else device.type == "cuda"

    # ----------------------------------------------------------------- forward
    def head_outputs(self, x: Tensor, *, return_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        """The concatenated heads before ``out_proj``, (B, T, N_h·D), and the
        probabilities if asked for (else ``None``).  Picks the exact path (module doc)."""
        if self.content:
            if return_attention or not self.uses_fused_content(x.device):
                return self._explicit_content_heads(x)
            return self._fused_content_heads(x), None
        if self.uses_factorised_path():
            return self._separable_heads(x, return_attention=return_attention)
        return self._shared_dense_heads(x)

    def _queries_keys(self, x: Tensor, *, scaled: bool = False) -> tuple[Tensor, Tensor]:
        """q, k as (B, N_h, T, D) views of the projections' (B, T, N_h·D) outputs; with
        ``scaled`` the queries are those of ``query`` times 1/√D (Eq. 7's scale), computed
        from the scaled (N_h·D, D) weight and bias: the same values, one small multiply."""
        b, h, w, d = x.shape
        t = h * w
        if scaled:
            s = 1.0 / math.sqrt(d)
            q = F.linear(x, self.query.weight * s, self.query.bias * s)
        else:
            q = self.query(x)
        q = q.view(b, t, self.num_heads, d).transpose(1, 2)
        k = self.key(x).view(b, t, self.num_heads, d).transpose(1, 2)
        return q, k  # (B, N_h, T, D)

    def _separable_heads(self, x: Tensor, *, return_attention: bool) -> tuple[Tensor, Tensor | None]:
        """docs/design.md §12: softmax_k(s_row(δ1) + s_col(δ2)) = P_row ⊗ P_col over the
        rectangular key grid, so head_n(X)[qr, qc] = Σ_kr P_row[n,qr,kr] Σ_kc P_col[n,qc,kc] X[kr, kc]:
        a (W×W) product along the columns, then an (H×H) product along the rows."""
        b, h, w, d = x.shape
        n = self.num_heads
        rows, cols = self.positional.axis_scores(h, w)  # (N_h, H, H), (N_h, W, W)
        p_row, p_col = _softmax(rows), _softmax(cols)
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
        """Eq. 7 through ``scaled_dot_product_attention``: softmax(q·kᵀ/√D + A_pos) v with
        the positional scores A_pos as additive float bias and v the raw input per head;
        attention dropout (if training) inside the kernel, one mask per image and head."""
        b, h, w, d = x.shape
        t, n = h * w, self.num_heads
        q, k = self._queries_keys(x)
        bias = self._positional_bias(q, h, w).expand(b, n, t, t)
        v = x.reshape(b, 1, t, d).to(q.dtype).expand(b, n, t, d)
        p = self.attention_dropout.p if self.training else 0.0
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
        return heads.transpose(1, 2).reshape(b, t, n * d)

    def _explicit_content_heads(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The explicit form, (B, N_h, T, T) @ (B, 1, T, D), with the probabilities;
        dropout (if training) on the (B, N_h, T, T) matrix, one mask per image and head."""
        b, h, w, d = x.shape
        t = h * w
        n = self.num_heads
        probs = self.attention_probs(x)
        dropped = self._dropout(probs).to(x.dtype)
        heads = shared_value_heads(dropped, x)  # every head of an image in one product, x not expanded
        return heads.transpose(1, 2).reshape(b, t, n * d), probs

    def _dropout(self, probs: Tensor) -> Tensor:
        """Dropout on the probabilities with ``attention_dropout``'s p and this layer's mode
        (:func:`~study.models.dropout.probability_dropout`: ``nn.Dropout``'s
        distribution, a cheaper mask on CPU)."""
        return probability_dropout(probs, self.attention_dropout.p, training=self.training)

    def no_weight_decay(self) -> set[str]:
        """Gaussian centres and spreads are excluded from weight decay (paper, App. B)."""
        if hasattr(self.positional, "centers"):
            return {"positional.centers", "positional.spreads"}
        return set()
