"""A search controller: greedy one-decision lookahead on the Bot's own map, the same for skills and primitive keys.

Not part of the paper (spec ``code-skills.md`` has LLM controllers only); the chapter needs a controller that *plans*
and can choose between skills and keys without its choice depending on how many actions the interface lists (the
seeded random controllers' outcome follows from the action counts). This one is a search/heuristic controller, not a
learned one:

* **World model** (:class:`ModelBot`): a copy of the Bot whose :meth:`ModelBot.step` changes the observed glyph map
  the way the known rules of NetHack say a key would: a compass move enters a legal cell, attacks a monster (assumed
  killed by the blow), or pushes a boulder (onto floor or a never-seen cell; into water: the water is filled); ``zap`` + item + direction freezes the
  lava in that line; reaching the stairs ends the model episode with success; any other key only costs a step.
  Nothing unseen is revealed, hit points, items and monster moves are not modelled.
* **Potential** (:class:`Potential`): ``Phi = -distance`` to the decision's goal on the model map - the staircase when
  it is in view and some way leads there, else the unexplored frontier (including water or lava next to never-seen
  cells) - by Dijkstra over legal moves, entering a floor cell costs 1, a
  monster 2, a boulder 3, water or lava ``CROSS`` (so filling or freezing a cell on the way is progress).
* **Choice** (:class:`GreedyController`): every available action, skill or key, is dry-run once in a fresh model
  (a key is one step; a skill runs its own code until it returns, reaches the goal, or ``skill_step_cap`` model
  steps) and scored by its progress per primitive step, ``(Phi(end) - Phi(now)) / max(1, n)``. The best score wins;
  ties go to the larger progress, then the fewer steps, then the name in alphabetical order, so adding actions never
  changes the choice among the others. When no action makes progress the controller falls back on
  ``search_hidden`` if the interface has it, else ``search``.

Compute per decision: one dry run per available action; each interface is allowed the same cap
(``skill_step_cap`` model steps per action), which a key uses one step of. The primitive interface is therefore
myopic where a plan needs several keys that each look like no progress (walking round a boulder to push it); that is
the difference a skill library makes to a one-step planner, and the chapter says so.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from agentpost.codeskills.bot import (BOULDER_GLYPH, GLYPH_CMAP_OFF, S_DNSTAIR, S_LAVA, S_ROOM, S_STONE, WATER_CMAP,
                                     Bot)
from agentpost.codeskills.env import DIRECTIONS, EndKind
from agentpost.codeskills.runtime import ActionSpace, Choice
from agentpost.codeskills.skills import SKILLS

#: Entering cost of water or lava in the potential (a crossing must be made before the cell can be walked).
CROSS = 12.0
MONSTER_COST, BOULDER_COST = 2.0, 3.0
#: The ray of a wand of cold freezes lava this far (NetHack: 7-13 squares; the model takes the shortest range).
RAY = 7
FALLBACK = ("search_hidden", "search")


class ModelBot(Bot):
    """The Bot's knowledge as a world model: :meth:`step` edits a copy of the glyph map (see the module docstring)."""

    def __init__(self, bot: Bot):  # noqa: D107 - no environment: a copy of the parsed state
        self.env = None
        self._actions = bot._actions
        self.steps, self.calls, self.end, self.last_reward = 0, bot.calls, bot.end, 0.0
        self.visited, self.searched, self.blocked = set(bot.visited), Counter(bot.searched), set(bot.blocked)
        self.terrain, self.panic_guard, self._zap = bot.terrain.copy(), [], []
        self.edited = False  # True once the model changed the map (not only the hero's place)
        obs = dict(bot.obs)
        for key in ("glyphs", "blstats", "message"):
            obs[key] = np.array(bot.obs[key], copy=True)
        self._set(obs)

    def _observe_terrain(self) -> None:
        """No terrain is read back from the glyphs: the model writes terrain itself."""

    def _floor(self, x: int, y: int) -> int:
        t = int(self.terrain[y, x])
        return GLYPH_CMAP_OFF + (t if t > 0 and t not in WATER_CMAP and t != S_LAVA else S_ROOM)

    def _move_hero(self, g: np.ndarray, to: tuple[int, int]) -> None:
        x, y = self.pos
        g[to[1], to[0]], g[y, x] = g[y, x], self._floor(x, y)
        self.obs["blstats"][0], self.obs["blstats"][1] = to

    def step(self, name: str) -> float:
        if self.done:
            raise RuntimeError(f"model episode already ended; cannot step {name!r}")
        if name not in self._actions:
            raise KeyError(f"unknown primitive {name!r}")
        self.steps += 1
        g = self.obs["glyphs"]
        prompt = self.prompt_open()
        self.obs["message"][:] = 0
        if self._zap:  # the keys after 'zap': the item letter, then the direction
            self._zap.append(name)
            if len(self._zap) == 3:
                self._freeze(g, self._zap[2])
                self._zap = []
        elif name == "zap":
            self._zap = [name]
        elif name in DIRECTIONS and not prompt:
            self._compass(g, name)
        self._set(self.obs)
        return 0.0

    def _freeze(self, g: np.ndarray, name: str) -> None:
        if name not in DIRECTIONS:
            return
        (dx, dy), (x, y) = DIRECTIONS[name], self.pos
        lava = set(self.lava)
        for j in range(1, RAY + 1):
            c = (x + j * dx, y + j * dy)
            if not (0 <= c[1] < g.shape[0] and 0 <= c[0] < g.shape[1]):
                break
            if c in lava:
                g[c[1], c[0]] = GLYPH_CMAP_OFF + S_ROOM
                self.terrain[c[1], c[0]] = S_ROOM
                self.edited = True

    def _compass(self, g: np.ndarray, name: str) -> None:
        (dx, dy), (x, y) = DIRECTIONS[name], self.pos
        t = (x + dx, y + dy)
        h, w = g.shape
        if not (0 <= t[1] < h and 0 <= t[0] < w):
            return
        if t in self.monsters:
            g[t[1], t[0]] = self._floor(*t)  # the blow is assumed to kill it
            self.edited = True
            return
        if int(g[t[1], t[0]]) == BOULDER_GLYPH:
            b = (t[0] + dx, t[1] + dy)
            if not (0 <= b[1] < h and 0 <= b[0] < w) or b in self.monsters or int(g[b[1], b[0]]) == BOULDER_GLYPH:
                return
            if b in set(self.water):
                g[b[1], b[0]] = GLYPH_CMAP_OFF + S_ROOM
                self.terrain[b[1], b[0]] = S_ROOM
            elif self.walkable[b[1], b[0]] or int(self.terrain[b[1], b[0]]) in (-1, S_STONE):
                g[b[1], b[0]] = BOULDER_GLYPH  # a never-seen cell (the boulder's shadow) is taken for floor
            else:
                return
            g[t[1], t[0]] = self._floor(*t)
            self._move_hero(g, t)
            self.edited = True
            return
        if self.can_move(name):
            self._move_hero(g, t)
            if int(self.terrain[t[1], t[0]]) == S_DNSTAIR:
                self.end = EndKind("terminated", "success")


