"""Controllers that pick one action name per decision: seeded random, a scripted heuristic, and an LLM policy.

* :class:`RandomController` - uniform over the interface's actions, or ``equal_mass``: half the probability on the
  skills and half on the primitives (so the mixed interface is not diluted by the primitives' count).
* :class:`ScriptedController` - one rule list over skills; in the primitive-only interface it sends the first key of
  the command the chosen skill would issue (:func:`agentpost.codeskills.skills.first_primitive`), so both
  interfaces follow the same policy at different granularity.
* :class:`LMController` - any Hugging Face causal LM: renders a prompt (task, action list with descriptions, bounded
  history, observation text) and parses the completion with a strict grammar; anything else is ``unparseable``
  (a decision with zero primitive steps, spec "budgets").
"""

from __future__ import annotations

import re

import numpy as np

from agentpost.codeskills.bot import Bot
from agentpost.codeskills.runtime import ActionSpace, Choice, DecisionOutcome
from agentpost.codeskills.skills import SKILLS, boulder_pushes, first_primitive


class RandomController:
    """Seeded random actions; ``mode`` is ``uniform`` or ``equal_mass``."""

    def __init__(self, mode: str = "uniform"):
        if mode not in ("uniform", "equal_mass"):
            raise ValueError(f"RandomController mode must be 'uniform' or 'equal_mass', got {mode!r}")
        self.mode = mode
        self.name = f"random_{mode}"
        self.rng = np.random.default_rng(0)

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng

    @staticmethod
    def probabilities(space: ActionSpace, mode: str) -> np.ndarray:
        """Action probabilities in ``space.names`` order (equal_mass: 1/2 on skills, 1/2 on primitives)."""
        n_s, n_p = len(space.skills), len(space.primitives)
        if mode == "uniform" or not (n_s and n_p):
            return np.full(len(space), 1.0 / len(space))
        return np.array([0.5 / n_s] * n_s + [0.5 / n_p] * n_p)

    def act(self, bot: Bot, space: ActionSpace) -> Choice:
        p = self.probabilities(space, self.mode)
        return Choice(space.names[int(self.rng.choice(len(space), p=p))])

    def observe(self, choice, outcome, bot) -> None:
        pass


def scripted_skill(bot: Bot) -> str:
    """The heuristic's rule list: fight a reachable monster, take a reachable staircase, push a boulder into water
    when the staircase is in view beyond it, explore what can be reached, freeze lava or fill water with a boulder
    when what is left lies beyond it, else search for hidden passages."""
    if bot.monsters and bot.path_to(bot.monsters, adjacent=True) is not None:
        return "fight"
    if bot.reachable(bot.stairs):
        return "goto_stairs"
    if bot.stairs and bot.water and boulder_pushes(bot):
        return "push_boulder"
    if bot.reachable(bot.frontier):
        return "explore_room"
    if bot.lava and bot.item_letter("wand"):
        return "freeze_lava"
    if bot.water and boulder_pushes(bot):
        return "push_boulder"
    return "search_hidden"


class ScriptedController:
    """The scripted heuristic at the granularity of the interface (skills where available, else first keys)."""

    name = "scripted"

    def __init__(self):
        self.pending: list[str] = []

    def reset(self, rng) -> None:
        self.pending = []

    def act(self, bot: Bot, space: ActionSpace) -> Choice:
        want = scripted_skill(bot)
        if space.is_skill(want):
            return Choice(want)
        if self.pending and bot.prompt_open():
            return Choice(self.pending.pop(0))
        self.pending = []
        for name in (want, "explore_room", "search_hidden"):
            keys = first_primitive(bot, SKILLS[name].fn)
            if keys and all(k in space for k in keys):
                self.pending = list(keys[1:])
                return Choice(keys[0])
        return Choice("search" if "search" in space else space.names[0])

    def observe(self, choice, outcome, bot) -> None:
        pass


# ---- LLM policy -----------------------------------------------------------------------------------------------
INSTRUCTION = ("You play MiniHack (NetHack). Reach the down staircase '>'. You are '@'. "
               "Reply with exactly one action name from the list, and nothing else.")


#: Per-task hints by MiniHack task family (the id's first word after ``MiniHack-``); other tasks get none.
TASK_INSTRUCTIONS: dict[str, str] = {
    "Room": "The staircase is somewhere in one room; monsters may be in the way.",
    "Corridor": "Rooms are joined by dark corridors; explore them to find the room with the staircase.",
    "Quest": "Lava blocks the way: pick up the wand and zap it at the lava to freeze it, then cross.",
    "River": "The staircase lies across a river: push boulders into the water to fill it and make a crossing.",
    "Lava": "Lava blocks the way: freeze it with a wand of cold or frost horn before crossing.",
}


def task_instruction(task: str) -> str:
    """The hint for a task id (``MiniHack-River-Narrow-v0`` or ``River-Narrow-v0``), '' for an unlisted family."""
    family = task.removeprefix("MiniHack-").split("-")[0]
    return TASK_INSTRUCTIONS.get(family, "")


