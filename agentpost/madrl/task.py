"""The diagnostic task: GSM8K first-step calculations (real public text; not the paper's benchmark).

Prompt: the last ``prompt_chars`` characters of a GSM8K question followed by a newline. Completion: the calculator
annotation of the solution's first step, e.g. ``<<48/2=24>>`` (GSM8K's own annotation format). The deterministic
classifier is the operation of the first annotation in the completion, one of five categories:
``+``, ``-``, ``*``, ``/`` (one distinct operator) or ``mixed`` (two or more distinct operators); a completion
with no well-formed annotation, or one without an operator, is invalid (category -1). Task accuracy is whether
that annotation is arithmetically right (its expression evaluates to its stated result, to the result's printed
precision). This is neither GSM8K answer accuracy nor the paper's reasoning/programming benchmark.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from dataclasses import dataclass

import numpy as np

from agentpost.data import data_file

CATEGORIES = ("+", "-", "*", "/", "mixed")
ANNOTATION = re.compile(r"<<([^<>=]*)=([^<>]*)>>")
_UNARY_MINUS = re.compile(r"(^|[(+\-*/])\s*-")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


@dataclass(frozen=True)
class Problem:
    """One GSM8K item: its question and the first calculator annotation of its reference solution."""

    question: str
    first_annotation: str
    category: int


def first_annotation(text: str) -> tuple[str, str] | None:
    """(expression, stated result) of the first ``<<expr=result>>`` in ``text``, or None."""
    m = ANNOTATION.search(text)
    return (m.group(1), m.group(2)) if m else None


def operation_category(expression: str) -> int:
    """Index into :data:`CATEGORIES` of an annotation expression's operation; -1 if it has no operator.
    A unary minus (at the start, after ``(`` or after another operator) is not an operation."""
    stripped = _UNARY_MINUS.sub(lambda m: m.group(1), expression.strip())
    ops = {ch for ch in stripped if ch in "+-*/"}
    if not ops:
        return -1
    return CATEGORIES.index(ops.pop()) if len(ops) == 1 else CATEGORIES.index("mixed")


def _evaluate(node):
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _evaluate(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError("not plain arithmetic")


def annotation_correct(expression: str, result: str) -> bool:
    """True when ``expression`` (numbers, + - * /, parentheses) evaluates to ``result`` within half a unit of the
    result's last printed decimal (GSM8K prints rounded results, e.g. ``12/60=0.2``); False for anything else."""
    try:
        value = _evaluate(ast.parse(expression.replace(",", "").strip(), mode="eval"))
        stated = float(result.replace(",", "").strip())
    except (ValueError, SyntaxError, ZeroDivisionError, OverflowError, RecursionError):
        return False
    decimals = len(result.strip().split(".")[1]) if "." in result else 0
    return abs(value - stated) <= 0.5 * 10.0 ** (-decimals) + 1e-9 * max(1.0, abs(stated))


def classify(completion: str) -> tuple[int, bool]:
    """(category, correct) of a completion: the first annotation's operation and its arithmetic correctness;
    (-1, False) without a well-formed annotation."""
    ann = first_annotation(completion)
    if ann is None:
        return -1, False
    cat = operation_category(ann[0])
    return cat, cat >= 0 and annotation_correct(*ann)


def load_problems(split: str) -> list[Problem]:
    """GSM8K ``train`` or ``test`` items whose reference solution has a categorised first annotation."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    out = []
    with open(data_file("gsm8k", f"{split}.jsonl"), encoding="utf-8") as f:
        for line in f:
            item = json.loads(line)
            m = ANNOTATION.search(item["answer"])
            if m and (cat := operation_category(m.group(1))) >= 0:
                out.append(Problem(item["question"], m.group(0), cat))
    return out


#: GSM8K train items held out of RL training (and of the annotation LM's pretraining) to select hyper-parameters.
N_VALIDATION = 500


def split_validation(
    problems: list[Problem], n_validation: int = N_VALIDATION, seed: int = 0
) -> tuple[list[Problem], list[Problem]]:
    """(RL-training, validation) items: a fixed random ``n_validation`` of ``problems`` (GSM8K train) is the
    validation split used to select hyper-parameters; the held-out test prompts come from GSM8K test only."""
    if not 0 < n_validation < len(problems):
        raise ValueError(f"n_validation must lie in 1..{len(problems) - 1}, got {n_validation}")
    order = np.random.default_rng(seed).permutation(len(problems))
    held = set(order[:n_validation].tolist())
    return ([p for i, p in enumerate(problems) if i not in held], [problems[i] for i in sorted(held)])


def prompt_text(question: str, prompt_chars: int) -> str:
    """The question's last ``prompt_chars`` characters (whitespace collapsed) and a newline."""
    q = " ".join(question.split())
    return q[-prompt_chars:] + "\n"
