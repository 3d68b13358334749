"""The chapter's diagnostic: tasks x interfaces x controllers on real MiniHack, paired by seed and task instance.

Episode ``i`` of seed ``s`` on a task is the same task instance (NetHack seeded with ``env_seed(s, i)``) for every
interface and controller, so arms are compared episode by episode (:func:`paired`, the project's paired protocol
with the seed as the unit of replication; each seed has its own instances, hence ``shared_items=False``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from agentpost.codeskills.controllers import LMController, RandomController, ScriptedController
from agentpost.codeskills.env import make_env
from agentpost.codeskills.runtime import Budgets, action_space, run_episode
from agentpost.stats import ArmMeta, compare

TASKS = ("MiniHack-Room-5x5-v0", "MiniHack-Room-15x15-v0", "MiniHack-Corridor-R3-v0", "MiniHack-Corridor-R5-v0",
         "MiniHack-Quest-Easy-v0")

#: (controller, interface) arms. random_equal_mass differs from random_uniform only where both kinds of action
#: exist (mixed); the scripted heuristic picks skills whenever they exist, so its mixed run equals its skill-only
#: run by construction (a unit test checks it) and is not run twice.
ARMS = (("random_uniform", "primitive"), ("random_uniform", "skill"), ("random_uniform", "mixed"),
        ("random_equal_mass", "mixed"), ("scripted", "primitive"), ("scripted", "skill"))

METRICS = ("success", "decisions", "primitive_steps")


def env_seed(seed: int, episode: int) -> int:
    """NetHack core/disp seed of task instance ``episode`` in comparison seed ``seed`` (the same for every arm)."""
    return int(seed) * 10_000 + int(episode)


def controller(name: str):
    if name == "scripted":
        return ScriptedController()
    if name.startswith("random_"):
        return RandomController(name.removeprefix("random_"))
    raise ValueError(f"unknown controller {name!r}; use scripted, random_uniform or random_equal_mass")


def run_grid(tasks, episodes: dict, seeds, arms=ARMS, budgets: Budgets = Budgets(), *, lm=None,
             progress: bool = True) -> pd.DataFrame:
    """One row per episode. ``episodes[task]`` episodes per seed; ``lm=(name, controller)`` adds an LM arm per
    interface (the LM controller object is re-used; its history is reset per episode)."""
    missing = [t for t in tasks if t not in episodes]
    if missing:
        raise ValueError(f"episodes per seed missing for {missing}")
    jobs = [(t, c, i) for t in tasks for c, i in arms]
    if lm is not None:
        jobs += [(t, lm[0], i) for t in tasks for i in ("primitive", "skill", "mixed")]
    rows = []
    envs = {t: make_env(t) for t in tasks}
    bar = tqdm(total=sum(episodes[t] * len(seeds) for t, _, _ in jobs), desc="episodes", disable=not progress,
               mininterval=15)
    for task, ctrl_name, interface in jobs:
        ctrl = lm[1] if lm is not None and ctrl_name == lm[0] else controller(ctrl_name)
        space = action_space(interface)
        if isinstance(ctrl, LMController):
            ctrl.task = task.removeprefix("MiniHack-")
        for seed in seeds:
            for ep in range(episodes[task]):
                res = run_episode(envs[task], ctrl, space, budgets, env_seed=env_seed(seed, ep),
                                  rng=np.random.default_rng([int(seed), ep]), task=task, interface=interface)
                rows.append({**res.row(), "controller": ctrl_name, "seed": int(seed), "episode": ep})
                bar.update()
    bar.close()
    for env in envs.values():
        env.close()
    df = pd.DataFrame(rows)
    df["success"] = df["success"].astype(float)
    return df


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per task x controller x interface: success rate, decisions, primitive steps per episode and per success,
    LM calls and tokens per episode, episodes run."""
    g = df.groupby(["task", "controller", "interface"], sort=False)
    out = g.agg(episodes=("success", "size"), success_rate=("success", "mean"),
                decisions_per_episode=("decisions", "mean"), primitive_steps_per_episode=("primitive_steps", "mean"),
                zero_step_decisions=("zero_step_decisions", "mean"), lm_calls_per_episode=("lm_calls", "mean"),
                tokens_per_episode=("prompt_tokens", "mean"), output_tokens_per_episode=("output_tokens", "mean"),
                unparseable_per_episode=("unparseable", "mean")).reset_index()
    steps_ok = df[df.success > 0].groupby(["task", "controller", "interface"], sort=False)["primitive_steps"].mean()
    out["primitive_steps_per_success"] = [steps_ok.get((t, c, i), np.nan)
                                          for t, c, i in zip(out.task, out.controller, out.interface)]
    out["tokens_per_episode"] += out.pop("output_tokens_per_episode")
    out.insert(0, "task", out.pop("task").str.replace("MiniHack-", "").str.replace("-v0", ""))
    return out


