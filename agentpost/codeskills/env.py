"""Real MiniHack environments for the code-skills chapter: construction, explicit seeding, primitives, end status.

Spec ``code-skills.md``: public ``nle==1.3.0`` + ``minihack==1.0.2`` (gymnasium API). Two facts about those
packages shape this module (the paper says nothing of either):

* ``reset(seed=...)`` does not seed NetHack; the level and the game RNGs are set by
  ``env.unwrapped.seed(core, disp, reseed=False)`` before ``reset()`` (NLE ``nle/env/base.py``, ``NLE.seed``).
* NLE checks its step limit *before* it increments the step counter (``NLE.step``), so the step that reaches
  ``max_episode_steps`` comes back as ``terminated=True, truncated=False`` with ``end_status == ABORTED``.
  :func:`classify_end` maps that to a truncation, as CodeHack does, so a time-out is never read as a failure
  of the game itself.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

#: Observation keys the Bot reads (all public NLE keys).
OBS_KEYS = ("glyphs", "chars", "blstats", "message", "tty_chars", "inv_strs", "inv_letters")

#: Primitive actions: name -> the NetHack key it sends. The eight compass moves double as prompt answers
#: (y = yes, n = no, and the inventory letters h j k l y u b n); ``item_<x>`` answer "which item?" prompts for
#: the other early inventory letters. The set is the same for every task (the paper does not list it: a curated subset).
PRIMITIVE_KEYS: dict[str, int] = {
    "north": ord("k"), "east": ord("l"), "south": ord("j"), "west": ord("h"),
    "northeast": ord("u"), "southeast": ord("n"), "southwest": ord("b"), "northwest": ord("y"),
    "search": ord("s"), "pickup": ord(","), "kick": 4, "zap": ord("z"), "esc": 27,
    "item_a": ord("a"), "item_c": ord("c"), "item_d": ord("d"), "item_e": ord("e"), "item_f": ord("f"),
    "item_g": ord("g"),
}

PRIMITIVE_DESCRIPTIONS: dict[str, str] = {
    **{d: f"move one square {d}" for d in ("north", "east", "south", "west", "northeast", "southeast",
                                           "southwest", "northwest")},
    "search": "search adjacent squares for hidden doors and corridors",
    "pickup": "pick up what lies on this square",
    "kick": "kick (then a direction)",
    "zap": "zap a wand (then an item letter and a direction)",
    "esc": "cancel the open prompt",
    **{f"item_{c}": f"answer a prompt with inventory letter {c}" for c in "acdefg"},
}

#: Compass direction name -> (dx, dy) on the NetHack map (y grows downwards).
DIRECTIONS: dict[str, tuple[int, int]] = {
    "north": (0, -1), "east": (1, 0), "south": (0, 1), "west": (-1, 0),
    "northeast": (1, -1), "southeast": (1, 1), "southwest": (-1, 1), "northwest": (-1, -1),
}

# NLE 1.3 end statuses (nle.env.base.NLE.StepStatus; MiniHack adds TASK_SUCCESSFUL = 2).
ABORTED, RUNNING, DEATH, TASK_SUCCESSFUL = -1, 0, 1, 2


def _import_minihack():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # minihack imports pkg_resources (deprecation notice)
            import gymnasium
            import minihack  # noqa: F401  (registers the MiniHack-* ids)
            from nle import nethack
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError("the code-skills chapter needs the `minihack` extra: pip install -e '.[minihack]' "
                          "(minihack==1.0.2, nle==1.3.0, setuptools<81)") from err
    return gymnasium, nethack


def key_to_nle_action(key: int):
    """The NLE action enum member whose value is ``key`` (NLE actions are key codes)."""
    _, nethack = _import_minihack()
    for action in nethack.ACTIONS:
        if int(action) == key:
            return action
    raise ValueError(f"no NLE action sends key {key!r}")


def registered_tasks() -> list[str]:
    """Every MiniHack task id registered by the installed package."""
    gymnasium, _ = _import_minihack()
    return sorted(k for k in gymnasium.registry if k.startswith("MiniHack-"))


def make_env(task: str, *, des_file: str | None = None, max_episode_steps: int | None = None, **options):
    """A MiniHack environment with this chapter's fixed primitive key set and observation keys.

    ``task`` is any registered ``MiniHack-*`` id (``MiniHack-Navigation-Custom-v0`` or ``MiniHack-Skill-Custom-v0``
    with ``des_file`` for a hand-made map). The task's own step limit is kept unless ``max_episode_steps`` is given.
    """
    gymnasium, _ = _import_minihack()
    if not isinstance(task, str) or task not in gymnasium.registry or not task.startswith("MiniHack-"):
        raise ValueError(f"unknown MiniHack task {task!r}; registered ids come from registered_tasks()")
    kwargs = dict(observation_keys=OBS_KEYS, actions=tuple(key_to_nle_action(k) for k in PRIMITIVE_KEYS.values()),
                  disable_env_checker=True, **options)
    if des_file is not None:
        kwargs["des_file"] = des_file
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gymnasium.make(task, **kwargs)
    if max_episode_steps is not None:
        # gymnasium.make would consume max_episode_steps for its own TimeLimit wrapper (which reports a real
        # truncation); set NLE's limit instead, so the limit is signalled the way MiniHack tasks signal it.
        if not isinstance(max_episode_steps, int) or max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be a positive int, got {max_episode_steps!r}")
        env.unwrapped._max_episode_steps = max_episode_steps
    return env


def seeded_reset(env, core: int, disp: int | None = None):
    """Reset with NetHack's RNGs set explicitly: ``env.unwrapped.seed(core, disp, reseed=False)`` then ``reset()``.

    ``reset(seed=...)`` would only seed gymnasium's own RNG, which NLE does not use."""
    if not isinstance(core, (int, np.integer)) or isinstance(core, bool):
        raise TypeError(f"core seed must be an int, got {type(core).__name__}")
    env.unwrapped.seed(int(core), int(core if disp is None else disp), reseed=False)
    return env.reset()


def max_steps(env) -> int:
    """The environment's own primitive-step limit (MiniHack Room: 20 x size; Corridor: 1000; Quest-Easy: 500)."""
    return int(env.unwrapped._max_episode_steps)


@dataclass(frozen=True)
class EndKind:
    """How a step ended the episode: ``kind`` in {running, terminated, truncated}; ``reason`` names why."""

    kind: str
    reason: str


def classify_end(terminated: bool, truncated: bool, info: dict) -> EndKind:
    """Termination vs truncation for one NLE/MiniHack step (NLE's own flags mislabel a time-out: see the module
    docstring).

    NLE reports its step limit as ``terminated=True`` with ``end_status == ABORTED``; that is a truncation
    (the game did not end, the clock did). Success and death are terminations.
    """
    status = int(info.get("end_status", RUNNING))
    if status == ABORTED:
        return EndKind("truncated", "env_step_limit")
    if truncated:
        return EndKind("truncated", "env_truncated")
    if status == TASK_SUCCESSFUL:
        return EndKind("terminated", "success")
    if status == DEATH:
        return EndKind("terminated", "death")
    if terminated:
        return EndKind("terminated", "game_over")
    return EndKind("running", "running")
