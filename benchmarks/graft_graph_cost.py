"""Cost of GRAFT's credit against the rollouts it is computed from (graft.md: "0.43% of training time").

For MiniHack-Room-5x5-v0 groups sampled with the uniform policy, prints the median time (over ``--repeats`` runs)
of sampling one group of N rollouts, of each credit method on it (graph construction, Bellman values, TD(0) /
Graph GAE, normalisation; GRPO and GiGPO-style for comparison), and the ratio credit / sampling. Sampling here is
NetHack stepping with a tabular policy, far cheaper than LLM generation, so the ratio is an upper bound on what the
same credit would cost next to an LLM.

    .venv/bin/python benchmarks/graft_graph_cost.py --sizes 4,8,16 --repeats 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from agentpost.graft import CreditConfig, step_credit
from agentpost.graft.envs import make_env
from agentpost.graft.train import TabularSoftmax, rollout
from _table import record


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="MiniHack-Room-5x5-v0")
    ap.add_argument("--max-steps", type=int, default=20)
    ap.add_argument("--sizes", default="4,8,16")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    env = make_env(args.env, max_steps=args.max_steps)
    policy = TabularSoftmax(env.n_actions)
    cfg = CreditConfig()
    methods = ("grpo", "gigpo", "graft_td", "graft_gae")
    print(f"{'N':>3} {'sample_ms':>10} " + " ".join(f"{m + '_ms':>12}" for m in methods) + f" {'graft_gae/sample':>17}")
    for n in (int(x) for x in args.sizes.split(",")):
        sample, cost = [], {m: [] for m in methods}
        for r in range(args.repeats):
            t0 = time.perf_counter()
            group = [rollout(env, policy, r, 0, np.random.default_rng([r, i]))[0] for i in range(n)]
            sample.append(time.perf_counter() - t0)
            for m in methods:
                t0 = time.perf_counter()
                step_credit(m, group, cfg)
                cost[m].append(time.perf_counter() - t0)
        s = record("graft_graph_cost", f"N={n} sample group", sample, "s")["median"]
        med = {m: record("graft_graph_cost", f"N={n} {m} credit", v, "s")["median"] for m, v in cost.items()}
        print(
            f"{n:3d} {1e3 * s:10.2f} "
            + " ".join(f"{1e3 * med[m]:12.3f}" for m in methods)
            + f" {med['graft_gae'] / s:17.4f}"
        )


if __name__ == "__main__":
    main()
