"""Token-level divergences between the teacher's and the student's next-token distributions (Recursive OPSD,
eq. 4 and the divergence ablation), over the full vocabulary, one value per position.

The divergences themselves are the shared ones of :mod:`agentpost.rl.divergence` with the teacher as the target P
and the student as the model Q. ``forward_kl`` is the main method: D_KL(q || p) = sum_v q(v) log q(v)/p(v) with q the
(stop-gradient) teacher and p the student. It equals the OPSD code's ``beta = 0`` convention,
``F.kl_div(student_logp, teacher_logp, log_target=True)`` summed over the vocabulary (github.com/siyan-zhao/OPSD
@590ec26, built on TRL's GOLD trainer; semantics only). ``reverse_kl`` is D_KL(p || q); ``jsd`` is
(1/2) D_KL(q || m) + (1/2) D_KL(p || m), m = (q + p)/2.
"""

from __future__ import annotations

import torch

from agentpost.rl.divergence import DIVERGENCES, forward_kl, jsd, reverse_kl

__all__ = ["DIVERGENCES", "divergence", "forward_kl", "jsd", "reverse_kl"]


def divergence(name: str, teacher_logits: torch.Tensor, student_logits: torch.Tensor) -> torch.Tensor:
    """Per-position divergence ``name`` from logits; the teacher side is detached (stop-gradient, eq. 3)."""
    fn = DIVERGENCES.lookup(name)
    if teacher_logits.shape != student_logits.shape:
        raise ValueError(
            f"teacher logits {tuple(teacher_logits.shape)} and student logits "
            f"{tuple(student_logits.shape)} must have the same shape"
        )
    t = torch.log_softmax(teacher_logits.detach().float(), -1)
    s = torch.log_softmax(student_logits.float(), -1)
    return fn(t, s)
