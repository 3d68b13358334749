"""Algorithm 1: action-region attention-aware LRFU (actkv.md, "Algorithm 1").

Pieces, each callable on its own (the dense engine and the paged kernels share them):

- :func:`reduce_heads` / :func:`head_reduce` — attention rows ``A[h, t, i]`` of query heads -> per-entry rows
  (``mean_of_max``: max over the query heads of a GQA group, then mean over KV heads; ``max``: max over all
  heads; ``per_head``: max over the group, one row per KV head);
- :class:`ActionAccumulator` — running mean of those rows over the action tokens of the current region,
  :math:`a^{(r)}_{\\ell,i}`, reset when a new region opens;
- :func:`nucleus_hits` — the top-p hit set :math:`H^{(r)}_\\ell`;
- :func:`lrfu_update` — :math:`\\mathrm{KS}\\leftarrow\\lambda\\,\\mathrm{KS}+\\mathbb 1[i\\in H]\\,a_i`;
- :func:`select_top_b` — the per-layer top-B keep set with the recency tie-break (the later of equal scores wins; its
one home is
  :mod:`agentpost.kv_retention`, shared with DeltaS);
- :func:`algorithm1_step` — all of the above for one layer and one round boundary, from the round's mean action
  attention (however it was obtained: eager probabilities here, LSE recovery in the paged kernels).
"""

from __future__ import annotations

import torch

from agentpost.kv_retention import select_top_b

HEAD_REDUCE = ("mean_of_max", "max", "per_head")
#: Slack in "covered mass >= p * total" (0.8 + 0.1 vs 0.9 * 1.0 is at the floating-point edge; actkv.md test 1).
NUCLEUS_TOL = 1e-12


def head_reduce(
    per_kv_head: torch.Tensor, mode: str = "mean_of_max", *, dim: int = -2, keepdim: bool = False
) -> torch.Tensor:
    """Combine rows that are already one per KV head (each the max over its GQA group) along ``dim``
    (the paper leaves the pooling over a group's query heads open): ``mean_of_max`` (default, Alg. 1's ``mean_g max_{h
    in g}``; the mean over KV heads commutes with the mean over action tokens, so it may be applied after accumulation,
    as the paged path does) the mean; ``max`` the max (the max over all query heads); ``per_head`` unchanged."""
    if mode not in HEAD_REDUCE:
        raise ValueError(f"head_reduce mode must be one of {HEAD_REDUCE}, got {mode!r}")
    if mode == "mean_of_max":
        return per_kv_head.mean(dim=dim, keepdim=keepdim)
    if mode == "max":
        return per_kv_head.amax(dim=dim, keepdim=keepdim)
    return per_kv_head


