"""Sparse-reward environments of the diagnostic, with exact state strings.

- :class:`TextGridworld` — a synthetic n x n room rendered as text (``@`` agent, ``>`` goal), four moves, reward 1 on
  reaching the goal, truncation at ``max_steps``: the fastest mechanism run.
- :class:`MiniHackRoom` — a real MiniHack room (public ``minihack`` 1.0.2 on ``nle`` 1.3.0, gymnasium API; default
  ``MiniHack-Room-5x5-v0``: the agent starts in one corner, the staircase is in the other). The state string is the
  full glyph observation (its bytes). NetHack is seeded through ``env.seed(core, disp, reseed=False)`` before each
  reset (``reset(seed=)`` does not seed NLE). MiniHack reports its own step limit as *terminated* with end status
  ABORTED; :meth:`MiniHackRoom.step` returns that as truncation (``terminated=False, truncated=True``).

Both expose ``reset(core, disp) -> (state, pos)`` and ``step(a) -> (state, pos, reward, terminated, truncated)``
with ``reward`` = 1 exactly when the task succeeded (the binary sink reward of graft.md §3.1) and ``pos`` the agent's
(x, y) for figures.
"""

from __future__ import annotations

import warnings


class TextGridworld:
    """A ``size`` x ``size`` room, start (0, 0), goal (size-1, size-1), actions N, E, S, W (synthetic)."""

    n_actions = 4
    MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))

    def __init__(self, size: int = 5, max_steps: int = 20):
        if size < 2 or max_steps < 1:
            raise ValueError(f"TextGridworld needs size >= 2 and max_steps >= 1, got {size}, {max_steps}")
        self.size, self.max_steps = size, max_steps
        self.goal = (size - 1, size - 1)

    def render(self, pos) -> str:
        rows = []
        for y in range(self.size):
            rows.append(
                "".join("@" if (x, y) == pos else ">" if (x, y) == self.goal else "." for x in range(self.size))
            )
        return "\n".join(rows)

    def reset(self, core: int = 0, disp: int = 0):
        """The room has no randomness; the seeds are accepted for a common interface."""
        self.pos, self.steps = (0, 0), 0
        return self.render(self.pos), self.pos

    def step(self, action: int):
        dx, dy = self.MOVES[action]
        x, y = self.pos
        self.pos = (min(max(x + dx, 0), self.size - 1), min(max(y + dy, 0), self.size - 1))
        self.steps += 1
        success = self.pos == self.goal
        return self.render(self.pos), self.pos, float(success), success, (not success and self.steps >= self.max_steps)


class MiniHackRoom:
    """A MiniHack room with its own step limit ``max_episode_steps`` (see the module docstring).

    When NetHack ends the game it clears the screen, on success and at the step limit alike, so the last observation
    is lost. On success the final state string is that blank glyph screen (one shared win sink, ``pos`` = the square
    the last move entered); at the step limit it is :data:`TIMEOUT` (one shared sink with R = 0, ``pos`` None):
    graft.md §3.1 makes the final state of every trajectory, "max turns reached" included, a sink with its R_i, and
    sinks with equal R are interchangeable in eqs. 5-11. NLE checks its step limit before success, so reaching the
    goal on the very last allowed step counts as truncation.
    """

    #: the final state string of a rollout that hit the step limit
    TIMEOUT = b"timeout"

    #: (dx, dy) of MiniHack's eight navigation actions N, E, S, W, NE, SE, SW, NW
    MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0), (1, -1), (1, 1), (-1, 1), (-1, -1))

    def __init__(self, env_id: str = "MiniHack-Room-5x5-v0", max_episode_steps: int = 20):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # minihack imports pkg_resources
            import gymnasium as gym
            import minihack  # noqa: F401  (registers the MiniHack-* environments)
            from gymnasium.envs.registration import load_env_creator
            from nle import nethack
        if env_id not in gym.registry:
            raise ValueError(f"unknown MiniHack environment {env_id!r}")
        spec = gym.spec(env_id)
        # The raw environment, so that MiniHack's own step limit applies (gym.make would wrap it in a TimeLimit).
        self.env = load_env_creator(spec.entry_point)(
            **{**spec.kwargs, "observation_keys": ("glyphs", "blstats"), "max_episode_steps": max_episode_steps}
        )
        self.n_actions = int(self.env.action_space.n)
        self._aborted = self.env.StepStatus.ABORTED
        self._success = self.env.StepStatus.TASK_SUCCESSFUL
        self._x, self._y = nethack.NLE_BL_X, nethack.NLE_BL_Y
        self.env_id, self.max_episode_steps = env_id, max_episode_steps

    def _state(self, obs):
        return obs["glyphs"].tobytes(), (int(obs["blstats"][self._x]), int(obs["blstats"][self._y]))

    def reset(self, core: int, disp: int):
        self.env.seed(core, disp, reseed=False)
        obs, _ = self.env.reset()
        state, self.pos = self._state(obs)
        return state, self.pos

    def step(self, action: int):
        obs, _, done, truncated, info = self.env.step(action)
        status = info["end_status"]
        truncated = bool(truncated or status == self._aborted)
        success = status == self._success
        state, pos = self._state(obs)
        if success and action < len(self.MOVES):
            pos = (self.pos[0] + self.MOVES[action][0], self.pos[1] + self.MOVES[action][1])
        elif truncated:
            state, pos = self.TIMEOUT, None
        self.pos = pos
        return state, pos, float(success), bool(done and not truncated), truncated

    def close(self) -> None:
        self.env.close()


def make_env(name: str, *, max_steps: int, size: int = 5):
    """``gridworld`` (a :class:`TextGridworld` of ``size``) or a MiniHack environment id (:class:`MiniHackRoom`)."""
    if name == "gridworld":
        return TextGridworld(size=size, max_steps=max_steps)
    if name.startswith("MiniHack-"):
        return MiniHackRoom(name, max_episode_steps=max_steps)
    raise ValueError(f"unknown environment {name!r}: use 'gridworld' or a MiniHack-* id")
