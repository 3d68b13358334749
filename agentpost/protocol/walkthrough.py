"""The paired protocol turned by hand: one simulated comparison, its verdict class, its CI against the margin band
and the planner's design, as the true effect, the margin, the seeds and the items move.

The data are synthetic and fixed: differences ``d[s, j] = effect + u_s + e_sj`` (items nested in seeds) with seed
effects ``u_s ~ N(0, SEED_SD^2)`` and item noise ``e_sj ~ N(0, NOISE_SD^2)`` drawn once from :data:`DATA_SEED` for
the largest design, so moving a control changes only what it names (the first ``seeds`` x ``items`` draws are used).
:func:`walk` runs :func:`agentpost.stats.compare` and :func:`agentpost.stats.plan` on them -- the functions every
chapter's verdicts come from -- and :func:`render` is what the chapter's "Turn it by hand" section shows through
:func:`agentpost.book.walkthrough.turn_by_hand`.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from agentpost.book.walkthrough import fixed_figure
from agentpost.stats import ArmMeta, compare, plan

#: Standard deviations of the synthetic seed effect and item noise, and the seed of their one draw.
SEED_SD, NOISE_SD, DATA_SEED = 0.1, 1.0, 46
#: Largest design the controls reach.
MAX_SEEDS, MAX_ITEMS = 20, 400
#: Most seeds the planner considers.
PLAN_SEEDS = 60
_META = ArmMeta(checkpoint="synthetic", data_version="synthetic", updates=0)


@functools.lru_cache(maxsize=1)
def _draws() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(DATA_SEED)
    return rng.standard_normal((MAX_SEEDS, 1)), rng.standard_normal((MAX_SEEDS, MAX_ITEMS))


def differences(effect: float, seeds: int, items: int) -> np.ndarray:
    """The ``seeds`` x ``items`` synthetic differences at true ``effect`` (see the module docstring)."""
    if not (3 <= seeds <= MAX_SEEDS and 1 <= items <= MAX_ITEMS):
        raise ValueError(f"seeds must be in [3, {MAX_SEEDS}] and items in [1, {MAX_ITEMS}], got {seeds} x {items}")
    u, e = _draws()
    return effect + SEED_SD * u[:seeds] + NOISE_SD * e[:seeds, :items]


def walk(effect: float, margin: float, seeds: int, items: int):
    """``(PairedResult, Plan)``: ``compare`` of the synthetic arms (``b - a`` = :func:`differences`, higher is
    better) at smallest effect of interest ``margin``, and the plan from its variance components and design."""
    d = differences(effect, seeds, items)
    result = compare(
        {s: np.zeros(items) for s in range(seeds)},
        dict(enumerate(d)),
        meta_a=_META,
        meta_b=_META,
        higher_is_better=True,
        min_effect=margin,
        name_a="a",
        name_b="b",
        n_boot=200,
    )
    return result, plan(
        result.variance_components,
        design="independent",
        min_effect=margin,
        seeds=range(3, PLAN_SEEDS + 1),
        pilot=(seeds, items),
        max_items=MAX_ITEMS,
    )


def render(effect: float, margin: float, seeds: int, items: int) -> list:
    """The 95% and 90% CIs against the band (-margin, margin), and a table of the verdict and the planned design."""
    r, p = walk(effect, margin, seeds, items)
    fig = fixed_figure(5.6, 2.2, left=0.05, right=0.97, bottom=0.24, top=0.84)
    ax = fig.add_subplot()
    ax.axvspan(-margin, margin, color="0.88", label="± margin (equivalence band)")
    ax.axvline(0, color="k", lw=0.8)
    ax.axvline(effect, color="tab:green", ls=":", lw=1.5, label="true effect")
    ax.plot([r.ci_low, r.ci_high], [1, 1], color="tab:blue", lw=2.5, label="95% CI (matters / detectable)")
    ax.plot([r.ci90_low, r.ci90_high], [0, 0], color="tab:orange", lw=2.5, label="90% CI (equivalent)")
    ax.plot([r.estimate] * 2, [0, 1], "o", color="k", ms=4)
    span = max(abs(r.ci_low), abs(r.ci_high), 1.5 * margin, abs(effect)) * 1.15
    ax.set_xlim(-span, span)
    ax.set_ylim(-0.8, 1.8)
    ax.set_yticks([])
    ax.set_xlabel("difference b - a")
    ax.set_title(f"verdict: {r.verdict} [{r.verdict_class.replace('_', ' ')}]", fontsize=9)
    ax.legend(fontsize=6, loc="upper left", ncol=2)
    first = p.designs[0] if p.designs else None
    table = pd.DataFrame(
        {
            "quantity": [
                "estimate",
                "95% CI",
                "90% CI",
                "MDE (80% power)",
                "verdict class",
                "planned design (fewest seeds)",
            ],
            "value": [
                f"{r.estimate:+.3f}",
                f"[{r.ci_low:+.3f}, {r.ci_high:+.3f}]",
                f"[{r.ci90_low:+.3f}, {r.ci90_high:+.3f}]",
                f"{r.mde:.3f}",
                r.verdict_class.replace("_", " "),
                f"{first['seeds']} seeds x {first['items']} items (MDE {first['mde']:.3f})"
                if first
                else f"none up to {PLAN_SEEDS} seeds x {MAX_ITEMS} items",
            ],
        }
    )
    return [fig, table]
