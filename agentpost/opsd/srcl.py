"""Self-Refined Concise Learning (Recursive OPSD §3.2, eqs. 5-6, App. M): accept gates and the SRCL loss.

The current model rewrites its own response from the refinement prompt (greedy, no reference); the rewrite is
accepted only when every gate passes; the reference answer is used only to accept or reject. Gates (thresholds
are fields of :class:`Gates`, defaults from App. M where it gives them):

* ``natural_eos``  the rewrite ended with EOS and is non-empty;
* ``max_tokens``   at most ``max_tokens`` tokens (12K);
* ``shorter``      strictly fewer tokens than the source rollout;
* ``no_reflection`` none of the reflection phrases (case-insensitive);
* ``min_tokens``   at least ``min_tokens`` tokens (32);
* ``final_box_correct`` a balanced ``\\boxed{}`` exists and the last one matches the reference;
* ``no_earlier_wrong_box`` no earlier box holds a wrong answer;
* ``no_repetition`` no sentence occurs more than ``max_sentence_repeats`` times (the paper's repeated-phrase
  thresholds are not given; this threshold is the project's).

Not implemented: App. M's "self-contained" check (no continuation fragment, no reference to omitted material),
which has no counterpart in a one-line arithmetic answer. Answers are compared by
:func:`agentpost.opsd.answers.answers_match` (``math_verify``, as App. M), the same check the task's accuracy uses.
Reflection phrases match whole words only (``await`` does not contain the cue ``wait``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from agentpost.models.arith_lm import boxed_values
from agentpost.opsd.answers import answers_match
from agentpost.rl import aggregate

REFLECTION_PHRASES = ("wait", "actually", "correction", "double-check", "start over")


@dataclass(frozen=True)
class Gates:
    min_tokens: int = 32
    max_tokens: int = 12_000
    reflection_phrases: tuple[str, ...] = REFLECTION_PHRASES
    max_sentence_repeats: int = 2

    def __post_init__(self):
        if not 0 < self.min_tokens <= self.max_tokens:
            raise ValueError(f"need 0 < min_tokens <= max_tokens, got {self.min_tokens}, {self.max_tokens}")
        if self.max_sentence_repeats < 1:
            raise ValueError(f"max_sentence_repeats must be >= 1, got {self.max_sentence_repeats}")


GATE_NAMES = (
    "natural_eos",
    "max_tokens",
    "shorter",
    "no_reflection",
    "min_tokens",
    "final_box_correct",
    "no_earlier_wrong_box",
    "no_repetition",
)


def has_reflection(text: str, phrases=REFLECTION_PHRASES) -> bool:
    """Whether ``text`` contains one of ``phrases`` as whole words, case-insensitive (``Wait,`` yes, ``await`` no)."""
    return any(re.search(rf"(?<!\w){re.escape(p)}(?!\w)", text, flags=re.IGNORECASE) for p in phrases)


def gate_results(
    text: str, n_tokens: int, ended: bool, source_tokens: int, reference: str, gates: Gates = Gates()
) -> dict[str, bool]:
    """Each gate's pass/fail for one rewrite of ``n_tokens`` tokens (``ended``: finished with EOS)."""
    boxes = boxed_values(text)
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    return {
        "natural_eos": bool(ended and text.strip()),
        "max_tokens": n_tokens <= gates.max_tokens,
        "shorter": n_tokens < source_tokens,
        "no_reflection": not has_reflection(text, gates.reflection_phrases),
        "min_tokens": n_tokens >= gates.min_tokens,
        "final_box_correct": bool(boxes) and answers_match(boxes[-1], reference),
        "no_earlier_wrong_box": all(answers_match(b, reference) for b in boxes[:-1]),
        "no_repetition": max((sentences.count(s) for s in sentences), default=0) <= gates.max_sentence_repeats,
    }


def accept(*args, **kwargs) -> bool:
    """A_i of eq. 6: every gate of :func:`gate_results` passes."""
    return all(gate_results(*args, **kwargs).values())


def srcl_loss(token_nll: torch.Tensor, token_mask: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor:
    """L_SRCL (eq. 6): sum_i A_i sum_t NLL_{i,t} / N_k, N_k = sum_i A_i |c_i|; exactly 0 when N_k = 0.

    ``token_nll`` and ``token_mask`` are ``[B, T]`` (mask 1 on each rewrite's tokens), ``accepted`` is ``[B]``;
    this is :func:`agentpost.rl.aggregate` ``token_mean`` over the accepted rows."""
    mask = token_mask * accepted.to(token_mask.dtype)[:, None]
    return aggregate(token_nll * mask, mask, "token_mean")