class Potential:
    """``Phi = -`` the Dijkstra distance from the hero to the goal cells fixed at the decision (module docstring).

    The distance field is computed backwards from the goals once per distinct model map and reused while only the
    hero moves."""

    def __init__(self, bot: Bot):
        self._fields: dict[bytes, np.ndarray] = {}
        self.goals = sorted(bot.stairs)
        if not self.goals or not np.isfinite(self.field(bot)[bot.pos[1], bot.pos[0]]):
            self.goals, self._fields = sorted(bot.frontier | self.far_shore(bot)), {}
        self.base = self.field(bot)  # the field of every model whose map only the hero's moves changed

    @staticmethod
    def far_shore(bot: Bot) -> set[tuple[int, int]]:
        """Water and lava cells next to never-seen cells: what lies beyond a river is unexplored too."""
        cm = bot.cmap()
        unknown = cm == S_STONE
        pad = np.pad(unknown, 1)
        near = np.zeros_like(unknown)
        for dx, dy in DIRECTIONS.values():
            near |= pad[1 + dy:1 + dy + unknown.shape[0], 1 + dx:1 + dx + unknown.shape[1]]
        ys, xs = np.nonzero((np.isin(cm, list(WATER_CMAP)) | (cm == S_LAVA)) & near)
        return {(int(x), int(y)) for x, y in zip(xs, ys)}

    def cost_grid(self, bot: Bot) -> np.ndarray:
        cost = np.where(bot.walkable, 1.0, np.inf)
        cm = bot.cmap()
        cost[np.isin(cm, list(WATER_CMAP)) | (cm == S_LAVA)] = CROSS
        for x, y in bot.boulders:
            cost[y, x] = BOULDER_COST
        for x, y in bot.monsters:
            cost[y, x] = MONSTER_COST
        return cost

    def field(self, bot: Bot) -> np.ndarray:
        cost = self.cost_grid(bot)
        x, y = bot.pos
        cost[y, x] = 1.0
        key = cost.tobytes() + repr(sorted(bot.blocked)).encode()
        if key not in self._fields:
            self._fields[key] = self._solve(bot, cost)
        return self._fields[key]

    def _solve(self, bot: Bot, cost: np.ndarray) -> np.ndarray:
        h, w = cost.shape
        if not self.goals:
            return np.full((h, w), np.inf)
        legal = bot.legal_moves(np.isfinite(cost))
        rows, cols, vals = [], [], []
        idx = np.arange(h * w).reshape(h, w)
        for name, (dx, dy) in DIRECTIONS.items():
            ys, xs = np.nonzero(legal[name])
            tx, ty = xs + dx, ys + dy
            rows.append(idx[ty, tx])  # reversed edge: target -> source, weight = entering the target
            cols.append(idx[ys, xs])
            vals.append(cost[ty, tx])
        graph = csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(h * w, h * w))
        goals = [idx[gy, gx] for gx, gy in self.goals]
        return dijkstra(graph, indices=goals, min_only=True).reshape(h, w)

    def __call__(self, bot: Bot) -> float:
        if bot.success:
            return 0.0
        x, y = bot.pos
        d = float((self.field(bot) if getattr(bot, "edited", False) else self.base)[y, x])
        return -d if np.isfinite(d) else -1e6

    def reached(self, bot: Bot) -> bool:
        return bot.success or bot.pos in self.goals