@dataclass(frozen=True)
class Comparison:
    task: str
    arm_a: tuple[str, str]  # (controller, interface) of the baseline
    arm_b: tuple[str, str]
    metric: str


def arm_values(df: pd.DataFrame, task: str, arm: tuple[str, str], metric: str) -> dict:
    sel = df[(df.task == task) & (df.controller == arm[0]) & (df.interface == arm[1])].sort_values(["seed", "episode"])
    if sel.empty:
        raise ValueError(f"no episodes for {task} {arm}")
    return {int(s): g[metric].to_numpy(dtype=float) for s, g in sel.groupby("seed")}


def paired(df: pd.DataFrame, comp: Comparison, *, min_effect: float, data_version: str):
    """``compare`` arm b against arm a on one metric (success: higher is better; counts: lower is better)."""
    meta = dict(checkpoint="none: seeded non-learning controllers", data_version=f"{comp.task}; {data_version}",
                updates=0, max_new_tokens=None)
    return compare(arm_values(df, comp.task, comp.arm_a, comp.metric), arm_values(df, comp.task, comp.arm_b, comp.metric),
                   meta_a=ArmMeta(**meta), meta_b=ArmMeta(**meta), higher_is_better=comp.metric == "success",
                   min_effect=min_effect, shared_items=False, name_a="/".join(comp.arm_a), name_b="/".join(comp.arm_b))


def comparisons(tasks) -> list[Comparison]:
    """The chapter's comparisons: skills vs primitives (per controller), and the mixed interface's dilution."""
    out = []
    for t in tasks:
        for ctrl in ("random_uniform", "scripted"):
            out += [Comparison(t, (ctrl, "primitive"), (ctrl, "skill"), m) for m in METRICS]
        out += [Comparison(t, ("random_uniform", "skill"), ("random_uniform", "mixed"), m) for m in METRICS]
        out += [Comparison(t, ("random_uniform", "mixed"), ("random_equal_mass", "mixed"), m) for m in METRICS]
    return out


def short(task: str) -> str:
    """Metric-name form of a task id: MiniHack-Corridor-R3-v0 -> corridor_r3."""
    return task.removeprefix("MiniHack-").removesuffix("-v0").lower().replace("-", "_")


def lm_arm(model, tokenizer, *, max_new_tokens: int, max_history: int, name: str = "lm") -> tuple[str, LMController]:
    return name, LMController(model, tokenizer, max_new_tokens=max_new_tokens, max_history=max_history, name=name)


def load_lm_policy(spec: str, *, device: str = "cpu", seed: int = 0):
    """(model, tokenizer) for the LM controller; ``spec`` is checked before anything loads.

    ``tiny_random`` (the project's architecture, random weights: an interface check, not a policy), ``tool_lm``
    (the project's small LM, zero-shot), ``sft`` (the same base, to be fine-tuned on scripted-controller traces by
    :mod:`agentpost.codeskills.sft` before it plays), ``sft:<folder>`` (such a checkpoint, saved), ``hub:<id>``
    (e.g. ``hub:Qwen/Qwen2.5-1.5B-Instruct``; fails clearly where the hub cannot be reached).
    """
    if not isinstance(spec, str) or not (spec in ("tiny_random", "tool_lm", "sft") or spec.startswith(("sft:", "hub:"))):
        raise ValueError(f"lm_policy must be tiny_random, tool_lm, sft, sft:<folder> or hub:<model id>, got {spec!r}")
    from agentpost.models.lm import load_tool_lm, tiny_random_lm
    from agentpost.models.tokenizer import load_tokenizer

    if spec == "tiny_random":
        model, tok = tiny_random_lm(seed), load_tokenizer()
    elif spec in ("tool_lm", "sft"):
        model, tok = load_tool_lm()
    elif spec.startswith("sft:"):
        model, tok = load_tool_lm(spec.removeprefix("sft:"))
    else:
        from agentpost.models.hub import HubModelUnavailable, load_hub_model

        try:
            tok, model = load_hub_model(spec.removeprefix("hub:"))
        except HubModelUnavailable as err:
            raise HubModelUnavailable(f"{err} (codeskills: lm_policy may also be 'hub:<local folder>')") from err
    return model.to(device).eval(), tok
