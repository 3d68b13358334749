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
of the two-sided t test at ``alpha``), as ``compare`` reports it; for bounded outcomes (``bounded=``) it counts the
variance the effect itself adds, as ``compare`` does (:class:`~agentpost.stats.paired.Bounded`).

A pilot of three seeds estimates the seed variance as exactly 0 about half the time, and a planner that believes it
treats seeds as free (issue 46: the first-listed design then reached a mean power of 0.31-0.68 instead of 0.8). Given
the pilot's design (``pilot=(S, n)``), :func:`plan` therefore takes the seed variance at the one-sided
:data:`SEED_PLAN_UPPER_CONFIDENCE` upper bound of the pilot's seed mean square
(:func:`~agentpost.stats.paired.seed_component`), never the point estimate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping

import numpy as np
from scipy import stats as _st

from agentpost.stats.paired import (
    Bounded,
    ProtocolError,
    _real,
    crossed_variance_df,
    mde_multiplier,
    minimum_detectable_effect,
    seed_component,
)

#: Candidate items per seed when the caller gives none.
DEFAULT_ITEMS = (10, 20, 30, 50, 100, 200, 300, 500, 1000, 2000, 5000, 10000)

#: One-sided confidence level of the upper bound on the pilot's seed mean square (``S - 1`` df) that sets the seed
#: variance a plan assumes. Chosen by simulation (:func:`agentpost.stats.calibration.planner_power`, 100 3-seed pilots
#: of each of issue 46's four designs, power of the first-listed design at the margin from 300 data sets): mean power
#: 0.83 / 0.79 / 0.74 / 1.00 at 0.5 (crossed 3x30, nested 3x20, seed-dominated, 0/1 at 0.3), 0.91 / 0.92 / 0.80 /
#: 1.00 at 0.6, 0.97 / 0.99 / 0.83 / 1.00 at 0.7 and 1.00 / 1.00 / 0.88 / 1.00 at 0.8, where up to 75% of the
#: pilots found no design up to 40 seeds (at most 13% at 0.6): 0.6 is the lowest level with every mean >= 0.75.
SEED_PLAN_UPPER_CONFIDENCE = 0.6


@dataclass(frozen=True)
class Plan:
    """Outcome of :func:`plan`: the predicted MDE at the pilot's own design and the designs whose predicted MDE is
    at most ``min_effect`` (``designs``: the fewest seeds that reach it, then each larger seed count that needs fewer
    items; empty when none in range). ``components`` are the pilot's, ``assumed`` the ones the prediction used (the
    seed variance at its upper bound)."""

    design: str
    min_effect: float
    alpha: float
    power: float
    components: dict
    pilot: dict | None
    designs: list[dict] = field(default_factory=list)
    method: str = ""
    assumed: dict = field(default_factory=dict)
    max_items: int | None = None

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


def _variance_df(components: Mapping, seeds, items, design: str):
    """``(Var, df)`` of the estimate for ``seeds`` x ``items`` (numpy-broadcast; see the module docstring)."""
    s, n = np.asarray(seeds, dtype=np.float64), np.asarray(items, dtype=np.float64)
    seed = _component(components, "seed") or 0.0
    item = _component(components, "item") or 0.0
    resid = _component(components, "residual")
    if design == "crossed":
        r = resid or 0.0
        var_sn, df = crossed_variance_df(r + n * seed, r + s * item, r, s, n)
        one = n == 1  # one shared item: all of its variance is per seed, and the model is the seed-level one
        var = np.where(one, seed / s + (item + r) / (s * n), var_sn / (s * n))
        return var, np.where(one, s - 1.0, df)
    return seed / s + item / (s * n), s - 1.0 + 0.0 * n


def _check(design: str, alpha, power) -> tuple[float, float]:
    if design not in ("crossed", "independent"):
        raise ProtocolError(f"design must be 'crossed' or 'independent', got {design!r}")
    alpha, power = _real(alpha, "alpha"), _real(power, "power")
    if not (0 < alpha < 0.5 and 0 < power < 1):
        raise ProtocolError(f"alpha must be in (0, 0.5) and power in (0, 1), got {alpha!r}, {power!r}")
    return alpha, power


def _bounded(bounded: Mapping | None, components: Mapping, seeds: int, items: int) -> Bounded | None:
    return None if bounded is None else _bounded_at(bounded, components, seeds, items)


def _bounded_at(bounded: Mapping, components: Mapping, seeds: int, items: int) -> Bounded:
    """:class:`Bounded` of a planned design of ``seeds`` x ``items`` from the comparison's ``bounded`` facts."""
    return Bounded(
        observed=float(bounded.get("observed", 0.0)),
        width=float(bounded["width"]),
        n_cells=float(seeds * items),
        base=bounded.get("base"),
        seed_var=_component(components, "seed") or 0.0,
        n_seeds=int(seeds),
    )


