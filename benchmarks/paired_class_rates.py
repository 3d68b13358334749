"""The paired protocol's error rates by simulation: the table behind the numbers in book/evidence-levels.md.

Per design of :mod:`agentpost.stats.calibration` (issue 9's designs, issue 46's unequal-items and skewed ones, and
the strongly skewed ``SKEWED_BEYOND`` outside the stated rates): the false-positive rate and CI coverage
(:func:`~agentpost.stats.calibration.calibrate`) and each verdict class's error rate at a true 0 and +-delta, delta
= 1.5 and 4 true standard errors (:func:`~agentpost.stats.calibration.class_rates`); then the 0/1 floor designs
(:func:`~agentpost.stats.calibration.bounded_power`) and the planner from 3-seed pilots
(:func:`~agentpost.stats.calibration.planner_power`). Fixed seeds; a few minutes on two cores.

    .venv/bin/python benchmarks/paired_class_rates.py [--sets 4000] [--pilots 100]
"""

from __future__ import annotations

import argparse


def main() -> None:
    import pandas as pd

    from agentpost.stats import calibration as cal

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=4000, help="data sets per design and cell")
    parser.add_argument("--pilots", type=int, default=100, help="3-seed pilots per planner design")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    designs = cal.DESIGNS + cal.SKEWED_BEYOND
    cover = cal.calibrate(designs, n_sets=args.sets, seed=2024).set_index("design")
    classes = cal.class_rates(designs, n_sets=args.sets, seed=2027)
    null, edge = classes[classes.truth == "0"], classes[classes.truth != "0"]
    table = pd.DataFrame(
        {
            "coverage": cover.coverage,
            "fpr": cover.fpr,
            "P(matters|0)": null.groupby("design").matters.max(),
            "P(detectable|0)": null.groupby("design").detectable.max(),
            "P(matters|+-delta)": edge.groupby("design").matters.max(),
            "P(equivalent|+-delta)": edge.groupby("design").equivalent.max(),
        }
    ).loc[[d.name for d in designs]]
    print(f"Verdict classes ({args.sets} data sets per design and truth; class rates: the largest over delta = 1.5")
    print("and 4 true SEs and over the sign; nominal: fpr 0.05, P(matters|+-delta) 0.025, P(equivalent|+-delta) 0.05)")
    print(table.round(4).to_string())
    inside = table.drop(index=[d.name for d in cal.SKEWED_BEYOND] + [d.name for d in cal.DESIGNS if d.skew])
    print("\nlargest over the designs held to the stated rates (not skewed):")
    print(inside.max().round(4).to_string(), "\nsmallest coverage", round(inside.coverage.min(), 4))
    print("\n0/1 outcomes near a floor or ceiling (3 seeds x 200 items; detection at the median reported MDE):")
    print(cal.bounded_power(n_sets=args.sets, n_mde=300, seed=11, references=False).round(4).to_string())
    print(f"\nPlanner: power of the first-listed design from {args.pilots} 3-seed pilots per design:")
    print(cal.planner_power(n_pilots=args.pilots, n_sets=300, seed=0).round(4).to_string())


if __name__ == "__main__":
    main()
