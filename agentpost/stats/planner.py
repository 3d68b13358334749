"""How many seeds x items a comparison needs: the MDE predicted from a pilot's variance components.

A pilot comparison (:func:`agentpost.stats.paired.compare`) reports ``variance_components`` of the paired
differences; the variance of the estimate for ``S`` seeds and ``n`` items is then predicted by the same model the
protocol fits (how many seeds: Colas, Sigaud & Oudeyer, "How Many Random Seeds? Statistical Power Analysis in Deep
Reinforcement Learning Experiments", arXiv:1806.08295, 2018; power of NLP comparisons from pilot variance: Card et
al., "With Little Power Comes Great Responsibility", EMNLP 2020):

* crossed (the same items in every seed): ``Var = s_seed^2/S + s_item^2/n + s_resid^2/(S n)``, with the df of
  :func:`~agentpost.stats.paired.crossed_variance_df` evaluated at the expected mean squares
  ``E[MS_seed] = s_resid^2 + n s_seed^2``, ``E[MS_item] = s_resid^2 + S s_item^2``, ``E[MS_resid] = s_resid^2``;
* independent (items nested in seeds): ``Var = s_seed^2/S + s_item^2/(S n)``, df ``S - 1``.

The predicted MDE is ``k(df) sqrt(Var)`` with ``k`` from :func:`~agentpost.stats.paired.mde_multiplier` (80% power
of the two-sided t test at ``alpha``), as ``compare`` reports it. For 0/1 outcomes the prediction does not add the
effect's own variance (``compare`` does), so it is optimistic near a floor or ceiling.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping

from agentpost.stats.paired import ProtocolError, _real, crossed_variance_df, mde_multiplier

#: Candidate items per seed when the caller gives none.
DEFAULT_ITEMS = (10, 20, 30, 50, 100, 200, 300, 500, 1000, 2000, 5000, 10000)


@dataclass(frozen=True)
class Plan:
    """Outcome of :func:`plan`: the predicted MDE at the pilot's own design and, per seed count, the fewest items
    whose predicted MDE is at most ``min_effect`` (``designs``, fewest seeds first; empty when none in range)."""

    design: str
    min_effect: float
    alpha: float
    power: float
    components: dict
    pilot: dict | None
    designs: list[dict] = field(default_factory=list)
    method: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _component(components: Mapping, key: str) -> float | None:
    value = components.get(key)
    if value is None:
        return None
    value = float(value)
    if not (math.isfinite(value) and value >= 0):
        raise ProtocolError(f"variance component {key!r} must be finite and >= 0, got {components.get(key)!r}")
    return value


def predict(
    components: Mapping, seeds: int, items: int, *, design: str, alpha: float = 0.05, power: float = 0.8
) -> dict:
    """``{"seeds", "items", "se", "df", "mde"}`` predicted for ``seeds`` x ``items`` (see the module docstring).

    A nested pilot has no ``residual`` (it is inside ``item``); planning a crossed design from it treats the whole
    item variance as shared across seeds (``s_item^2/n``, the conservative reading).
    """
    if design not in ("crossed", "independent"):
        raise ProtocolError(f"design must be 'crossed' or 'independent', got {design!r}")
    if int(seeds) < 2 or int(items) < 1:
        raise ProtocolError(f"a design needs at least 2 seeds and 1 item, got {seeds} x {items}")
    s, n = int(seeds), int(items)
    seed = _component(components, "seed") or 0.0
    item = _component(components, "item") or 0.0
    resid = _component(components, "residual")
    if design == "crossed" and n > 1:
        resid = resid or 0.0
        var_sn, df = crossed_variance_df(resid + n * seed, resid + s * item, resid, s, n)
        var, df = float(var_sn) / (s * n), float(df)
    else:
        within = item + (resid or 0.0) if design == "crossed" else item  # one shared item: all of it per seed
        var, df = seed / s + within / (s * n), float(s - 1)
    se = math.sqrt(var)
    return {"seeds": s, "items": n, "se": se, "df": df, "mde": mde_multiplier(df, alpha=alpha, target=power) * se}


def plan(
    components: Mapping,
    *,
    design: str,
    min_effect: float,
    alpha: float = 0.05,
    power: float = 0.8,
    seeds: Iterable[int] = range(3, 21),
    items: Iterable[int] = DEFAULT_ITEMS,
    pilot: tuple[int, int] | None = None,
) -> Plan:
    """The smallest seeds x items designs whose predicted MDE is at most ``min_effect``, from a pilot's
    ``variance_components`` (``{"seed", "item", "residual"}`` as ``compare`` reports them).

    For each seed count in ``seeds`` the fewest items in ``items`` that reach ``min_effect`` (none listed for a seed
    count that cannot, e.g. when the seed term alone exceeds it); ``pilot=(S, n)`` adds the prediction for the
    pilot's own design.
    """
    if not isinstance(components, Mapping):
        raise ProtocolError("plan takes the pilot's variance_components dict {'seed', 'item', 'residual'}")
    if not _real(min_effect, "min_effect") > 0:
        raise ProtocolError(f"min_effect must be a finite positive number, got {min_effect!r}")
    if not (0 < alpha < 0.5 and 0 < power < 1):
        raise ProtocolError(f"alpha must be in (0, 0.5) and power in (0, 1), got {alpha!r}, {power!r}")
    items = sorted({int(n) for n in items})
    found = []
    for s in sorted({int(x) for x in seeds}):
        for n in items:
            row = predict(components, s, n, design=design, alpha=alpha, power=power)
            if row["mde"] <= min_effect:
                found.append(row)
                break
    return Plan(
        design=design,
        min_effect=float(min_effect),
        alpha=float(alpha),
        power=float(power),
        components={k: components.get(k) for k in ("seed", "item", "residual")},
        pilot=None if pilot is None else predict(components, *pilot, design=design, alpha=alpha, power=power),
        designs=found,
        method=(
            "crossed: s_seed^2/S + s_item^2/n + s_resid^2/(S n), Satterthwaite df at the expected mean squares"
            if design == "crossed"
            else "independent: s_seed^2/S + s_item^2/(S n), df = S - 1"
        ),
    )
