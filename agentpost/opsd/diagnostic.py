"""The chapter's diagnostic on GSM8K-derived arithmetic: train every arm once at the run's seed from the same
pretrained checkpoint with the same updates, token cap and data order, and score held-out items per item.

An arm is a teacher-sync policy (``frozen``, ``live`` = DCE, ``ema`` with decay d, ``periodic`` with period m), a
teacher layout and SRCL on or off; :func:`arm_grid` builds the grid, :func:`run_arms` trains and evaluates it.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from agentpost.opsd.probe import fixed_incorrect
from agentpost.opsd.tasks import ARITHMETIC
from agentpost.opsd.train import ArmConfig, evaluate, train_arm


def arm_grid(base: ArmConfig, ema_decays=(0.3, 0.7), srcl_arms=("frozen", "dce")) -> dict[str, ArmConfig]:
    """``{key: ArmConfig}``, every arm at ``base``'s settings but its own:

    * ``opsd``: OPSD as published - frozen teacher, reference in the user turn (``teacher_layout="user"``);
    * ``frozen``, ``dce`` (live), ``ema_<d>`` for each decay, ``periodic``: the sync policies at ``base``'s layout;
    * ``dce_user``: DCE with the user-side layout (the layout contrast of claim C4);
    * ``<arm>_srcl`` for each arm of ``srcl_arms``: that arm with SRCL.

    Keys are snake_case (``ema_0p3``), for metric and arm names."""
    arms = {
        "opsd": replace(base, teacher_mode="frozen", teacher_layout="user", srcl=False),
        "frozen": replace(base, teacher_mode="frozen", srcl=False),
        "dce": replace(base, teacher_mode="live", srcl=False),
    }
    for d in ema_decays:
        arms[f"ema_{str(d).replace('.', 'p')}"] = replace(base, teacher_mode="ema", ema_decay=d, srcl=False)
    arms["periodic"] = replace(base, teacher_mode="periodic", srcl=False)
    arms["dce_user"] = replace(base, teacher_mode="live", teacher_layout="user", srcl=False)
    for a in srcl_arms:
        if a not in arms:
            raise ValueError(f"srcl_arms names {a!r}, which is not one of the arms {sorted(arms)}")
        arms[f"{a}_srcl"] = replace(arms[a], srcl=True)
    return arms


def run_arms(
    model0,
    tok,
    train_items,
    eval_sets: dict,
    arms: dict[str, ArmConfig],
    seed: int,
    *,
    task=ARITHMETIC,
    probe_pool=(),
    n_probe: int = 0,
    probe_every: int = 0,
    progress: bool = True,
) -> dict:
    """``{arm: {"eval": {split: per-item dict}, "log": training log, "wall_s": s}}``: every arm trained once at
    ``seed`` (one run = one seed) and scored on the same items of every split of ``eval_sets``; the probe's fixed
    incorrect trajectories are built from the first ``n_probe`` items of ``probe_pool``."""
    from tqdm.auto import tqdm

    probe_items = fixed_incorrect(probe_pool, n_probe, task=task) if n_probe else ()
    out: dict = {}
    for a in tqdm(arms, desc=f"arms at seed {seed}", disable=not progress):
        cfg = arms[a]
        t0 = time.perf_counter()
        student, log = train_arm(
            model0,
            tok,
            train_items,
            cfg,
            seed,
            task=task,
            probe_items=probe_items,
            probe_every=probe_every,
            progress=False,
        )
        ev = {name: evaluate(student, tok, items, cfg.max_new_tokens, task) for name, items in eval_sets.items()}
        del student
        out[a] = {"eval": ev, "log": log, "wall_s": time.perf_counter() - t0}
    return out


def per_arm_table(results: dict, split: str) -> list[dict]:
    """Rows (arm, accuracy, mean length, mean NLL of the reference response, updates made, SRCL rewrites accepted
    and their share of the rewrites tried) on ``split`` at this seed."""
    rows = []
    for a, r in results.items():
        log, ev = r["log"], r["eval"][split]
        tried = log["updates"] * log["config"]["batch"] if log["config"]["srcl"] else 0
        rows.append(
            {
                "arm": a,
                "accuracy": float(np.mean(ev["correct"])),
                "mean_tokens": float(np.mean(ev["length"])),
                "mean_nll": float(np.mean(ev["nll"])),
                "updates": log["updates"],
                "srcl_accepted": int(sum(log["accepted"])),
                "srcl_acceptance": sum(log["accepted"]) / tried if tried else float("nan"),
            }
        )
    return rows
