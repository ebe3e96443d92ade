"""Relative positional score functions (Cordonnier et al. 2020, Sections 3-4).

Each module maps a ``height × width`` token grid to image-independent scores
(num_heads, T, T), T = height·width: entry [h, q, k] scores the shift
δ = pos(k) − pos(q) = (δ1, δ2) (row, column) in grid pixels; :class:`QueryScores`
scores the learned embeddings with each image's queries (a batch axis).  Isotropic
Gaussian and learned scores are ``separable``, s(δ) = s_row(δ1) + s_col(δ2)
(:meth:`axis_scores`): the softmax factorises, P = P_row ⊗ P_col (docs/design.md §12);
a non-isotropic Gaussian's cross term −Σ⁻¹₁₂ (δ1−Δ1)(δ2−Δ2) does not.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def lattice_offsets(kernel: int) -> Tensor:
    """The K×K lattice of shifts (row, col), row-major, (K², 2) float64: −⌊K/2⌋ … ⌊K/2⌋
    per axis for odd K (the taps of a K×K convolution, Lemma 1), i − (K−1)/2 for even K
    (ConViT's lattice, centred between pixels)."""
    if kernel < 1:
        raise ValueError(f"kernel must be >= 1, got {kernel}")
    r = torch.arange(kernel, dtype=torch.float64) - (kernel - 1) / 2
    return torch.stack(torch.meshgrid(r, r, indexing="ij"), dim=-1).reshape(-1, 2)


def relative_offsets(height: int, width: int, *, device=None) -> Tensor:
    """δ[q, k] = pos(k) − pos(q) for every query/key pair, shape (T, T, 2), float."""
    rows = torch.arange(height, device=device).repeat_interleave(width)
    cols = torch.arange(width, device=device).repeat(height)
    pos = torch.stack([rows, cols], dim=-1).float()  # (T, 2), row-major tokens
    return pos[None, :, :] - pos[:, None, :]


def relative_index(size: int, *, device=None) -> Tensor:
    """idx[q, k] = k − q + size − 1 ∈ [0, 2·size−2]: the column of δ = k − q in a
    table of the 2·size−1 offsets −(size−1) … size−1."""
    r = torch.arange(size, device=device)
    return r[None, :] - r[:, None] + size - 1


class GaussianScores(nn.Module):
    """Quadratic encoding, Eq. (9) and Lemma 1: a Gaussian attention centre per head.

    score_h(δ) = −½ (δ − Δ_h)ᵀ Σ_h⁻¹ (δ − Δ_h), with Σ_h⁻¹ = s_h² I (``isotropic``,
    D_p = 3: r_δ = (‖δ‖², δ1, δ2)) or Σ_h⁻¹ = A_h A_hᵀ (D_p = 5:
    r_δ = (δ1, δ2, δ1², δ2², δ1δ2)).  Terms constant in δ cancel in the softmax,
    so this equals the paper's  −α_h (‖δ‖² − 2⟨δ, Δ_h⟩)  form with α_h = s_h²/2.
    """

    def __init__(
        self,
        *,
        num_heads: int,
        isotropic: bool = True,
        center_init_std: float = 2.0,
        spread_init_std: float = 0.01,
    ):
        super().__init__()
        self.num_heads = num_heads
        self.isotropic = isotropic
        self.centers = nn.Parameter(torch.randn(num_heads, 2) * center_init_std)
        if isotropic:
            spreads = 1.0 + torch.randn(num_heads) * spread_init_std
        else:
            spreads = torch.eye(2).repeat(num_heads, 1, 1) + torch.randn(num_heads, 2, 2) * spread_init_std
        self.spreads = nn.Parameter(spreads)

    @property
    def separable(self) -> bool:
        return self.isotropic

    def inv_covariance(self) -> Tensor:
        """Σ_h⁻¹ for every head, shape (num_heads, 2, 2)."""
        if self.isotropic:
            eye = torch.eye(2, device=self.spreads.device, dtype=self.spreads.dtype)
            return self.spreads.pow(2)[:, None, None] * eye
        return self.spreads @ self.spreads.transpose(-1, -2)

    def axis_offsets(self, height: int, width: int) -> tuple[Tensor, Tensor]:
        """e1[h, qr, kr] = δ1 − Δ_h,1 (N_h, H, H) and e2[h, qc, kc] = δ2 − Δ_h,2 (N_h, W, W):
        the two coordinates of δ − Δ_h depend on one axis each."""
        c = self.centers
        d_row, d_col = (
            (relative_index(n, device=c.device) - (n - 1)).to(c.dtype) for n in (height, width)
        )  # k − q
        return d_row[None] - c[:, 0, None, None], d_col[None] - c[:, 1, None, None]

    def forward(self, height: int, width: int) -> Tensor:
        """Scores (N_h, T, T) assembled from per-axis terms (no (N_h, T, T, 2) tensor):
        −½ (δ−Δ)ᵀ Σ⁻¹ (δ−Δ) = −½ Σ⁻¹₁₁ e1² − ½ Σ⁻¹₂₂ e2² −
        Σ⁻¹₁₂ e1 e2, with the first two
        terms row- and column-only and the last an outer product of e1 and e2."""
        h, t = self.num_heads, height * width
        if self.isotropic:
            row, col = self.axis_scores(height, width)
            return (row[:, :, None, :, None] + col[:, None, :, None, :]).reshape(h, t, t)
        prec = self.inv_covariance()
        e1, e2 = self.axis_offsets(height, width)
        row = -0.5 * prec[:, 0, 0, None, None] * e1.pow(2)
        col = -0.5 * prec[:, 1, 1, None, None] * e2.pow(2)
        cross = -prec[:, 0, 1, None, None] * e1  # Σ⁻¹ is symmetric: 2·(−½)·Σ⁻¹₁₂
        s = (row[:, :, None, :, None] + col[:, None, :, None, :]) + cross[:, :, None, :, None] * e2[
            :, None, :, None, :
        ]
        return s.reshape(h, t, t)

    def axis_scores(self, height: int, width: int) -> tuple[Tensor, Tensor]:
        """Per-axis terms (N_h, H, H) and (N_h, W, W) with score = row ⊕ col
        (Σ⁻¹ = s² I: −½ s² e1² and −½ s² e2²); isotropic heads only."""
        if not self.isotropic:
            raise ValueError("non-isotropic Gaussian scores do not factorise over axes")
        a = -0.5 * self.spreads.pow(2)[:, None, None]
        e1, e2 = self.axis_offsets(height, width)
        return a * e1.pow(2), a * e2.pow(2)


class LearnedScores(nn.Module):
    """Learned relative encoding (Section 4.2): r_δ = [r_row(δ1); r_col(δ2)].

    score_h(δ) = w_rowᵀ r_row[δ1] + w_colᵀ r_col[δ2], with one (2·S−1)×D_p table per
    axis (init N(0, 1)) and ``Linear(D_p → N_h, bias=False)`` per axis for the heads'
    query vectors w.  Supports grids up to ``max_size`` per side.
    """

    def __init__(self, *, num_heads: int, pos_dim: int, max_size: int):
        super().__init__()
        self.num_heads = num_heads
        self.max_size = max_size
        self.row_embeddings = nn.Embedding(2 * max_size - 1, pos_dim)
        self.col_embeddings = nn.Embedding(2 * max_size - 1, pos_dim)
        self.head_keys_row = nn.Linear(pos_dim, num_heads, bias=False)
        self.head_keys_col = nn.Linear(pos_dim, num_heads, bias=False)

    separable = True

    def _axis(self, table: nn.Embedding, keys: nn.Linear, size: int) -> Tensor:
        if size > self.max_size:
            raise ValueError(f"grid side {size} exceeds the learned table's {self.max_size}")
        # δ + S − 1 ∈ [0, 2S−2]
        idx = relative_index(size, device=table.weight.device) + self.max_size - size
        return keys(table(idx)).permute(2, 0, 1)  # (N_h, size, size)

    def axis_scores(self, height: int, width: int) -> tuple[Tensor, Tensor]:
        return (
            self._axis(self.row_embeddings, self.head_keys_row, height),
            self._axis(self.col_embeddings, self.head_keys_col, width),
        )

    def forward(self, height: int, width: int) -> Tensor:
        row, col = self.axis_scores(height, width)
        h = self.num_heads
        s = row[:, :, None, :, None] + col[:, None, :, None, :]  # (N_h, qr, qc, kr, kc)
        return s.reshape(h, height * width, height * width)


class QueryScores(nn.Module):
    """Query positional score (Ramachandran et al. 2019; the paper's Table 1 "SA learned
    emb. + content-based att."): pos_h(q, δ) = q_h[:D/2] · r_row(δ1) + q_h[D/2:] · r_col(δ2),
    one (2·S−1)×(D/2) table per axis (init N(0, 1)); the layer adds q_h·k_h and divides
    the sum by √D.  ``pos_dim`` = D_p = len(r_δ) = D.

    Computed without a (B, N_h, T, T, D) tensor (docs/design.md §4): each query half is dotted
    once with the 2S−1 offsets it can meet (:meth:`offset_scores`; T·(2S−1)·D MACs per
    head, ``study.models.cost``'s count), s_row and s_col are strided views of that
    (:meth:`axis_scores`; a gather was slower on CPU, by the scatter in its backward).
    """

    needs_query = True
    separable = False

    def __init__(self, *, num_heads: int, pos_dim: int, max_size: int):
        super().__init__()
        if pos_dim % 2:
            raise ValueError(f"pos_dim must be even (two halves), got {pos_dim}")
        self.num_heads = num_heads
        self.max_size = max_size
        self.row_embeddings = nn.Embedding(2 * max_size - 1, pos_dim // 2)
        self.col_embeddings = nn.Embedding(2 * max_size - 1, pos_dim // 2)

    def _offsets(self, table: nn.Embedding, size: int) -> Tensor:
        """r(δ) for δ = −(size−1) … size−1, (2·size−1, D/2): rows of the (2·S−1)-row table."""
        if size > self.max_size:
            raise ValueError(f"grid side {size} exceeds the learned table's {self.max_size}")
        return table.weight[self.max_size - size : self.max_size + size - 1]

    def offset_scores(self, q: Tensor, height: int, width: int, *, scale: float = 1.0) -> Tensor:
        """a[0, b, n, qr, qc, m] = scale · q_h[:D/2]·r_row(m − H + 1) and a[1, …] = scale ·
        q_h[D/2:]·r_col(m − W + 1): (2, B, N_h, H, W, M), M = max(2H−1, 2W−1) (the shorter
        table zero-padded).  One batched product reading both halves of ``q`` in place
        (no halves copied, no zero-filled half gradients in backward)."""
        b, n, t, d = q.shape
        half = self.row_embeddings.embedding_dim
        if d != 2 * half:
            raise ValueError(f"query dimension {d} is not twice the table width {half}")
        rows = self._offsets(self.row_embeddings, height)  # (2H−1, D/2): r_row(−(H−1) … H−1)
        cols = self._offsets(self.col_embeddings, width)
        m = max(len(rows), len(cols))
        tables = torch.stack([F.pad(rows, (0, 0, 0, m - len(rows))), F.pad(cols, (0, 0, 0, m - len(cols)))])
        tables = tables.transpose(1, 2).to(q.dtype)  # (2, D/2, M)
        if scale != 1.0:  # on the small tables, not on the (B, N_h, T, ·) result
            tables = tables * scale
        halves = q.transpose(1, 2).reshape(b * t * n, 2, half).transpose(0, 1)  # (2, B·T·N_h, D/2), a view
        a = torch.bmm(halves, tables).view(2, b, height, width, n, m)
        return a.permute(0, 1, 4, 2, 3, 5).contiguous()  # small: (2, B, N_h, H, W, M)

    def axis_scores(self, q: Tensor, height: int, width: int, *, scale: float = 1.0) -> tuple[Tensor, Tensor]:
        """s_row[b, n, qr, qc, kr] = q[:D/2]·r_row(kr − qr), (B, N_h, H, W, H), and
        s_col[b, n, qr, qc, kc] = q[D/2:]·r_col(kc − qc), (B, N_h, H, W, W), both times
        ``scale``.  Strided views of :meth:`offset_scores`: kr − qr + H − 1 moves by −1 per
        step of qr, so the view's qr stride is one less than the table's (qc likewise)."""
        a = self.offset_scores(q, height, width, scale=scale)
        b, n = q.shape[:2]
        s0, sb, sn, sr, sc, _ = a.stride()
        base = a.storage_offset()
        s_row = a.as_strided((b, n, height, width, height), (sb, sn, sr - 1, sc, 1), base + height - 1)
        s_col = a.as_strided((b, n, height, width, width), (sb, sn, sr, sc - 1, 1), base + s0 + width - 1)
        return s_row, s_col

    def forward(self, q: Tensor, height: int, width: int, *, scale: float = 1.0) -> Tensor:
        """Positional scores (B, N_h, T, T) times ``scale``."""
        s_row, s_col = self.axis_scores(q, height, width, scale=scale)
        b, n = q.shape[:2]
        t = height * width
        return (s_row[..., :, None] + s_col[..., None, :]).reshape(b, n, t, t)
