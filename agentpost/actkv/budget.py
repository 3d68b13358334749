"""Algorithm 2: confidence-trend budget (actkv.md, "Algorithm 2"; DeepConf arXiv 2508.15260).

The sign convention lives in the types. :class:`TokenConfidence` values are "higher = more confident"; the
budget rule (:class:`ConfidenceBudget`) accepts nothing else. There are exactly two ways to obtain one:

- :func:`deepconf_confidence` from top-k log-probabilities, :math:`T_i=-\\frac1k\\sum_j\\log P_i(j)`
  (``confidence_form="deepconf_topk"``, the default): large when the distribution is peaked;
- :meth:`Surprisal.to_confidence` from sampled-token surprisal :math:`-\\log P(x_i)`, which negates once
  (``confidence_form="neg_surprisal"``).

A :class:`Surprisal` or a bare array passed to the rule raises ``TypeError``; a :class:`DeepConfConfidence` has
no negation method, so it cannot be flipped a second time (the paper's sign of the surprisal is ambiguous).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch

CONFIDENCE_FORMS = ("deepconf_topk", "neg_surprisal")


def round_half_up(x: Fraction | float) -> int:
    """Nearest integer with halves rounded up, exactly (Python's ``round`` sends halves to the even neighbour:
    ``round(104.5) == 104``). Every budget and window size of the chapter is rounded with it."""
    return math.floor(Fraction(x) + Fraction(1, 2))


@dataclass(frozen=True)
class TokenConfidence:
    """Per-token confidence, higher = more confident. Build it with :func:`deepconf_confidence` or
    :meth:`Surprisal.to_confidence`, never from an unlabelled array."""

    values: np.ndarray
    form: str

    def __post_init__(self) -> None:
        if type(self) is TokenConfidence:
            raise TypeError("use DeepConfConfidence or NegSurprisalConfidence (the form must be explicit)")
        v = np.asarray(self.values, dtype=np.float64).ravel()
        if not np.isfinite(v).all():
            raise ValueError("confidence values must be finite")
        object.__setattr__(self, "values", v)

    def __len__(self) -> int:
        return self.values.size

    def concat(self, other: "TokenConfidence") -> "TokenConfidence":
        if type(other) is not type(self):
            raise TypeError(f"cannot append {type(other).__name__} to {type(self).__name__}")
        return type(self)(np.concatenate([self.values, other.values]))


@dataclass(frozen=True)
class DeepConfConfidence(TokenConfidence):
    """DeepConf token confidence :math:`T_i=-\\frac1k\\sum_{j\\le k}\\log P_i(j)` (already "high = confident")."""

    form: str = "deepconf_topk"


@dataclass(frozen=True)
class NegSurprisalConfidence(TokenConfidence):
    """Negated sampled-token surprisal :math:`\\log P(x_i)` (the alternative reading of the paper's sign)."""

    form: str = "neg_surprisal"


@dataclass(frozen=True)
class Surprisal:
    """Sampled-token surprisal :math:`-\\log P(x_i)` (higher = LESS confident). Not accepted by the budget rule."""

    values: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", np.asarray(self.values, dtype=np.float64).ravel())

    def to_confidence(self) -> NegSurprisalConfidence:
        return NegSurprisalConfidence(-self.values)


def deepconf_confidence(topk_logprobs: torch.Tensor | np.ndarray) -> DeepConfConfidence:
    """:math:`T_i` from the top-k log-probabilities, shape ``(L, k)`` (k = 20 in the paper)."""
    lp = torch.as_tensor(topk_logprobs, dtype=torch.float64)
    if lp.dim() != 2:
        raise ValueError(f"top-k log-probs must have shape (tokens, k), got {tuple(lp.shape)}")
    if (lp > 1e-9).any():
        raise ValueError("log-probabilities must be <= 0 (got positive values: logits instead of log-probs?)")
    return DeepConfConfidence((-lp.mean(dim=1)).numpy())


def confidence_from_logits(
    logits: torch.Tensor, targets: torch.Tensor | None = None, *, k: int = 20, form: str = "deepconf_topk"
) -> TokenConfidence:
    """Confidence of each position's next-token distribution ``logits`` ``(L, V)`` in the chosen ``form``.

    ``neg_surprisal`` needs ``targets`` (the tokens actually emitted)."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    if form == "deepconf_topk":
        return deepconf_confidence(logp.topk(min(k, logp.shape[-1]), dim=-1).values)
    if form == "neg_surprisal":
        if targets is None:
            raise ValueError("confidence_form='neg_surprisal' needs the emitted target tokens")
        return Surprisal((-logp.gather(-1, targets.view(-1, 1)).squeeze(-1)).numpy()).to_confidence()
    raise ValueError(f"confidence_form must be one of {CONFIDENCE_FORMS}, got {form!r}")


def min_pool(values: np.ndarray, window: int = 64, stride: int = 8) -> np.ndarray:
    """Sliding-window minimum :math:`R'_m=\\min_{ms\\le i<ms+w}T_i`, ``m = 0..floor((L-w)/s)``; empty if L < w."""
    if window < 1 or stride < 1:
        raise ValueError(f"window and stride must be >= 1, got {window}, {stride}")
    v = np.asarray(values, dtype=np.float64)
    if v.size < window:
        return np.zeros(0)
    n = (v.size - window) // stride + 1
    return np.array([v[m * stride : m * stride + window].min() for m in range(n)])


def bottom_trend_slope(pooled: np.ndarray, bottom: float = 0.1) -> float:
    """Least-squares slope of :math:`R'_m` on ``m`` over the windows at or below the ``100*bottom`` percentile
    (linear interpolation, inclusive); 0 when fewer than two windows are kept."""
    if not 0.0 < bottom <= 1.0:
        raise ValueError(f"bottom fraction must be in (0, 1], got {bottom}")
    r = np.asarray(pooled, dtype=np.float64)
    if r.size < 2:
        return 0.0
    kept = np.flatnonzero(r <= np.percentile(r, 100 * bottom, method="linear"))
    if kept.size < 2:
        return 0.0
    m = kept.astype(np.float64)
    y = r[kept]
    mc = m - m.mean()
    return float((mc * (y - y.mean())).sum() / (mc * mc).sum())


@dataclass
class ConfidenceBudget:
    """Budget state of Algorithm 2: ``B <- min(floor(growth*B), cap)`` when the bottom-trend slope is negative.

    ``trend_window``: ``None`` uses the whole trace so far; an int uses the last that many tokens (the paper does not
    give the window). ``allow_shrink`` (not in the paper): divide by ``growth`` after 3 consecutive positive slopes,
    floor ``shrink_floor``.
    """

    budget: int = 512
    window: int = 64
    stride: int = 8
    bottom: float = 0.1
    growth: float = 1.75
    cap: int = 30000
    trend_window: int | None = None
    allow_shrink: bool = False
    shrink_floor: int = 256

    def __post_init__(self) -> None:
        if self.budget < 0 or self.cap < self.budget:
            raise ValueError(f"need 0 <= budget <= cap, got budget={self.budget}, cap={self.cap}")
        if self.growth < 1.0:
            raise ValueError(f"growth must be >= 1, got {self.growth}")
        self._positive_run = 0
        self.history: list[tuple[float, int]] = []  # (slope, budget after the update) per compression

    def slope(self, confidence: TokenConfidence) -> float:
        if not isinstance(confidence, TokenConfidence):
            raise TypeError(
                f"the budget rule needs a TokenConfidence (higher = more confident), got {type(confidence).__name__}; "
                "convert surprisal with Surprisal(...).to_confidence()"
            )
        v = confidence.values if self.trend_window is None else confidence.values[-self.trend_window :]
        return bottom_trend_slope(min_pool(v, self.window, self.stride), self.bottom)

    def update(self, confidence: TokenConfidence) -> int:
        """Apply the rule right before a compression; returns the new budget."""
        a = self.slope(confidence)
        if a < 0:
            self.budget = min(math.floor(self.growth * self.budget), self.cap)
            self._positive_run = 0
        elif a > 0 and self.allow_shrink:
            self._positive_run += 1
            if self._positive_run >= 3:
                self.budget = max(math.floor(self.budget / self.growth), self.shrink_floor)
                self._positive_run = 0
        self.history.append((a, self.budget))
        return self.budget
