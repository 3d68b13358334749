"""Divergences between a target (teacher) distribution P and a model (student) distribution Q over the last
dimension, from log-probabilities (log-space inputs, so a log-softmax output goes in as is), one value per position.

``forward_kl`` D_KL(P || Q) = sum_v P(v) (log P(v) - log Q(v)); ``reverse_kl`` D_KL(Q || P); ``generalized_jsd``
JSD_beta(P || Q) = beta D_KL(P || M) + (1 - beta) D_KL(Q || M), M = beta P + (1 - beta) Q, 0 < beta < 1
(Liger-Kernel ``src/liger_kernel/transformers/jsd.py::LigerJSD``, teacher ``log_p`` and student ``log_q``; semantics
only); beta = 1/2 is the symmetric Jensen-Shannon divergence ``jsd`` (natural log, at most log 2). Terms with zero
weight are 0 (0 log 0 = 0), also in the gradient. Used by Recursive OPSD (token level, full vocabulary) and MaD-RL
(category distributions).
"""

from __future__ import annotations

import math

import torch

from agentpost.registry import Registry

#: name -> f(target_logp, model_logp) -> per-position divergence.
DIVERGENCES = Registry("divergence")


def kl(logp_a: torch.Tensor, logp_b: torch.Tensor) -> torch.Tensor:
    """sum_v a(v) (log a(v) - log b(v)) over the last dim, 0 log 0 = 0 (no NaN in value or gradient where a = 0;
    +inf where a > 0 = b)."""
    if logp_a.shape != logp_b.shape:
        raise ValueError(f"log-probabilities of shapes {tuple(logp_a.shape)} and {tuple(logp_b.shape)} differ")
    a = logp_a.exp()
    live = a > 0
    diff = torch.where(live, logp_a - torch.where(live, logp_b, torch.zeros_like(logp_b)), torch.zeros_like(a))
    return (a * diff).sum(-1)


@DIVERGENCES.register("forward_kl")
def forward_kl(target_logp: torch.Tensor, model_logp: torch.Tensor) -> torch.Tensor:
    """D_KL(P || Q): the target's mass where the model puts little (mode covering)."""
    return kl(target_logp, model_logp)


@DIVERGENCES.register("reverse_kl")
def reverse_kl(target_logp: torch.Tensor, model_logp: torch.Tensor) -> torch.Tensor:
    """D_KL(Q || P) (mode seeking)."""
    return kl(model_logp, target_logp)


def generalized_jsd(target_logp: torch.Tensor, model_logp: torch.Tensor, beta: float = 0.5) -> torch.Tensor:
    """JSD_beta(P || Q) = beta D_KL(P || M) + (1 - beta) D_KL(Q || M), M = beta P + (1 - beta) Q (module doc)."""
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must lie strictly between 0 and 1 (use forward_kl / reverse_kl), got {beta}")
    log_m = torch.logaddexp(target_logp + math.log(beta), model_logp + math.log1p(-beta))
    return beta * kl(target_logp, log_m) + (1.0 - beta) * kl(model_logp, log_m)


@DIVERGENCES.register("jsd")
def jsd(target_logp: torch.Tensor, model_logp: torch.Tensor) -> torch.Tensor:
    """Symmetric Jensen-Shannon divergence, :func:`generalized_jsd` at beta = 1/2."""
    return generalized_jsd(target_logp, model_logp, 0.5)