def predict(
    components: Mapping,
    seeds: int,
    items: int,
    *,
    design: str,
    alpha: float = 0.05,
    power: float = 0.8,
    bounded: Mapping | None = None,
) -> dict:
    """``{"seeds", "items", "se", "df", "mde"}`` predicted for ``seeds`` x ``items`` (see the module docstring).

    A nested pilot has no ``residual`` (it is inside ``item``); planning a crossed design from it treats the whole
    item variance as shared across seeds (``s_item^2/n``, the conservative reading). ``bounded``: ``{"width",
    "observed", "base"}`` of bounded outcomes (as :class:`~agentpost.stats.paired.Bounded`), whose MDE then counts the
    effect's own variance.
    """
    alpha, power = _check(design, alpha, power)
    if int(seeds) < 2 or int(items) < 1:
        raise ProtocolError(f"a design needs at least 2 seeds and 1 item, got {seeds} x {items}")
    s, n = int(seeds), int(items)
    var, df = (float(x) for x in _variance_df(components, s, n, design))
    se = math.sqrt(var)
    mde = minimum_detectable_effect(se, df, alpha=alpha, target=power, bounded=_bounded(bounded, components, s, n))
    if not se > 0:
        mde = mde_multiplier(df, alpha=alpha, target=power) * se
    return {"seeds": s, "items": n, "se": se, "df": df, "mde": mde}


def assumed_components(components: Mapping, pilot: tuple[int, int], *, design: str, level: float) -> dict:
    """The pilot's components with the seed variance at the one-sided ``level`` upper bound of the pilot's seed mean
    square (``S - 1`` df): ``MS_seed = MS_within + n s_seed^2`` with ``MS_within`` the residual (crossed) or item
    (nested) variance. A seed estimate truncated at 0 is read as ``MS_seed = MS_within``, which overstates the bound
    (conservative)."""
    s, n = (int(x) for x in pilot)
    if s < 2 or n < 1:
        raise ProtocolError(f"a pilot needs at least 2 seeds and 1 item, got {s} x {n}")
    seed = _component(components, "seed") or 0.0
    within = _component(components, "residual" if design == "crossed" else "item") or 0.0
    upper = float(seed_component(within + n * seed, within, n, s, level=level))
    return {**{k: components.get(k) for k in ("seed", "item", "residual")}, "seed": max(seed, upper)}


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
    max_items: int | None = None,
    bounded: Mapping | None = None,
    seed_upper: float = SEED_PLAN_UPPER_CONFIDENCE,
) -> Plan:
    """The smallest seeds x items designs whose predicted MDE is at most ``min_effect``, from a pilot's
    ``variance_components`` (``{"seed", "item", "residual"}`` as ``compare`` reports them).

    ``pilot=(S, n)`` is the pilot's design: its seed variance is then taken at the ``seed_upper`` upper bound
    (:func:`assumed_components`) and its own design's prediction is added. ``max_items``: the items that exist per
    seed (the test split's size); candidates above it are dropped and it is a candidate itself. For each seed count the
    fewest candidate items that reach ``min_effect`` are found (vectorised over the grid); listed are the fewest seeds
    that reach it and then each larger seed count that needs fewer items.
    """
    if not isinstance(components, Mapping):
        raise ProtocolError("plan takes the pilot's variance_components dict {'seed', 'item', 'residual'}")
    min_effect = _real(min_effect, "min_effect")
    if not min_effect > 0:
        raise ProtocolError(f"min_effect must be a finite positive number, got {min_effect!r}")
    alpha, power = _check(design, alpha, power)
    if max_items is not None and (isinstance(max_items, bool) or int(max_items) != max_items or max_items < 1):
        raise ProtocolError(f"max_items must be a positive integer, got {max_items!r}")
    assumed = {k: components.get(k) for k in ("seed", "item", "residual")}
    if pilot is not None:
        assumed = assumed_components(components, pilot, design=design, level=_real(seed_upper, "seed_upper"))
    wanted_n = sorted({int(n) for n in items} | ({int(max_items)} if max_items else set()))
    grid_n = np.array([n for n in wanted_n if n >= 1 and (max_items is None or n <= max_items)])
    grid_s = np.array(sorted({int(x) for x in seeds if int(x) >= 2}))
    found = []
    if grid_n.size and grid_s.size:
        var, df = _variance_df(assumed, grid_s[:, None], grid_n[None, :], design)
        var, df = np.broadcast_to(var, (grid_s.size, grid_n.size)), np.broadcast_to(df, var.shape)
        if bounded is not None:
            extra = np.array(
                [[_bounded_at(bounded, assumed, s, n).extra(min_effect) for n in grid_n] for s in grid_s],
                dtype=np.float64,
            )
            var = var + extra
        q = _st.t.ppf(1 - alpha / 2, df)
        with np.errstate(divide="ignore", invalid="ignore"):
            nc = min_effect / np.sqrt(var)
            reach = (_st.nct.sf(q, df, nc) + _st.nct.sf(q, df, -nc) >= power) | (var == 0)
        fewest = None
        for i, s in enumerate(grid_s):
            hit = np.flatnonzero(reach[i])
            if hit.size and (fewest is None or hit[0] < fewest):
                fewest = hit[0]
                found.append(
                    predict(assumed, s, grid_n[fewest], design=design, alpha=alpha, power=power, bounded=bounded)
                )
                if fewest == 0:
                    break
    return Plan(
        design=design,
        min_effect=min_effect,
        alpha=alpha,
        power=power,
        components={k: components.get(k) for k in ("seed", "item", "residual")},
        pilot=None
        if pilot is None
        else predict(assumed, *pilot, design=design, alpha=alpha, power=power, bounded=bounded),
        designs=found,
        method=(
            "crossed: s_seed^2/S + s_item^2/n + s_resid^2/(S n), Satterthwaite df at the expected mean squares"
            if design == "crossed"
            else "independent: s_seed^2/S + s_item^2/(S n), df = S - 1"
        )
        + (f"; seed variance at the pilot's {seed_upper:.0%} upper bound" if pilot is not None else ""),
        assumed=assumed,
        max_items=None if max_items is None else int(max_items),
    )
