"""Token-level divergences between the teacher's and the student's next-token distributions (Recursive OPSD,
eq. 4 and the divergence ablation), over the full vocabulary, one value per position.

``forward_kl`` is the main method: D_KL(q || p) = sum_v q(v) log q(v)/p(v) with q the (stop-gradient) teacher and p
the student. It equals the OPSD code's ``beta = 0`` convention, ``F.kl_div(student_logp, teacher_logp,
log_target=True)`` summed over the vocabulary (github.com/siyan-zhao/OPSD @590ec26, built on TRL's GOLD trainer;
semantics only). ``reverse_kl`` is D_KL(p || q); ``jsd`` is (1/2) D_KL(q || m) + (1/2) D_KL(p || m), m = (q + p)/2.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

DIVERGENCES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {}


def register_divergence(name: str):
    """Register ``f(teacher_logp, student_logp) -> per-position divergence`` (log-probs over the last dim)."""

    def wrap(fn):
        if name in DIVERGENCES:
            raise ValueError(f"divergence {name!r} is already registered")
        DIVERGENCES[name] = fn
        return fn

    return wrap


def _kl(logp_a: torch.Tensor, logp_b: torch.Tensor) -> torch.Tensor:
    """sum_v a(v) (log a(v) - log b(v)), with 0 log 0 = 0."""
    a = logp_a.exp()
    return torch.where(a > 0, a * (logp_a - logp_b), torch.zeros_like(a)).sum(-1)


@register_divergence("forward_kl")
def forward_kl(teacher_logp: torch.Tensor, student_logp: torch.Tensor) -> torch.Tensor:
    """D_KL(teacher || student) per position (the paper's main divergence)."""
    return _kl(teacher_logp, student_logp)


@register_divergence("reverse_kl")
def reverse_kl(teacher_logp: torch.Tensor, student_logp: torch.Tensor) -> torch.Tensor:
    """D_KL(student || teacher) per position."""
    return _kl(student_logp, teacher_logp)


@register_divergence("jsd")
def jsd(teacher_logp: torch.Tensor, student_logp: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (natural log) per position."""
    log_m = torch.logaddexp(teacher_logp, student_logp) - math.log(2.0)
    return 0.5 * _kl(teacher_logp, log_m) + 0.5 * _kl(student_logp, log_m)


def divergence(name: str, teacher_logits: torch.Tensor, student_logits: torch.Tensor) -> torch.Tensor:
    """Per-position divergence ``name`` from logits; the teacher side is detached (stop-gradient, eq. 3)."""
    if name not in DIVERGENCES:
        raise KeyError(f"unknown divergence {name!r}; known: {sorted(DIVERGENCES)}")
    if teacher_logits.shape != student_logits.shape:
        raise ValueError(f"teacher logits {tuple(teacher_logits.shape)} and student logits "
                         f"{tuple(student_logits.shape)} must have the same shape")
    t = torch.log_softmax(teacher_logits.detach().float(), -1)
    s = torch.log_softmax(student_logits.float(), -1)
    return DIVERGENCES[name](t, s)
