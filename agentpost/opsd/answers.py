"""The one answer check of the chapter: the task's accuracy and SRCL's correctness gates both call
:func:`answers_match`.

Recursive OPSD (App. M) compares answers with HuggingFace's ``math_verify`` (PyPI ``math-verify``) and falls back to
a string normaliser; this module does the same: both answers are first normalised (whitespace removed, lower case,
``\\$`` and ``$`` dropped, a ratio ``a:b`` read as ``a/b``), equal normalised strings match, otherwise
``math_verify.verify(parse(reference), parse(answer))`` decides (so ``1,000`` = ``1000``, ``18.0`` = ``18``,
``\\frac{1}{2}`` = ``0.5``, ``2/4`` = ``1/2``). Non-mathematical answers that ``math_verify`` cannot parse match only
when their normalised strings are equal.
"""

from __future__ import annotations

import functools
import re


def normalise_answer(ans: str) -> str:
    """Whitespace removed, lower case, ``\\$``/``$`` dropped, ratio ``a:b`` -> ``a/b``, a trailing ``.`` dropped."""
    s = "".join(str(ans).split()).lower().replace("\\$", "").replace("$", "").rstrip(".")
    return re.sub(r"^(-?[\d.,]+):(-?[\d.,]+)$", r"\1/\2", s)


@functools.lru_cache(maxsize=65536)
def _parsed(s: str):
    from math_verify import parse

    return parse(s)


def answers_match(answer: str, reference: str) -> bool:
    """Whether ``answer`` equals ``reference`` mathematically (see the module docstring)."""
    a, r = normalise_answer(answer), normalise_answer(reference)
    if not a or not r:
        return False
    if a == r:
        return True
    from math_verify import verify

    pa, pr = _parsed(a), _parsed(r)
    return bool(pa and pr and verify(pr, pa))
