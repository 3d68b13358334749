"""The chapter's diagnostic on GSM8K-derived arithmetic: train every arm for every seed from the same pretrained
checkpoint with the same updates, token cap and per-seed data order, and score held-out items per item.

An arm is a teacher-sync policy (``frozen``, ``live`` = DCE, ``ema`` with decay d, ``periodic`` with period m)
with or without SRCL; :func:`arm_grid` builds the grid, :func:`run_arms` trains and evaluates it.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from agentpost.opsd.probe import fixed_incorrect
from agentpost.opsd.tasks import ARITHMETIC
from agentpost.opsd.train import ArmConfig, evaluate, train_arm

TEACHER_ARMS = {"frozen": dict(teacher_mode="frozen"), "live": dict(teacher_mode="live"),
                "ema": dict(teacher_mode="ema"), "periodic": dict(teacher_mode="periodic")}


def arm_grid(base: ArmConfig, ema_decays=(0.3, 0.7), srcl=(False, True)) -> dict[str, ArmConfig]:
    """``{key: ArmConfig}`` for frozen, DCE (live), EMA(d) for each decay and periodic(m), each with and without
    SRCL; keys like ``dce``, ``ema_0p3_srcl`` (snake_case, for metric names)."""
    arms = {}
    for s in srcl:
        suffix = "_srcl" if s else ""
        arms["frozen" + suffix] = replace(base, teacher_mode="frozen", srcl=s)
        arms["dce" + suffix] = replace(base, teacher_mode="live", srcl=s)
        for d in ema_decays:
            arms[f"ema_{str(d).replace('.', 'p')}{suffix}"] = replace(base, teacher_mode="ema", ema_decay=d, srcl=s)
        arms["periodic" + suffix] = replace(base, teacher_mode="periodic", srcl=s)
    return arms


def run_arms(model0, tok, train_items, eval_sets: dict, arms: dict[str, ArmConfig], seeds, *, task=ARITHMETIC,
             probe_pool=(), n_probe: int = 0, probe_every: int = 0, progress: bool = True) -> dict:
    """``{arm: {seed: {"eval": {split: per-item dict}, "log": training log, "wall_s": s}}}``.

    ``eval_sets`` maps a split name to its items; every arm and seed is scored on the same items; the probe's
    fixed incorrect trajectories are built from the first ``n_probe`` items of ``probe_pool``."""
    from tqdm.auto import tqdm

    probe_items = fixed_incorrect(probe_pool, n_probe, task=task) if n_probe else ()
    out: dict = {a: {} for a in arms}
    jobs = [(a, s) for s in seeds for a in arms]
    for a, s in tqdm(jobs, desc="arms x seeds", disable=not progress):
        cfg = arms[a]
        t0 = time.perf_counter()
        student, log = train_arm(model0, tok, train_items, cfg, s, task=task, probe_items=probe_items,
                                 probe_every=probe_every, progress=False)
        ev = {name: evaluate(student, tok, items, cfg.max_new_tokens, task) for name, items in eval_sets.items()}
        del student
        out[a][s] = {"eval": ev, "log": log, "wall_s": time.perf_counter() - t0}
    return out


def per_arm_table(results: dict, split: str) -> list[dict]:
    """Rows (arm, seed-mean accuracy, seed-mean length, seed SD of accuracy, SRCL acceptance) on ``split``."""
    rows = []
    for a, by_seed in results.items():
        acc = [np.mean(r["eval"][split]["correct"]) for r in by_seed.values()]
        length = [np.mean(r["eval"][split]["length"]) for r in by_seed.values()]
        accepted = [sum(r["log"]["accepted"]) for r in by_seed.values()]
        rows.append({"arm": a, "accuracy": float(np.mean(acc)), "accuracy_seed_sd": float(np.std(acc, ddof=1))
                     if len(acc) > 1 else float("nan"), "mean_tokens": float(np.mean(length)),
                     "srcl_accepted_per_run": float(np.mean(accepted))})
    return rows
