"""Recursive OPSD (arXiv 2609.30652): on-policy self-distillation with a privileged copy of the model as teacher,
Dynamic Co-Evolution (live teacher) and Self-Refined Concise Learning. No official code exists; the base method's
code (github.com/siyan-zhao/OPSD @590ec26) is cited for the divergence convention.
"""

from agentpost.opsd.divergence import DIVERGENCES, divergence, forward_kl, jsd, reverse_kl
from agentpost.opsd.loss import distill_loss, pack, response_logits, response_mask
from agentpost.opsd.probe import fixed_incorrect, probe
from agentpost.opsd.answers import answers_match
from agentpost.opsd.srcl import GATE_NAMES, REFLECTION_PHRASES, Gates, accept, gate_results, has_reflection, srcl_loss
from agentpost.opsd.tasks import ARITHMETIC, Arithmetic, GSM8KChat
from agentpost.opsd.teacher import EMA, TEACHER_SYNCS, Frozen, Live, Periodic, TeacherSync, make_sync, trainable
from agentpost.opsd.train import ArmConfig, data_order, evaluate, reference_nll, train_arm

__all__ = [
    "ARITHMETIC",
    "Arithmetic",
    "ArmConfig",
    "GSM8KChat",
    "DIVERGENCES",
    "EMA",
    "Frozen",
    "GATE_NAMES",
    "Gates",
    "Live",
    "Periodic",
    "REFLECTION_PHRASES",
    "TEACHER_SYNCS",
    "TeacherSync",
    "accept",
    "answers_match",
    "has_reflection",
    "data_order",
    "distill_loss",
    "divergence",
    "evaluate",
    "fixed_incorrect",
    "forward_kl",
    "gate_results",
    "jsd",
    "make_sync",
    "pack",
    "probe",
    "response_logits",
    "response_mask",
    "reference_nll",
    "reverse_kl",
    "srcl_loss",
    "train_arm",
    "trainable",
]
