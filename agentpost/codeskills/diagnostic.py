"""The chapter's diagnostic: tasks x interfaces x controllers x budgets on real MiniHack, one seed per run.

Episode ``i`` of a run at ``seed`` on a task is the same task instance (NetHack seeded with ``env_seed(seed, i)``)
for every interface, controller and budget, so arms are paired episode by episode; each seed draws its own
instances (nested items). Every arm runs under two budgets (``BUDGET_MODES``): ``eqdec``, the same decision budget
for every interface (``max_decisions``), and ``eqsteps``, the same primitive-step budget (the task's limit, or
``max_primitive_steps``) with a decision budget that never binds first (it equals the step budget), so primitive-only
play is allowed as many keys as the task allows. The comparisons are declared in the catalogue and computed across
seed runs by ``agentpost compare``.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from agentpost.codeskills.controllers import LMController, RandomController, ScriptedController
from agentpost.codeskills.env import make_env, max_steps
from agentpost.codeskills.runtime import Budgets, action_space, run_episode
from agentpost.codeskills import search
from agentpost.codeskills.search import GreedyController
from agentpost.record.outcomes import arm_facts, fingerprint

TASKS = ("MiniHack-Room-5x5-v0", "MiniHack-Room-15x15-v0", "MiniHack-Corridor-R3-v0", "MiniHack-Corridor-R5-v0",
         "MiniHack-Quest-Easy-v0", "MiniHack-River-Narrow-v0")

#: (controller, interface) arms. The greedy search controller (:mod:`agentpost.codeskills.search`) plays every
#: interface and chooses between skills and keys in mixed mode. random_equal_mass differs from random_uniform only
#: where both kinds of action exist (mixed); the scripted heuristic picks skills whenever they exist, so its mixed run
#: equals its skill-only run by construction (a unit test checks it) and is not run twice. The random controllers are
#: floors: what an interface gives a controller that does not plan (no headline comparison rests on them).
ARMS = (("random_uniform", "primitive"), ("random_uniform", "skill"), ("random_uniform", "mixed"),
        ("random_equal_mass", "mixed"), ("scripted", "primitive"), ("scripted", "skill"),
        ("greedy", "primitive"), ("greedy", "skill"), ("greedy", "mixed"))

#: eqdec: equal decisions (max_decisions for every interface); eqsteps: equal primitive steps (the step budget for
#: every interface, decisions up to the same number).
BUDGET_MODES = ("eqdec", "eqsteps")

METRICS = ("success", "decisions", "primitive_steps")


def env_seed(seed: int, episode: int) -> int:
    """NetHack core/disp seed of task instance ``episode`` in a run at ``seed`` (the same for every arm)."""
    return int(seed) * 10_000 + int(episode)


def controller(name: str, skill_step_cap: int = 50):
    if name == "scripted":
        return ScriptedController()
    if name == "greedy":
        return GreedyController(skill_step_cap)
    if name.startswith("random_"):
        return RandomController(name.removeprefix("random_"))
    raise ValueError(f"unknown controller {name!r}; use greedy, scripted, random_uniform or random_equal_mass")


def budgets_for(mode: str, base: Budgets, step_limit: int) -> Budgets:
    """The budgets of ``mode``: ``eqdec`` is ``base``; ``eqsteps`` keeps the primitive-step budget (``base``'s, else
    the task's ``step_limit``) and raises the decision budget to it, so the steps bind, not the decisions."""
    if mode == "eqdec":
        return base
    if mode == "eqsteps":
        steps = base.max_primitive_steps or step_limit
        return replace(base, max_decisions=max(base.max_decisions, int(steps)))
    raise ValueError(f"budget mode must be one of {BUDGET_MODES}, got {mode!r}")


def arm_name(controller_name: str, interface: str, mode: str) -> str:
    """Outcome arm name, e.g. ``scripted_skill_eqsteps``."""
    return f"{controller_name}_{interface}_{mode}"


def run_grid(tasks, episodes: dict, seed: int, arms=ARMS, budgets: Budgets = Budgets(), *,
             modes=BUDGET_MODES, lm=None, progress: bool = True) -> pd.DataFrame:
    """One row per episode at ``seed``: every arm under every budget mode. ``episodes[task]`` instances per task;
    ``lm=(name, controller)`` adds an LM arm per interface (its history is reset per episode)."""
    missing = [t for t in tasks if t not in episodes]
    if missing:
        raise ValueError(f"episodes per seed missing for {missing}")
    bad = [m for m in modes if m not in BUDGET_MODES]
    if bad:
        raise ValueError(f"budget modes must be among {BUDGET_MODES}, got {bad}")
    jobs = [(t, c, i, m) for t in tasks for c, i in arms for m in modes]
    if lm is not None:
        jobs += [(t, lm[0], i, m) for t in tasks for i in ("primitive", "skill", "mixed") for m in modes]
    rows = []
    envs = {t: make_env(t) for t in tasks}
    bar = tqdm(total=sum(episodes[t] for t, _, _, _ in jobs), desc="episodes", disable=not progress, mininterval=15)
    for task, ctrl_name, interface, mode in jobs:
        ctrl = lm[1] if lm is not None and ctrl_name == lm[0] else controller(ctrl_name, budgets.skill_step_cap)
        space = action_space(interface)
        b = budgets_for(mode, budgets, max_steps(envs[task]))
        if isinstance(ctrl, LMController):
            ctrl.task = task.removeprefix("MiniHack-")
        for ep in range(episodes[task]):
            res = run_episode(envs[task], ctrl, space, b, env_seed=env_seed(seed, ep),
                              rng=np.random.default_rng([int(seed), ep]), task=task, interface=interface)
            rows.append({**res.row(), "controller": ctrl_name, "budget": mode, "max_decisions": b.max_decisions,
                         "seed": int(seed), "episode": ep, "item": f"{short(task)}-s{int(seed)}-e{ep}"})
            bar.update()
    bar.close()
    for env in envs.values():
        env.close()
    df = pd.DataFrame(rows)
    df["success"] = df["success"].astype(float)
    df["arm"] = [arm_name(c, i, m) for c, i, m in zip(df.controller, df.interface, df.budget)]
    return df


def arm_outcomes(df: pd.DataFrame, metric: str) -> dict:
    """``{arm: {item id: value}}`` of one metric over every task instance the run played (for ``record_outcomes``)."""
    return {arm: dict(zip(g["item"], g[metric].astype(float))) for arm, g in df.groupby("arm", sort=True)}


def arm_facts_of(df: pd.DataFrame, budgets: Budgets) -> dict:
    """Measured facts per arm: the controller's code (``checkpoint``: nothing is trained), the instances played
    (``data_version``), no updates, the budgets it ran under and its mean decision budget over tasks."""
    data = fingerprint(sorted(set(df["item"])))
    out = {}
    for arm, g in df.groupby("arm", sort=True):
        ctrl = g["controller"].iloc[0]
        code = inspect.getsource(ScriptedController if ctrl == "scripted" else search if ctrl == "greedy" else
                                 RandomController if ctrl.startswith("random_") else LMController)
        out[arm] = arm_facts(checkpoint=fingerprint(code), data_version=data, updates=0, max_new_tokens=None,
                             controller=ctrl,
                             budget=g["budget"].iloc[0], max_primitive_steps=budgets.max_primitive_steps or "task limit",
                             max_decisions_by_task={t: int(v) for t, v in g.groupby("task")["max_decisions"].first().items()})
    return out


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per task x budget x controller x interface: success rate, decisions, primitive steps per episode and per
    success, LM calls and tokens per episode, episodes run."""
    keys = ["task", "budget", "controller", "interface"]
    g = df.groupby(keys, sort=False)
    out = g.agg(episodes=("success", "size"), success_rate=("success", "mean"),
                decisions_per_episode=("decisions", "mean"), primitive_steps_per_episode=("primitive_steps", "mean"),
                zero_step_decisions=("zero_step_decisions", "mean"), lm_calls_per_episode=("lm_calls", "mean"),
                tokens_per_episode=("prompt_tokens", "mean"), output_tokens_per_episode=("output_tokens", "mean"),
                unparseable_per_episode=("unparseable", "mean")).reset_index()
    steps_ok = df[df.success > 0].groupby(keys, sort=False)["primitive_steps"].mean()
    out["primitive_steps_per_success"] = [steps_ok.get(k, np.nan) for k in zip(*(out[c] for c in keys))]
    out["tokens_per_episode"] += out.pop("output_tokens_per_episode")
    out.insert(0, "task", out.pop("task").str.replace("MiniHack-", "").str.replace("-v0", ""))
    return out


def short(task: str) -> str:
    """Metric-name form of a task id: MiniHack-Corridor-R3-v0 -> corridor_r3."""
    return task.removeprefix("MiniHack-").removesuffix("-v0").lower().replace("-", "_")


def lm_arm(model, tokenizer, *, max_new_tokens: int, max_history: int, name: str = "lm",
           max_prompt_tokens: int | None = None) -> tuple[str, LMController]:
    return name, LMController(model, tokenizer, max_new_tokens=max_new_tokens, max_history=max_history, name=name,
                              max_prompt_tokens=max_prompt_tokens)


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
