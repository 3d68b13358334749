"""The headroom pilot that chose the diagnostic's MiniHack task (a task where GRPO is off the floor and no arm is at
the ceiling, so a comparison between arms can show a difference).

For one configuration (environment id, step limit, updates, token alphabet), every arm of ``arms`` is trained at
every learning rate of ``lrs`` from each seed of ``seeds`` (:func:`agentpost.graft.train.train_arm`), and each
(arm, rate) row reports the training and evaluation success per seed. The rate is not selected here: the pilot only
asks whether *some* rate puts each arm between floor and ceiling. Run it from the command line::

    python -m agentpost.graft.pilot MiniHack-Room-15x15-v0 --max-steps 200 --updates 3 --seeds 42 43 44 45

It prints one JSON line per (arm, rate).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np

from agentpost.graft.credit import CreditConfig
from agentpost.graft.envs import make_env
from agentpost.graft.train import TrainConfig, train_arm


def headroom_rows(
    env_id: str,
    *,
    max_steps: int,
    updates: int,
    arms,
    lrs,
    seeds,
    token_base: int = 2,
    group_size: int = 8,
    eval_episodes: int = 32,
):
    """Yield one dict per (arm, learning rate): its training and evaluation success at each seed, and seconds per
    run."""
    env = make_env(env_id, max_steps=max_steps)
    base = TrainConfig(
        updates=updates,
        group_size=group_size,
        eval_episodes=eval_episodes,
        token_base=token_base,
        credit=CreditConfig(),
    )
    for arm in arms:
        for lr in lrs:
            t0, train, evals = time.perf_counter(), [], []
            for seed in seeds:
                run = train_arm(env, replace(base, method=arm, lr=float(lr)), seed)
                train.append(round(float(np.mean(list(run["train_success"].values()))), 3))
                evals.append(round(float(run["eval_success"].mean()), 3))
            yield {
                "env": env_id,
                "max_steps": max_steps,
                "updates": updates,
                "token_base": token_base,
                "arm": arm,
                "lr": float(lr),
                "train_success": train,
                "eval_success": evals,
                "s_per_run": round((time.perf_counter() - t0) / len(seeds), 1),
            }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("env_id")
    ap.add_argument("--max-steps", type=int, required=True)
    ap.add_argument("--updates", type=int, required=True)
    ap.add_argument("--arms", nargs="+", default=["grpo", "gigpo", "graft_td"])
    ap.add_argument("--lrs", nargs="+", type=float, default=[512.0, 2048.0, 8192.0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44, 45])
    ap.add_argument("--token-base", type=int, default=2)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    for row in headroom_rows(
        args.env_id,
        max_steps=args.max_steps,
        updates=args.updates,
        arms=args.arms,
        lrs=args.lrs,
        seeds=args.seeds,
        token_base=args.token_base,
    ):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