def prompt_parts(bot: Bot, space: ActionSpace, *, task: str = "") -> tuple[str, str]:
    """The fixed parts of a prompt around its history block: (instruction, task with its hint and action list;
    observation)."""
    actions = "\n".join(f"- {n}: {space.description(n)}" for n in space.names)
    inv = ", ".join(f"{k}: {v}" for k, v in bot.inventory.items()) or "(empty)"
    hint = task_instruction(task)
    head = f"{INSTRUCTION}\nTask: {task}{(' - ' + hint) if hint else ''}\nActions:\n{actions}\nRecent decisions:\n"
    tail = (f"\nMessage: {bot.message or '(none)'}\nStatus: {bot.status_text()}\nInventory: {inv}\n"
            f"Map:\n{bot.map_text()}\nAction:")
    return head, tail


def join_prompt(head: str, history: list[str], tail: str) -> str:
    return head + ("\n".join(history) if history else "(none)") + tail


def render_prompt(bot: Bot, space: ActionSpace, history: list[str], *, task: str = "") -> str:
    """The prompt text: instruction, actions with descriptions, the last decisions, the observation."""
    head, tail = prompt_parts(bot, space, task=task)
    return join_prompt(head, history, tail)


def fit_prompt_ids(tokenizer, head: str, history: list[str], tail: str, max_tokens: int | None) -> tuple[list[int], int]:
    """Token ids of the prompt within ``max_tokens``: the oldest history lines are dropped first, so the instruction,
    the action list and the observation are always kept. Returns (ids, history lines dropped); raises a clear error
    when even the prompt without history is longer than ``max_tokens``."""
    for dropped in range(len(history) + 1):
        ids = prompt_ids(tokenizer, join_prompt(head, history[dropped:], tail))
        if max_tokens is None or len(ids) <= max_tokens:
            return ids, dropped
    raise ValueError(f"max_prompt_tokens={max_tokens} is shorter than the prompt without history ({len(ids)} tokens: "
                     f"instruction, action list and observation must fit)")


def history_line(choice: Choice, outcome: DecisionOutcome) -> str:
    """One history entry: what was chosen and what it did (CodeHack's NoProgressFeedback after zero steps)."""
    said = choice.action if choice.action else f"unparseable output {choice.raw!r}"
    note = " (no progress: try a different action)" if outcome.steps == 0 else ""
    return f"{said} -> {outcome.steps} steps, {outcome.result}{note}"


def parse_action(text: str, space: ActionSpace) -> str | None:
    """Strict grammar: ``ws* NAME ws* (newline .*)?`` with NAME one of the space's names, else ``None``.

    Only the first line counts; it must be an action name and nothing else (case-sensitive)."""
    m = re.match(r"[ \t]*([A-Za-z_]+)[ \t]*(?:\r?\n|$)", text)
    if m is None or m.group(1) not in space.names:
        return None
    return m.group(1)


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """Token ids of a prompt: the user turn of the chat template where the tokenizer has one, else plain text."""
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_dict=True)
        return list(out["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


class LMController:
    """A causal LM as the policy: greedy decoding of at most ``max_new_tokens`` tokens per decision.

    ``max_history`` past decisions (action, steps, outcome) are shown (spec ambiguity 4, default 16). With a chat
    template (instruct models) the prompt is the user turn; otherwise it is plain text. ``max_prompt_tokens`` (None:
    no limit) drops the oldest history lines until the prompt fits (:func:`fit_prompt_ids`), as SFT encodes it."""

    def __init__(self, model, tokenizer, *, max_new_tokens: int = 8, max_history: int = 16, task: str = "",
                 name: str = "lm", max_prompt_tokens: int | None = None):
        if max_new_tokens < 1 or max_history < 0:
            raise ValueError("max_new_tokens must be >= 1 and max_history >= 0")
        if max_prompt_tokens is not None and max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be None or >= 1, got {max_prompt_tokens!r}")
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.max_history, self.task, self.name = max_new_tokens, max_history, task, name
        self.max_prompt_tokens = max_prompt_tokens
        self.history: list[str] = []

    def reset(self, rng) -> None:
        self.history = []

    def act(self, bot: Bot, space: ActionSpace) -> Choice:
        import torch

        head, tail = prompt_parts(bot, space, task=self.task)
        history = self.history[-self.max_history:] if self.max_history else []
        ids = torch.tensor([fit_prompt_ids(self.tokenizer, head, history, tail, self.max_prompt_tokens)[0]],
                           device=self.model.device)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with torch.no_grad():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=self.max_new_tokens,
                                      do_sample=False, pad_token_id=pad)
        new = out[0, ids.shape[1]:]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return Choice(parse_action(text, space), raw=text, prompt_tokens=int(ids.shape[1]),
                      output_tokens=int(new.shape[0]), lm_call=True)

    def observe(self, choice: Choice, outcome: DecisionOutcome, bot: Bot) -> None:
        self.history.append(history_line(choice, outcome))
