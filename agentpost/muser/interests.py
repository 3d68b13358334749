"""Multi-query interests, the orthogonality penalty and candidate-adaptive scoring (muser.md sections 3, 5, 6).

The formulas for u_m, alpha_m and the score come from the third-party re-implementation's README
(github.com/daiwk/auto-research, ``src/auto_research/reproductions/muser/model.py``; reference only, not copied);
the orthogonality penalty is the paper's Eq. 12 per digest-B. None is confirmed against the paper text.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ORTHO_FORMS = ("normalized", "raw", "mean_gram")
INTEREST_AGGREGATIONS = ("softmax", "max")


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` with masked-out entries at exactly 0 (every row must keep one entry)."""
    if not bool(mask.any(dim).all()):
        raise ValueError("masked_softmax: a row has no unmasked entry")
    return torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=dim)


def interest_attention(queries: torch.Tensor, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A = softmax_tokens(q_m H^T / sqrt(d)), shape (B, M, n); padding tokens get weight 0."""
    d = h.shape[-1]
    logits = torch.einsum("md,bnd->bmn", queries, h) / d**0.5
    return masked_softmax(logits, mask.unsqueeze(1).expand_as(logits))


def multi_query_interests(queries: torch.Tensor, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """u_m = softmax(q_m H^T / sqrt d) H for learnable queries ``queries`` (M, d) over ``h`` (B, n, d) -> (B, M, d)."""
    return interest_attention(queries, h, mask) @ h


def orthogonality_penalty(u: torch.Tensor, form: str = "normalized") -> torch.Tensor:
    """Per-user sum_{m != n} (u_m^T u_n)^2 (Eq. 12 per digest-B), mean over the batch.

    ``normalized`` (default): on u_m / ||u_m|| (prevents shrinking u to escape the penalty); ``raw``: on u as is;
    ``mean_gram``: mean over all entries of (U U^T - I)^2 on normalised u (the third-party form).
    Example: u_1 = (1, 0), u_2 = (1, 1)/sqrt 2 -> 2 x 0.5 = 1.0.
    """
    if form not in ORTHO_FORMS:
        raise ValueError(f"ortho form must be one of {ORTHO_FORMS}, got {form!r}")
    v = u if form == "raw" else F.normalize(u, dim=-1)
    gram = v @ v.transpose(-1, -2)
    eye = torch.eye(u.shape[-2], dtype=u.dtype, device=u.device)
    if form == "mean_gram":
        return ((gram - eye) ** 2).mean(dim=(-1, -2)).mean()
    return ((gram * (1 - eye)) ** 2).sum(dim=(-1, -2)).mean()


def interest_cosines(u: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """cos(u_m, e_i): ``u`` (B, M, d) with ``items`` (N, d) -> (B, M, N), or with (B, N, d) -> (B, M, N)."""
    un = F.normalize(u, dim=-1)
    en = F.normalize(items, dim=-1)
    if en.dim() == 2:
        return torch.einsum("bmd,nd->bmn", un, en)
    return torch.einsum("bmd,bnd->bmn", un, en)


def interest_weights(cos: torch.Tensor, tau: float) -> torch.Tensor:
    """alpha_m(i) = softmax_m(cos(u_m, e_i) / tau) over the interest axis (dim -2 of (B, M, N))."""
    return torch.softmax(cos / tau, dim=-2)


def adaptive_score(cos: torch.Tensor, tau: float, agg: str = "softmax") -> torch.Tensor:
    """s(u, i) = sum_m alpha_m(i) cos(u_m, e_i) / tau  (``max``: max_m cos / tau), (B, M, N) -> (B, N).

    Worked example: u = ((1,0), (0,1)), e = (0.6, 0.8), tau = 0.1 -> alpha = (0.1192, 0.8808), s = 7.7616.
    """
    if agg not in INTEREST_AGGREGATIONS:
        raise ValueError(f"interest_agg must be one of {INTEREST_AGGREGATIONS}, got {agg!r}")
    if agg == "max":
        return cos.max(dim=-2).values / tau
    return (interest_weights(cos, tau) * cos).sum(dim=-2) / tau
