"""The next-K contrastive objective and the ID-semantic alignment loss (muser.md sections 4 and 6).

The next-K form is the third-party README's (exact paper form unknown); the alignment loss is unknown in the paper
and implemented here as a symmetric InfoNCE between the two views of the same items (the paper does not give the loss's
form).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NEGATIVES = ("in_batch", "sampled", "both", "full")


def next_k_contrastive(
    pos: torch.Tensor, neg: torch.Tensor, pos_mask: torch.Tensor | None = None, neg_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """-(1/K) sum_k log( exp s(u,i_k) / (exp s(u,i_k) + sum_{j in N} exp s(u,j)) ), mean over users.

    ``pos`` (B, K) scores of the next K items (``pos_mask`` False where a user has fewer than K left), ``neg``
    (B, J) scores of the negatives (``neg_mask`` False for a negative that is one of the user's own positives).
    Each positive has its own denominator: the other positives are not negatives.
    Example: pos = (2, 1), neg = (0, 0) -> -(1/2)[log(e^2/(e^2+2)) + log(e/(e+2))] = 0.3955.
    """
    if pos.dim() != 2 or neg.dim() != 2 or pos.shape[0] != neg.shape[0]:
        raise ValueError(f"pos must be (B, K) and neg (B, J); got {tuple(pos.shape)}, {tuple(neg.shape)}")
    pos_mask = torch.ones_like(pos, dtype=torch.bool) if pos_mask is None else pos_mask
    neg_mask = torch.ones_like(neg, dtype=torch.bool) if neg_mask is None else neg_mask
    neg_lse = torch.logsumexp(neg.masked_fill(~neg_mask, float("-inf")), dim=1, keepdim=True)  # (B, 1)
    log_p = pos - torch.logaddexp(pos, neg_lse)
    w = pos_mask.to(pos.dtype)
    per_user = -(log_p * w).sum(1) / w.sum(1).clamp_min(1.0)
    has = pos_mask.any(1)
    return per_user[has].mean()


def alignment_infonce(id_view: torch.Tensor, sem_view: torch.Tensor, tau: float = 0.1) -> torch.Tensor:
    """Symmetric InfoNCE between the ID view and the semantic view of the same n items (row i matches row i).

    L = (CE(S, I) + CE(S^T, I)) / 2 with S_ij = cos(a_i, b_j) / tau. Two orthogonal, perfectly matched pairs at
    tau = 1: S = I, each row's CE = log(1 + e^{-1}) + ... = log(e + 1) - 1 = 0.3133.
    """
    if id_view.shape != sem_view.shape or id_view.dim() != 2:
        raise ValueError(f"views must both be (n, d); got {tuple(id_view.shape)}, {tuple(sem_view.shape)}")
    s = F.normalize(id_view, dim=-1) @ F.normalize(sem_view, dim=-1).T / tau
    target = torch.arange(s.shape[0], device=s.device)
    return 0.5 * (F.cross_entropy(s, target) + F.cross_entropy(s.T, target))