def reduce_heads(attn: torch.Tensor, n_kv_heads: int, head_reduce_mode: str = "mean_of_max") -> torch.Tensor:
    """Reduce attention probabilities ``attn`` of shape ``(H_q, T, N)`` over heads: the max over each GQA group,
    then :func:`head_reduce`.

    Returns ``(G, T, N)`` where ``G = 1`` for ``mean_of_max``/``max`` and ``G = n_kv_heads`` for ``per_head``.
    Query head ``h`` belongs to KV head ``h // (H_q / n_kv_heads)`` (the ``repeat_kv`` layout of HF models).
    """
    if head_reduce_mode not in HEAD_REDUCE:
        raise ValueError(f"head_reduce must be one of {HEAD_REDUCE}, got {head_reduce_mode!r}")
    if attn.dim() != 3:
        raise ValueError(f"attention must have shape (query_heads, tokens, entries), got {tuple(attn.shape)}")
    h_q = attn.shape[0]
    if n_kv_heads <= 0 or h_q % n_kv_heads:
        raise ValueError(f"{h_q} query heads cannot be grouped into {n_kv_heads} KV heads")
    grouped = attn.reshape(n_kv_heads, h_q // n_kv_heads, *attn.shape[1:]).amax(dim=1)  # (G, T, N)
    return head_reduce(grouped, head_reduce_mode, dim=0, keepdim=True)


class ActionAccumulator:
    """Running mean of reduced attention rows over the action tokens of the current region.

    Holds a ``(G, N)`` sum and a token count; new cache entries extend it with zeros; :meth:`reset` starts a
    new region (actkv.md pseudo-code step 2). Only rows passed to :meth:`add` count, so attention paid by
    reasoning or observation tokens never reaches the keep score.
    """

    def __init__(self, n_groups: int) -> None:
        self.n_groups = n_groups
        self.sum = torch.zeros(n_groups, 0, dtype=torch.float64)
        self.count = 0

    def reset(self) -> None:
        self.sum.zero_()
        self.count = 0

    def grow(self, n_entries: int) -> None:
        """Make room for ``n_entries`` entries in total (new entries start at 0)."""
        extra = n_entries - self.sum.shape[1]
        if extra > 0:
            self.sum = torch.cat([self.sum, torch.zeros(self.n_groups, extra, dtype=self.sum.dtype)], dim=1)

    def add(self, rows: torch.Tensor) -> None:
        """Add reduced rows ``(G, T, N)`` of ``T`` action tokens (``N`` <= current entries, zero-padded)."""
        if rows.shape[0] != self.n_groups:
            raise ValueError(f"rows have {rows.shape[0]} head groups, accumulator has {self.n_groups}")
        self.grow(rows.shape[2])
        self.sum[:, : rows.shape[2]] += rows.sum(dim=1).to(self.sum.dtype)
        self.count += rows.shape[1]

    def mean(self) -> torch.Tensor:
        """:math:`a^{(r)}` of shape ``(G, N)`` (zeros when no action token was seen)."""
        return self.sum / self.count if self.count else torch.zeros_like(self.sum)

    def permute(self, keep: torch.Tensor) -> None:
        """Keep only entries ``keep`` (``(G, n)`` or ``(n,)`` indices), in that order (compaction); entries not
        grown to yet count as 0."""
        keep = keep if keep.dim() == 2 else keep.unsqueeze(0).expand(self.n_groups, -1)
        if keep.numel():
            self.grow(int(keep.max()) + 1)
        self.sum = torch.gather(self.sum, 1, keep[: self.n_groups])


def nucleus_hits(a: torch.Tensor, p: float = 0.9, tol: float = NUCLEUS_TOL) -> torch.Tensor:
    """Boolean hit mask of the smallest set covering at least ``p`` of the mass of ``a`` (last dim).

    Built greedily in descending ``a`` (ties: lower index first, by a stable sort). An all-zero row has no hits.
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"nucleus mass p must be in (0, 1], got {p}")
    if (a < 0).any():
        raise ValueError("attention mass must be non-negative")
    vals, order = torch.sort(a, dim=-1, descending=True, stable=True)
    total = vals.sum(dim=-1, keepdim=True)
    before = vals.cumsum(dim=-1) - vals  # mass covered before adding each entry
    take = (before < p * total - tol) & (vals > 0)
    hits = torch.zeros_like(a, dtype=torch.bool)
    return hits.scatter(-1, order, take)


def lrfu_update(ks: torch.Tensor, a: torch.Tensor, hits: torch.Tensor, decay: float = 0.5) -> torch.Tensor:
    """Keep-score recurrence :math:`\\mathrm{KS}\\leftarrow\\lambda\\mathrm{KS}+\\mathbb 1[i\\in H]\\,a_i`.

    ``ks`` may be shorter than ``a`` (new entries start at 0)."""
    if ks.shape[-1] > a.shape[-1]:
        raise ValueError(f"keep score has {ks.shape[-1]} entries but attention only {a.shape[-1]}")
    pad = a.shape[-1] - ks.shape[-1]
    if pad:
        ks = torch.cat([ks, torch.zeros(*ks.shape[:-1], pad, dtype=ks.dtype)], dim=-1)
    return decay * ks + hits.to(a.dtype) * a


def algorithm1_step(
    a: torch.Tensor, ks: torch.Tensor, budget: int, *, p: float = 0.9, decay: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's compression at a round boundary: ``a`` ``(G, N)`` = the round's mean action attention over the
    evictable entries (:class:`ActionAccumulator`), ``ks`` ``(G, N')`` the keep scores (``N' <= N``, new entries 0).

    Returns ``(keep, ks_kept)``: the kept indices ``(G, min(B, N))`` (ascending) and their updated keep scores."""
    ks = lrfu_update(ks, a, nucleus_hits(a, p), decay)
    keep = select_top_b(ks, budget)
    return keep, torch.gather(ks, -1, keep)
