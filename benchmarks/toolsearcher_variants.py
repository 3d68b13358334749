"""Credit variants of the ToolSearcher chapter on the VALIDATION split (selection data, never test).

Trains the compact policy with each (selection_gate, nondiscovery_credit) reading of the spec and outcome GRPO at
the smoke budget, one or more seeds, and prints validation selection F1, exact match, search recall and searches
per request (greedy decoding), plus the training wall time. Optionally writes a JSON receipt.

    .venv/bin/python benchmarks/toolsearcher_variants.py --seeds 42 --steps 25 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np
import torch
from _table import record

from agentpost.data.stabletoolbench import load_queries, split_by_group
from agentpost.toolsearcher.train import VARIANTS, TrainConfig, World, evaluate, train


def validation_rows(world: World, train_tasks, val_tasks, base: TrainConfig, seeds: list[int]) -> list[dict]:
    """One row per reading in :data:`VARIANTS`: validation means over ``seeds`` and the mean training wall time."""
    rows = []
    for arm, gate, nondisc in VARIANTS.values():
        per_seed = []
        for seed in seeds:
            res = train(world, train_tasks, replace(base, arm=arm, gate=gate, nondiscovery=nondisc), seed)
            val = evaluate(world, res["theta"], val_tasks)
            per_seed.append({**{k: float(v.mean()) for k, v in val.items()}, "wall_s": res["wall_s"]})
        rows.append(
            {
                "arm": arm,
                "gate": gate,
                "nondiscovery": nondisc,
                **{k: float(np.mean([r[k] for r in per_seed])) for k in per_seed[0]},
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    world = World()
    val = world.tasks(split_by_group(load_queries())["validation"])
    train_tasks = world.tasks(split_by_group(load_queries())["train"])
    rows = validation_rows(
        world, train_tasks, val, TrainConfig(steps=args.steps), [int(x) for x in args.seeds.split(",")]
    )
    print(
        f"{'arm':13} {'gate':11} {'nondisc':7} {'val_f1':>7} {'exact':>6} {'srecall':>7} {'searches':>8} {'wall_s':>6}"
    )
    for r in rows:
        print(
            f"{r['arm']:13} {r['gate']:11} {r['nondiscovery']:7} {r['f1']:7.3f} {r['exact']:6.3f} "
            f"{r['srecall']:7.3f} {r['searches']:8.2f} {r['wall_s']:6.1f}"
        )
        record(
            "toolsearcher_variants",
            f"{r['arm']} gate={r['gate']} nondiscovery={r['nondiscovery']} train wall (seed mean)",
            [r["wall_s"]],
            "s",
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "benchmark": "toolsearcher_variants",
                    "split": "validation",
                    "steps": args.steps,
                    "seeds": args.seeds,
                    "rows": rows,
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
