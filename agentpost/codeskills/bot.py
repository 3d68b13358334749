"""The Bot API that skills are written against: one primitive at a time, parsed game state, BFS navigation.

Spec ``code-skills.md`` ("Skills and control flow"): a skill reads structured game state (status line, glyph map,
messages, inventory, a pathfinder) and issues primitive steps. This is the project's own runtime, written from the
spec's description (CodeHack is reference only): glyph classes follow NetHack 3.6's glyph layout as exposed by
``nle.nethack`` (``GLYPH_*_OFF``), cmap indices follow NetHack 3.6 ``defsym.h`` order.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from functools import cached_property

import numpy as np

from agentpost.codeskills.env import DIRECTIONS, PRIMITIVE_KEYS, EndKind, classify_end

# NetHack 3.6 glyph layout (nle.nethack.GLYPH_*_OFF, checked against nle 1.3.0 in the unit tests).
GLYPH_PET_OFF, GLYPH_INVIS_OFF, GLYPH_DETECT_OFF, GLYPH_BODY_OFF = 381, 762, 763, 1144
GLYPH_RIDDEN_OFF, GLYPH_OBJ_OFF, GLYPH_CMAP_OFF, GLYPH_EXPLODE_OFF = 1525, 1906, 2359, 2446

# cmap indices (defsym.h): 0 stone, 12 doorless doorway, 13/14 open doors, 15/16 closed doors, 19 floor,
# 20 dark floor, 21/22 corridors, 23/24 stairs up/down, 25/26 ladders, 27-31 furniture, 32 pool/moat, 33 ice,
# 34 lava, 41 water (the des-map 'W' of MiniHack's River tasks).
S_STONE, S_NDOOR, S_ROOM, S_DNSTAIR, S_POOL, S_LAVA, S_WATER = 0, 12, 19, 24, 32, 34, 41
WATER_CMAP = frozenset({S_POOL, S_WATER})
#: The boulder's glyph (object 447 in NetHack 3.6's objects.c order, shown as '`'; checked in the unit tests).
BOULDER_GLYPH = 1906 + 447
DOORS = frozenset({13, 14, 15, 16})
CLOSED_DOORS = frozenset({15, 16})
WALKABLE_CMAP = frozenset({12, 13, 14, 15, 16, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 33})

MAX_GLYPH = 5976
_WALK_LUT = np.zeros(MAX_GLYPH + 1, dtype=bool)
_WALK_LUT[[GLYPH_CMAP_OFF + c for c in WALKABLE_CMAP]] = True
_WALK_LUT[GLYPH_BODY_OFF:GLYPH_RIDDEN_OFF] = True  # corpses lie on the floor
_WALK_LUT[GLYPH_OBJ_OFF:GLYPH_CMAP_OFF] = True  # objects lie on the floor
_WALK_LUT[BOULDER_GLYPH] = False  # except a boulder: walking into it pushes it (push_boulder does that on purpose)
_WALK_LUT[GLYPH_PET_OFF:GLYPH_INVIS_OFF] = True  # pets swap places with the hero
_DOOR_LUT = np.zeros(100, dtype=bool)
_DOOR_LUT[list(DOORS)] = True

_PROMPT = re.compile(r"(\[[^\]]*\]\s*$)|(In what direction\?\s*$)|(\?\s*$)")
_NAME_BY_KEY = {key: name for name, key in PRIMITIVE_KEYS.items()}


class Bot:
    """Live view of one MiniHack episode plus the counters every interface shares.

    ``step(name)`` sends one primitive and is the *only* way anything reaches the environment, so every primitive a
    skill issues is counted in :attr:`steps`. :attr:`calls` counts every skill call (nested ones too) and every
    primitive decision (CodeHack's ``@strategy`` counter, what counts is left open by the paper:
    ``budget_counts="all_calls"``).
    """

    #: Parsed views of one observation, dropped whenever a new one arrives.
    CACHED = ("chars", "glyphs", "message", "walkable", "frontier", "monsters", "objects", "stairs", "lava", "water",
              "boulders", "inventory", "tree", "distances", "cmap_grid")

    def __init__(self, env, obs: dict):
        self.env = env
        self._actions = {name: i for i, name in enumerate(PRIMITIVE_KEYS)}
        self.steps = 0
        self.calls = 0
        self.end = EndKind("running", "running")
        self.last_reward = 0.0
        self.visited: set[tuple[int, int]] = set()
        self.searched: Counter = Counter()
        self.blocked: set[tuple[int, int, str]] = set()  # (x, y, move) that failed: boulders, squeezes, ...
        self.terrain = np.full(obs["glyphs"].shape, -1, dtype=np.int64)  # last seen cmap per cell (under the hero too)
        self.panic_guard: list[bool] = []  # one entry per running skill: may a panic interrupt it?
        self._set(obs)

    # ---- stepping -------------------------------------------------------------------------------------------
    def step(self, name: str) -> float:
        """Send one primitive (by name) and return its reward; refuses once the episode has ended."""
        if self.done:
            raise RuntimeError(f"episode already ended ({self.end.reason}); cannot step {name!r}")
        if name not in self._actions:
            raise KeyError(f"unknown primitive {name!r}; primitives: {list(PRIMITIVE_KEYS)}")
        before = self.pos
        is_move = name in DIRECTIONS and not self.prompt_open()  # a compass key answering a prompt is no move
        if is_move:
            ax, ay = before[0] + DIRECTIONS[name][0], before[1] + DIRECTIONS[name][1]
            exempt = (ax, ay) in self.monsters or int(self.terrain[ay, ax]) in CLOSED_DOORS  # attacks, doors
        obs, reward, terminated, truncated, info = self.env.step(self._actions[name])
        self.steps += 1
        self.last_reward = float(reward)
        self.end = classify_end(terminated, truncated, info)
        self._set(obs)
        if is_move and not self.done and self.pos == before and not exempt and not self.prompt_open():
            self.blocked.add((*before, name))  # remembered so that navigation stops bumping into it
        return self.last_reward

    def _set(self, obs: dict) -> None:
        self.obs = obs
        for attr in self.CACHED:
            self.__dict__.pop(attr, None)
        if not self.done:
            self.visited.add(self.pos)
            self._observe_terrain()

    def _observe_terrain(self) -> None:
        """Remember the terrain of every square the glyphs show (kept when a monster or item later covers it)."""
        cm = self.cmap()
        seen = cm >= 0
        self.terrain[seen] = cm[seen]

    @property
    def done(self) -> bool:
        return self.end.kind != "running"

    @property
    def success(self) -> bool:
        return self.end.reason == "success"

    # ---- parsed state ---------------------------------------------------------------------------------------
    @property
    def pos(self) -> tuple[int, int]:
        return int(self.obs["blstats"][0]), int(self.obs["blstats"][1])

    @property
    def hp(self) -> int:
        return int(self.obs["blstats"][10])

    @cached_property
    def chars(self) -> np.ndarray:
        return self.obs["chars"]

    @cached_property
    def glyphs(self) -> np.ndarray:
        return self.obs["glyphs"].astype(np.int64)

    @cached_property
    def message(self) -> str:
        return bytes(self.obs["message"]).decode("latin-1").rstrip("\x00").strip()

    def prompt_open(self) -> bool:
        """A y/n, item or direction question is waiting for an answer (read from the message line)."""
        return bool(self.message) and _PROMPT.search(self.message) is not None

    @cached_property
    def inventory(self) -> dict[str, str]:
        """Inventory letter -> item text."""
        letters = bytes(self.obs["inv_letters"]).decode("latin-1")
        items = {}
        for letter, row in zip(letters, self.obs["inv_strs"]):
            if letter == "\x00":
                break
            items[letter] = bytes(row).decode("latin-1").rstrip("\x00")
        return items

    @cached_property
    def cmap_grid(self) -> np.ndarray:
        g = self.glyphs
        return np.where((g >= GLYPH_CMAP_OFF) & (g < GLYPH_EXPLODE_OFF), g - GLYPH_CMAP_OFF, -1)

    def cmap(self) -> np.ndarray:
        """cmap index per cell, -1 where the glyph is not a map feature."""
        return self.cmap_grid

    @cached_property
    def walkable(self) -> np.ndarray:
        """Cells a move may enter: known floor-like features, objects lying on the floor, pets, the hero."""
        walk = _WALK_LUT[self.glyphs]
        x, y = self.pos
        walk[y, x] = True
        return walk

    @cached_property
    def monsters(self) -> list[tuple[int, int]]:
        """(x, y) of visible non-pet monsters other than the hero."""
        g = self.glyphs
        ys, xs = np.nonzero(((g >= 0) & (g < GLYPH_PET_OFF)) | ((g >= GLYPH_DETECT_OFF) & (g < GLYPH_BODY_OFF)))
        return [(int(x), int(y)) for x, y in zip(xs, ys) if (int(x), int(y)) != self.pos]

    @cached_property
    def objects(self) -> list[tuple[int, int]]:
        """(x, y) of visible objects that can be picked up (boulders cannot)."""
        g = self.glyphs
        ys, xs = np.nonzero((((g >= GLYPH_OBJ_OFF) & (g < GLYPH_CMAP_OFF)) | ((g >= GLYPH_BODY_OFF) & (g < GLYPH_RIDDEN_OFF)))
                            & (g != BOULDER_GLYPH))
        return [(int(x), int(y)) for x, y in zip(xs, ys)]

    @cached_property
    def stairs(self) -> list[tuple[int, int]]:
        ys, xs = np.nonzero(self.cmap() == S_DNSTAIR)
        return [(int(x), int(y)) for x, y in zip(xs, ys)]

    @cached_property
    def lava(self) -> list[tuple[int, int]]:
        ys, xs = np.nonzero(self.cmap() == S_LAVA)
        return [(int(x), int(y)) for x, y in zip(xs, ys)]

    @cached_property
    def water(self) -> list[tuple[int, int]]:
        """(x, y) of visible pools, moats and water (a boulder pushed in fills one, 9 times in 10)."""
        ys, xs = np.nonzero(np.isin(self.cmap(), list(WATER_CMAP)))
        return [(int(x), int(y)) for x, y in zip(xs, ys)]

    @cached_property
    def boulders(self) -> list[tuple[int, int]]:
        ys, xs = np.nonzero(self.glyphs == BOULDER_GLYPH)
        return [(int(x), int(y)) for x, y in zip(xs, ys)]

    @cached_property
    def frontier(self) -> set[tuple[int, int]]:
        """Unvisited walkable cells with an unexplored (blank stone) neighbour: where exploring reveals more."""
        unknown = self.cmap() == S_STONE
        pad = np.pad(unknown, 1)
        near = np.zeros_like(unknown)
        for dx, dy in DIRECTIONS.values():
            near |= pad[1 + dy:1 + dy + unknown.shape[0], 1 + dx:1 + dx + unknown.shape[1]]
        ys, xs = np.nonzero(self.walkable & near)
        return {(int(x), int(y)) for x, y in zip(xs, ys)} - self.visited

    def item_letter(self, word: str) -> str | None:
        """Inventory letter of the first item whose text contains ``word``."""
        return next((k for k, v in self.inventory.items() if word in v), None)

    @staticmethod
    def key_primitive(letter: str) -> str | None:
        """The primitive that types ``letter`` (compass keys answer prompts too), or None if none does."""
        return _NAME_BY_KEY.get(ord(letter))

    # ---- navigation -----------------------------------------------------------------------------------------
    def legal_moves(self, walk: np.ndarray) -> dict[str, np.ndarray]:
        """Per compass move, where it is legal: NetHack's rules - no diagonal move into or out of a doorway
        with a door, no diagonal squeeze between two rock/wall cells - and no move that already failed from that
        cell (a stuck boulder, say)."""
        h, w = walk.shape
        door = _DOOR_LUT[np.clip(self.terrain, 0, 99)] & (self.terrain >= 0)

        def shifted(a, dx, dy):  # out[y, x] = a[y + dy, x + dx], False outside the map
            out = np.zeros_like(a)
            out[max(0, -dy):h - max(0, dy), max(0, -dx):w - max(0, dx)] = a[max(0, dy):h - max(0, -dy) or None,
                                                                          max(0, dx):w - max(0, -dx) or None]
            return out

        moves = {}
        for name, (dx, dy) in DIRECTIONS.items():
            ok = shifted(walk, dx, dy)
            if dx and dy:
                ok &= ~door & ~shifted(door, dx, dy) & (shifted(walk, dx, 0) | shifted(walk, 0, dy))
            moves[name] = ok
        for x, y, name in self.blocked:
            moves[name][y, x] = False
        return moves

    def can_move(self, name: str, walk: np.ndarray | None = None) -> bool:
        """Whether the compass move ``name`` from the hero's cell is legal: :meth:`legal_moves` at one cell."""
        walk = self.walkable if walk is None else walk
        (dx, dy), (x, y) = DIRECTIONS[name], self.pos
        h, w = walk.shape
        tx, ty = x + dx, y + dy
        if not (0 <= tx < w and 0 <= ty < h) or not walk[ty, tx] or (x, y, name) in self.blocked:
            return False
        if dx and dy:
            def door(cx, cy):
                t = int(self.terrain[cy, cx])
                return 0 <= t < 100 and bool(_DOOR_LUT[t])

            if door(x, y) or door(tx, ty) or not (walk[y, tx] or walk[ty, x]):
                return False
        return True

    @cached_property
    def tree(self) -> dict:
        """Breadth-first search tree from the hero over known walkable cells (monsters block): cell -> parent."""
        walk = self.walkable.copy()
        for mx, my in self.monsters:
            walk[my, mx] = False
        h, w = walk.shape
        legal = [(name, dx + dy * w, moves.ravel().tolist())
                 for (name, moves), (dx, dy) in zip(self.legal_moves(walk).items(), DIRECTIONS.values())]
        x0, y0 = self.pos
        start = y0 * w + x0
        prev = {start: None}
        queue = deque([start])
        while queue:
            i = queue.popleft()
            for name, off, ok in legal:
                if ok[i] and (j := i + off) not in prev:
                    prev[j] = (i, name)
                    queue.append(j)
        return {(i % w, i // w): (None if p is None else ((p[0] % w, p[0] // w), p[1])) for i, p in prev.items()}

    @cached_property
    def distances(self) -> dict:
        """Moves from the hero to every cell of :attr:`tree` (its BFS depth)."""
        dist = {}
        for cell, parent in self.tree.items():  # BFS order: a parent comes before its children
            dist[cell] = 0 if parent is None else dist[parent[0]] + 1
        return dist

    def path_to(self, goals, *, adjacent: bool = False) -> list[str] | None:
        """Shortest list of compass moves to any goal cell (or to a cell next to one with ``adjacent``).

        ``[]`` when already there, ``None`` when unreachable; ties go to the goal the search reaches first."""
        targets = {(gx + dx, gy + dy) for gx, gy in goals for dx, dy in DIRECTIONS.values()} if adjacent else set(goals)
        tree = self.tree
        best = next((c for c in tree if c in targets), None)  # dict order = BFS order
        if best is None:
            return None
        path = []
        while tree[best] is not None:
            best, move = tree[best]
            path.append(move)
        return path[::-1]

    def reachable(self, cells) -> set:
        """The subset of ``cells`` that a walk can reach now."""
        tree = self.tree
        return {c for c in cells if c in tree}

    def direction_to(self, target: tuple[int, int]) -> str | None:
        """Compass name from the hero to an adjacent ``target`` (None if not adjacent)."""
        d = (target[0] - self.pos[0], target[1] - self.pos[1])
        return next((name for name, v in DIRECTIONS.items() if v == d), None)

    # ---- text rendering ------------------------------------------------------------------------------------
    def map_text(self) -> str:
        """The remembered map cropped to its non-blank bounding box (one line per row)."""
        rows = [bytes(r).decode("latin-1") for r in self.chars]
        used = [i for i, r in enumerate(rows) if r.strip()]
        if not used:
            return ""
        lo = min(len(r) - len(r.lstrip()) for r in rows if r.strip())
        return "\n".join(rows[i][lo:].rstrip() for i in range(used[0], used[-1] + 1))

    def status_text(self) -> str:
        b = self.obs["blstats"]
        return f"HP {int(b[10])}/{int(b[11])}, dungeon level {int(b[12])}, position x={int(b[0])} y={int(b[1])}"
