"""Action spaces, budgets and the episode loop shared by every interface and controller.

Spec ``code-skills.md``, pseudo-code "one episode, any interface": seed explicitly, let the controller pick an action
name, run a skill to completion / failure / panic / cap or send one primitive, update the decision, primitive-step
and no-progress counters, accumulate the discounted skill reward, and stop on termination, on any budget or on task
success. Quantities per decision ``d`` with ``n_d`` primitives and rewards ``r_0..r_{n_d-1}``:
``R_d = sum_k gamma^k r_k`` and ``useful_d = 1[n_d > 0]``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from agentpost.codeskills.bot import Bot
from agentpost.codeskills.env import PRIMITIVE_DESCRIPTIONS, PRIMITIVE_KEYS, max_steps, seeded_reset
from agentpost.codeskills.skills import SKILLS

INTERFACES = ("primitive", "skill", "mixed")
DEFAULT_SKILLS = ("explore_room", "goto_stairs", "fight", "pick_up", "freeze_lava", "push_boulder", "search_hidden")


class ActionSpace:
    """A space of action *names* (CodeHack's string action space: integers are rejected)."""

    def __init__(self, skills=(), primitives=()):
        unknown = [s for s in skills if s not in SKILLS] + [p for p in primitives if p not in PRIMITIVE_KEYS]
        if unknown:
            raise ValueError(f"unknown actions {unknown}; skills: {list(SKILLS)}, primitives: {list(PRIMITIVE_KEYS)}")
        self.skills, self.primitives = tuple(skills), tuple(primitives)
        self.names = self.skills + self.primitives
        if not self.names:
            raise ValueError("an action space needs at least one action")

    def __contains__(self, action) -> bool:
        if not isinstance(action, str):
            raise TypeError(f"actions are names (str), got {type(action).__name__} {action!r}")
        return action in self.names

    def __len__(self) -> int:
        return len(self.names)

    def is_skill(self, name: str) -> bool:
        return name in self.skills

    def description(self, name: str) -> str:
        return SKILLS[name].description if name in SKILLS else PRIMITIVE_DESCRIPTIONS[name]


def action_space(interface: str, skills=DEFAULT_SKILLS, primitives=tuple(PRIMITIVE_KEYS)) -> ActionSpace:
    """primitive-only (A_p), skill-only (A_s) or mixed (A_s + A_p)."""
    if interface not in INTERFACES:
        raise ValueError(f"interface must be one of {INTERFACES}, got {interface!r}")
    return ActionSpace(skills=() if interface == "primitive" else skills,
                       primitives=() if interface == "skill" else primitives)


@dataclass(frozen=True)
class Budgets:
    """The same budgets for every interface.

    ``max_decisions``: controller decisions per episode (``counts="top_level"``, the paper's LM calls) or every
    call including nested skills and primitives (``counts="all_calls"``, CodeHack's ``max_strategy_steps``; spec
    the paper leaves open what counts). ``max_primitive_steps``: primitives per episode (None: the task's own limit,
    which the environment enforces too). ``no_progress_limit``: consecutive decisions with zero primitive steps that
    stop the episode (CodeHack: 150). ``skill_step_cap``: primitives one top-level skill call may issue. ``gamma``:
    discount inside a skill (0.99).
    """

    max_decisions: int = 100
    max_primitive_steps: int | None = None
    no_progress_limit: int = 150
    skill_step_cap: int = 50
    counts: str = "top_level"
    gamma: float = 0.99

    def __post_init__(self):
        for name in ("max_decisions", "no_progress_limit", "skill_step_cap"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"Budgets.{name} must be a positive int, got {v!r}")
        if self.max_primitive_steps is not None and (not isinstance(self.max_primitive_steps, int)
                                                     or self.max_primitive_steps < 1):
            raise ValueError(f"Budgets.max_primitive_steps must be a positive int or None, got {self.max_primitive_steps!r}")
        if self.counts not in ("top_level", "all_calls"):
            raise ValueError(f"Budgets.counts must be 'top_level' or 'all_calls', got {self.counts!r}")
        if not 0 < self.gamma <= 1:
            raise ValueError(f"Budgets.gamma must be in (0, 1], got {self.gamma!r}")


def discounted(rewards, gamma: float) -> float:
    """R_d = sum_k gamma^k r_k (spec, "Quantities")."""
    return float(sum(r * gamma ** k for k, r in enumerate(rewards)))


@dataclass
class Choice:
    """A controller's decision: an action name, or ``None`` when its output could not be parsed."""

    action: str | None
    raw: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    lm_call: bool = False


@dataclass
class DecisionOutcome:
    action: str | None
    kind: str  # "skill", "primitive" or "unparseable"
    steps: int
    reward: float
    result: str  # "done", "failed", "cap", "panic", "episode_end", "budget", "unparseable", "primitive"


@dataclass
class EpisodeResult:
    task: str
    interface: str
    controller: str
    env_seed: int
    success: bool
    stop_reason: str
    end_kind: str
    decisions: int
    all_calls: int
    primitive_steps: int
    zero_step_decisions: int
    skill_decisions: int
    primitive_decisions: int
    unparseable: int
    lm_calls: int
    prompt_tokens: int
    output_tokens: int
    discounted_return: float
    trace: list = field(default_factory=list, repr=False)

    def row(self) -> dict:
        d = asdict(self)
        d.pop("trace")
        return d


def run_decision(bot: Bot, space: ActionSpace, action: str, budgets: Budgets, step_limit: int,
                 panics: tuple[str, ...]) -> DecisionOutcome:
    """Execute one decision: one primitive, or a skill until done / failed / cap / panic / episode end / budget."""
    if action not in space:
        raise ValueError(f"action {action!r} is not in this interface's action space {space.names}")
    if not space.is_skill(action):
        bot.calls += 1
        if bot.steps >= step_limit:
            return DecisionOutcome(action, "primitive", 0, 0.0, "budget")
        r = bot.step(action)
        return DecisionOutcome(action, "primitive", 1, r, "primitive")
    gen = SKILLS[action].fn(bot)
    rewards: list[float] = []
    result = "failed"
    try:
        item = next(gen)
        while True:
            keys = item if isinstance(item, tuple) else (item,)
            if len(rewards) + len(keys) > budgets.skill_step_cap:
                result = "cap"
                break
            if bot.steps + len(keys) > step_limit:
                result = "budget"
                break
            hp, n_mon = bot.hp, len(bot.monsters)
            for key in keys:
                rewards.append(bot.step(key))
                if bot.done:
                    break
            if bot.done:
                result = "episode_end"
                break
            if bot.panic_guard and all(bot.panic_guard) and (
                    ("hp_loss" in panics and bot.hp < hp) or ("new_monster" in panics and len(bot.monsters) > n_mon)):
                result = "panic"
                break
            item = gen.send(None)
    except StopIteration as stop:
        result = "done" if stop.value else "failed"
    finally:
        gen.close()
    return DecisionOutcome(action, "skill", len(rewards), discounted(rewards, budgets.gamma), result)


def run_episode(env, controller, space: ActionSpace, budgets: Budgets, *, env_seed: int,
                rng: np.random.Generator, task: str = "", interface: str = "",
                panics: tuple[str, ...] = ("hp_loss", "new_monster"), keep_trace: bool = False) -> EpisodeResult:
    """One seeded episode of ``controller`` on ``env`` through ``space`` under ``budgets``."""
    obs, _ = seeded_reset(env, env_seed)
    bot = Bot(env, obs)
    step_limit = max_steps(env) if budgets.max_primitive_steps is None else min(max_steps(env),
                                                                               budgets.max_primitive_steps)
    controller.reset(rng)
    decisions = zero = skill_dec = prim_dec = unparseable = lm_calls = p_tok = o_tok = 0
    no_progress, ret, stop = 0, 0.0, None
    trace = []
    while stop is None:
        used = decisions if budgets.counts == "top_level" else bot.calls
        if used >= budgets.max_decisions:
            stop = "decision_budget"
            break
        choice = controller.act(bot, space)
        decisions += 1
        lm_calls += int(choice.lm_call)
        p_tok += choice.prompt_tokens
        o_tok += choice.output_tokens
        if choice.action is None:
            unparseable += 1
            outcome = DecisionOutcome(None, "unparseable", 0, 0.0, "unparseable")
        else:
            outcome = run_decision(bot, space, choice.action, budgets, step_limit, panics)
            skill_dec += outcome.kind == "skill"
            prim_dec += outcome.kind == "primitive"
        ret += outcome.reward
        if keep_trace:
            trace.append({"choice": choice, "outcome": outcome})
        controller.observe(choice, outcome, bot)
        zero += outcome.steps == 0
        no_progress = no_progress + 1 if outcome.steps == 0 else 0
        if bot.done:
            stop = bot.end.reason
        elif bot.steps >= step_limit or outcome.result == "budget":
            stop = "primitive_budget"
        elif no_progress >= budgets.no_progress_limit:
            stop = "no_progress"
    end_kind = bot.end.kind if bot.done else "truncated"
    return EpisodeResult(
        task=task, interface=interface, controller=getattr(controller, "name", type(controller).__name__),
        env_seed=int(env_seed), success=bot.success, stop_reason=stop, end_kind=end_kind, decisions=decisions,
        all_calls=bot.calls, primitive_steps=bot.steps, zero_step_decisions=zero, skill_decisions=skill_dec,
        primitive_decisions=prim_dec, unparseable=unparseable, lm_calls=lm_calls, prompt_tokens=p_tok,
        output_tokens=o_tok, discounted_return=ret, trace=trace)
