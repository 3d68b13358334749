"""GSM8K (MIT, github.com/openai/grade-school-math @3101c7d): problems, and the "GSM8K-derived arithmetic" task.

GSM8K's worked answers carry calculator annotations ``<<48/2=24>>``. A small model trained from scratch cannot
solve the word problems, so the CPU diagnostics use these annotations as a public arithmetic task. Label results
"GSM8K-derived arithmetic", never "GSM8K accuracy".

The task (:func:`arithmetic_split`): annotations of the form ``a<op>b=c`` with ``op`` in ``+ - * /``, non-negative
integer operands and an integer result, every number at most ``max_digits`` digits; duplicates removed, first
occurrence order kept. ``train`` and ``validation`` partition the train split's distinct expressions by a hash of
the expression (``validation_percent`` of them, stable under reordering); ``test`` is the test split's distinct
expressions minus any that occur anywhere in the train split (so a test item is never a memorised train item).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

from agentpost.data.hf import local_rows
from agentpost.data.registry import data_file

SPLITS = {"train": "train.jsonl", "test": "test.jsonl"}
ARITH_SPLITS = ("train", "validation", "test")
_ANNOTATION = re.compile(r"<<([^<>]*)>>")
_BINARY = re.compile(r"(\d+)([-+*/])(\d+)=(\d+)")


@dataclass(frozen=True)
class Expression:
    """One calculator annotation ``a op b = c`` (``text`` is ``"a op b"`` without spaces, ``result`` is ``c``)."""

    text: str
    result: str

    @property
    def line(self) -> str:
        """The worked result line as GSM8K writes it, e.g. ``48/2=24`` (the privileged context)."""
        return f"{self.text}={self.result}"


@functools.lru_cache(maxsize=None)
def problems(split: str) -> tuple[dict, ...]:
    """The split's problems as dicts with ``question`` and ``answer``, in file order (read through ``datasets``)."""
    if split not in SPLITS:
        raise ValueError(f"unknown GSM8K split {split!r}; use one of {sorted(SPLITS)}")
    return tuple(local_rows(data_file("gsm8k", SPLITS[split]), "json").to_list())


def annotations(split: str) -> list[str]:  # type: ignore[no-redef]  # shadows the __future__ feature name
    """Every calculator annotation of the split, in file order (``"48/2=24"``)."""
    return [m for p in problems(split) for m in _ANNOTATION.findall(p["answer"])]


def _binary(split: str, max_digits: int) -> list[Expression]:
    seen, out = set(), []
    for ann in annotations(split):  # type: ignore[operator]  # the function below, not the __future__ feature
        m = _BINARY.fullmatch(ann.replace(" ", ""))
        if m is None or any(len(g) > max_digits for g in (m[1], m[3], m[4])):
            continue
        expr = Expression(f"{m[1]}{m[2]}{m[3]}", m[4])
        if expr.text not in seen:
            seen.add(expr.text)
            out.append(expr)
    return out


def _in_validation(text: str, percent: int) -> bool:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 100 < percent


@functools.lru_cache(maxsize=None)
def arithmetic_split(split: str, *, max_digits: int = 3, validation_percent: int = 10) -> tuple[Expression, ...]:
    """The distinct expressions of one split of GSM8K-derived arithmetic (module docstring)."""
    if split not in ARITH_SPLITS:
        raise ValueError(f"unknown GSM8K-derived arithmetic split {split!r}; use one of {ARITH_SPLITS}")
    if max_digits < 1 or not 0 < validation_percent < 100:
        raise ValueError(
            f"need max_digits >= 1 and 0 < validation_percent < 100; got {max_digits}, {validation_percent}"
        )
    if split == "test":
        in_train = {e.text for e in _binary("train", 10**6)}
        return tuple(e for e in _binary("test", max_digits) if e.text not in in_train)
    want_val = split == "validation"
    return tuple(e for e in _binary("train", max_digits) if _in_validation(e.text, validation_percent) == want_val)


# ---- whole problems (the a100-hub profile of the OPSD chapter) ------------------------------------------------

PROBLEM_SPLITS = ("train", "validation", "test")


def final_answer(answer: str) -> str:
    """The verified final answer of a GSM8K worked answer: the text after ``####``, commas removed."""
    if "####" not in answer:
        raise ValueError(f"a GSM8K answer ends with '#### <number>'; got {answer[-40:]!r}")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def solution(answer: str) -> str:
    """The worked solution without calculator annotations and without the ``#### n`` line (``<<9*2=18>>18`` -> ``18``)."""
    return _ANNOTATION.sub("", answer.rsplit("####", 1)[0]).strip()


@functools.lru_cache(maxsize=None)
def problem_split(split: str, *, validation_percent: int = 10) -> tuple[dict, ...]:
    """GSM8K problems for one of ``train``/``validation``/``test``: ``train`` and ``validation`` partition the
    train file by a hash of the question (stable under reordering); ``test`` is the test file."""
    if split not in PROBLEM_SPLITS:
        raise ValueError(f"unknown GSM8K problem split {split!r}; use one of {PROBLEM_SPLITS}")
    if not 0 < validation_percent < 100:
        raise ValueError(f"need 0 < validation_percent < 100, got {validation_percent}")
    if split == "test":
        return problems("test")
    want_val = split == "validation"
    return tuple(p for p in problems("train") if _in_validation(p["question"], validation_percent) == want_val)
