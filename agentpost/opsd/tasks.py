"""The two tasks one OPSD training loop runs on: the prompts of the three roles, the reference, the answer check
and the probe's built incorrect trajectories.

* :class:`Arithmetic` (``smoke``, ``a100``): GSM8K-derived arithmetic with the project's small LM; the formats of
  :mod:`agentpost.models.arith_lm` (reference = GSM8K's annotation line ``48/2=24``).
* :class:`GSM8KChat` (``a100-hub``): real GSM8K word problems through a hub model's chat template in non-thinking
  mode (``enable_thinking=False``, the paper's mode); the verified solution ``g`` is GSM8K's worked answer without
  calculator annotations, ending in ``The answer is \\boxed{n}``; an answer is the last balanced ``\\boxed{}``.

Both have the same methods, so :func:`agentpost.opsd.train.train_arm`, :func:`~agentpost.opsd.train.evaluate` and
:func:`agentpost.opsd.probe.probe` take either. Layouts (the paper leaves the prompt layout open): ``assistant`` puts
``g`` and the transition instruction ``tau`` at the start of the assistant turn (Recursive OPSD §3.1); ``user`` appends
them to the user turn (OPSD).
"""

from __future__ import annotations

import numpy as np

from agentpost.data import gsm8k
from agentpost.models import arith_lm as A
from agentpost.opsd.answers import answers_match

LAYOUTS = A.LAYOUTS


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown teacher layout {layout!r}; use one of {LAYOUTS}")


class Arithmetic:
    """GSM8K-derived arithmetic (items: :class:`agentpost.data.gsm8k.Expression`)."""

    name = "gsm8k-arithmetic"

    def student_prompt(self, e) -> str:
        return A.student_prompt(e)

    def teacher_prompt(self, e, layout: str = "assistant") -> str:
        return A.teacher_prompt(e, layout)

    def refine_prompt(self, e, previous: str) -> str:
        return A.refine_prompt(e, previous)

    def reference_answer(self, e) -> str:
        return e.result

    def reference_response(self, e) -> str:
        """The correct response in the model's format (concise style, scratchpad included): what
        :func:`agentpost.opsd.train.reference_nll` scores."""
        return A.response(e, "concise")

    def is_correct(self, text: str, e) -> bool:
        ans = A.final_answer(text)
        return ans is not None and answers_match(ans, e.result)

    def wrong_answer(self, e, rng: np.random.Generator) -> str:
        return A.wrong_value(e.result, rng)

    def probe_texts(self, e, wrong: str) -> tuple[str, str]:
        """(endpoint trajectory, revision prefix) of a built incorrect answer."""
        return f"{e.text} = {wrong}. {A.boxed(wrong)}", f"{e.text} = {wrong}. "


class GSM8KChat:
    """Real GSM8K problems (items: dicts with ``question`` and ``answer``) in ``tokenizer``'s chat template."""

    name = "gsm8k"
    INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
    TAU = "Now solve the problem in your own words, using the reference only to check your reasoning."
    REFINE = (
        "Rewrite the previous answer more concisely, keeping every needed step, and put the final answer "
        "within \\boxed{}."
    )

    def __init__(self, tokenizer):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the GSM8K chat task needs a tokenizer with a chat template (an instruct model's)")
        self.tokenizer = tokenizer

    def _chat(self, user: str) -> str:
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True, enable_thinking=False
        )

    def _question(self, p) -> str:
        return f"{p['question']}\n{self.INSTRUCTION}"

    def reference(self, p) -> str:
        """The verified solution g: GSM8K's worked answer, annotations removed, boxed final answer."""
        return f"{gsm8k.solution(p['answer'])}\n{A.boxed(self.reference_answer(p))}"

    def student_prompt(self, p) -> str:
        return self._chat(self._question(p))

    def teacher_prompt(self, p, layout: str = "assistant") -> str:
        _check_layout(layout)
        ref = f"Reference solution:\n{self.reference(p)}\n{self.TAU}"
        if layout == "assistant":
            return self.student_prompt(p) + ref + "\n\n"
        return self._chat(f"{self._question(p)}\n\n{ref}")

    def refine_prompt(self, p, previous: str) -> str:
        return self._chat(f"{p['question']}\n\nPrevious answer:\n{previous}\n\n{self.REFINE}")

    def reference_answer(self, p) -> str:
        return gsm8k.final_answer(p["answer"])

    def reference_response(self, p) -> str:
        """The correct response scored by :func:`agentpost.opsd.train.reference_nll`: the verified solution g."""
        return self.reference(p)

    def is_correct(self, text: str, p) -> bool:
        ans = A.final_answer(text)
        return ans is not None and answers_match(ans, self.reference_answer(p))

    def wrong_answer(self, p, rng: np.random.Generator) -> str:
        """A seeded wrong value (:func:`agentpost.models.arith_lm.wrong_value`); a non-integer answer gets a digit
        appended."""
        r = self.reference_answer(p)
        return A.wrong_value(r, rng) if r.isdigit() else r + "1"

    def probe_texts(self, p, wrong: str) -> tuple[str, str]:
        """GSM8K's own steps followed by a wrong final answer: endpoint and revision prefix."""
        steps = gsm8k.solution(p["answer"])
        return f"{steps}\n{A.boxed(wrong)}", f"{steps}\nSo the answer is {wrong}. "


ARITHMETIC = Arithmetic()