def dry_run(bot: Bot, action: str, space: ActionSpace, potential: Potential, cap: int) -> tuple[float, int]:
    """(Phi after the action, model steps) for one action in a fresh :class:`ModelBot`."""
    model = ModelBot(bot)
    if not space.is_skill(action):
        model.step(action)
        return potential(model), 1
    gen = SKILLS[action].fn(model)
    try:
        item = next(gen)
        while model.steps < cap:
            for key in item if isinstance(item, tuple) else (item,):
                model.step(key)
                if model.done:
                    break
            if model.done or potential.reached(model):
                break
            item = gen.send(None)
    except StopIteration:
        pass
    finally:
        gen.close()
    return potential(model), model.steps


class GreedyController:
    """Greedy one-decision lookahead on the map model (module docstring); deterministic, nothing learned."""

    name = "greedy"

    def __init__(self, skill_step_cap: int = 50):
        self.cap = skill_step_cap
        self.last_scores: dict[str, tuple[float, float, int]] = {}
        self._memo: tuple | None = None

    def reset(self, rng) -> None:
        self.last_scores, self._memo = {}, None

    @staticmethod
    def state_key(bot: Bot, space: ActionSpace) -> tuple:
        """Everything the scores read: the map, the hero, the message, the Bot's memory and the action list."""
        return (bot.obs["glyphs"].tobytes(), bot.pos, bot.obs["message"].tobytes(), tuple(sorted(bot.blocked)),
                len(bot.visited), tuple(sorted(bot.searched.items())), bot.terrain.tobytes(), space.names)

    def scores(self, bot: Bot, space: ActionSpace) -> dict[str, tuple[float, float, int]]:
        """Per action: (progress per step, progress, model steps)."""
        potential = Potential(bot)
        now = potential(bot)
        out = {}
        for name in space.names:
            end, n = dry_run(bot, name, space, potential, self.cap)
            gain = end - now
            out[name] = (gain / max(1, n), gain, n)
        return out

    def act(self, bot: Bot, space: ActionSpace) -> Choice:
        key = self.state_key(bot, space)
        if self._memo is None or self._memo[0] != key:  # an unchanged state has the same scores (a stuck search)
            self._memo = (key, self.scores(bot, space))
        self.last_scores = self._memo[1]
        best = min(self.last_scores, key=lambda a: (-self.last_scores[a][0], -self.last_scores[a][1],
                                                    self.last_scores[a][2], a))
        if self.last_scores[best][1] > 0:
            return Choice(best)
        return Choice(next((a for a in FALLBACK if a in space), best))

    def observe(self, choice, outcome, bot) -> None:
        pass
