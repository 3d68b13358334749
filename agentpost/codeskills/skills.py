"""Code skills: Python procedures over the :class:`~agentpost.codeskills.bot.Bot` that issue many primitives.

Spec ``code-skills.md`` ("Skills and control flow"): a skill is a procedure ``f(bot) -> True/False`` that reads game
state and returns on completion, failure, interruption by a panic, or lack of progress; skills may call skills and
nested calls count (CodeHack's ``@strategy`` decorator increments the call counter and returns False at once while a
prompt is open). Here a skill is a *generator function*: it ``yield``s one primitive name, or a tuple of names for a
multi-key command such as ``("zap", "item_g", "east")``, and the runtime (:mod:`agentpost.codeskills.runtime`) sends
every key through :meth:`Bot.step`, so each primitive is counted and the runtime can stop the skill at its step cap,
on a panic, or at the end of the episode. ``return True/False`` is the skill's outcome.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Generator

from agentpost.codeskills.bot import CLOSED_DOORS, S_STONE, WATER_CMAP, Bot
from agentpost.codeskills.env import DIRECTIONS
from agentpost.registry import Registry

SkillGen = Generator["str | tuple[str, ...]", None, bool]


@dataclass(frozen=True)
class Skill:
    name: str
    fn: Callable[[Bot], SkillGen]
    description: str
    panics: bool


#: The skills an interface exposes, by name (a second skill under one name is refused).
SKILLS: Registry = Registry("skill")


def skill(description: str, *, expose: bool = True, panics: bool = True):
    """Register a skill. The wrapper counts the call (nested calls too), refuses while a prompt is open and tells
    the runtime whether panics may interrupt it (``fight`` expects to lose HP, so it turns them off)."""

    def deco(fn):
        @functools.wraps(fn)
        def run(bot: Bot, *args, **kwargs) -> SkillGen:
            bot.calls += 1
            if bot.prompt_open():
                return False
            bot.panic_guard.append(panics)
            try:
                return bool((yield from fn(bot, *args, **kwargs)))
            finally:
                bot.panic_guard.pop()

        if expose:
            SKILLS.register(fn.__name__)(Skill(fn.__name__, run, description, panics))
        return run

    return deco


# ---- navigation ---------------------------------------------------------------------------------------------
@skill("walk along a shortest known path to a cell (internal)", expose=False)
def travel_to(bot: Bot, goals, adjacent: bool = False, replans: int = 4) -> SkillGen:
    """Follow a BFS path; re-plan when a move did not happen; kick a locked door that blocks the way."""
    goals = set(goals)
    for _ in range(replans + 1):
        path = bot.path_to(goals, adjacent=adjacent)
        if path is None:
            return False
        if not path:
            return True
        for move in path:
            before = bot.pos
            ahead = (before[0] + DIRECTIONS[move][0], before[1] + DIRECTIONS[move][1])
            if int(bot.cmap()[ahead[1], ahead[0]]) in CLOSED_DOORS and "locked" in bot.message:
                yield ("kick", move)
            yield move
            if bot.pos == before:
                break  # re-plan from what is known now
        else:
            if (bot.pos in goals) if not adjacent else any(bot.direction_to(g) for g in goals):
                return True
    return False


@skill("walk to the down staircase if it is in view")
def goto_stairs(bot: Bot) -> SkillGen:
    if not bot.stairs:
        return False
    return (yield from travel_to(bot, bot.stairs))


@skill("walk to unexplored places until the staircase or a monster comes into view")
def explore_room(bot: Bot) -> SkillGen:
    moved = False
    while True:
        frontier = bot.frontier
        if not frontier or bot.path_to(frontier) is None:
            return moved
        had_stairs, had_monsters = bool(bot.stairs), len(bot.monsters)
        start = bot.steps
        ok = yield from travel_to(bot, frontier)
        moved |= bot.steps > start
        if not ok or bot.steps == start:
            return moved
        if (bot.stairs and not had_stairs) or len(bot.monsters) > had_monsters:
            return True


@skill("search the least-searched dead end or wall for hidden passages")
def search_hidden(bot: Bot, times: int = 5) -> SkillGen:
    walk, cm = bot.walkable, bot.cmap()
    spots = []
    for x, y in bot.reachable(bot.tree):
        walls = sum(1 for dx, dy in DIRECTIONS.values()
                    if 0 <= y + dy < walk.shape[0] and 0 <= x + dx < walk.shape[1] and not walk[y + dy, x + dx]
                    and cm[y + dy, x + dx] != 34)
        if walls:
            spots.append((bot.searched[(x, y)], -walls, (x, y)))
    if not spots:
        return False
    least = min(s[0] for s in spots)
    best = min(s[1] for s in spots if s[0] == least)
    targets = {s[2] for s in spots if s[0] == least and s[1] == best}
    if not (yield from travel_to(bot, targets)):
        return False
    bot.searched[bot.pos] += 1
    for _ in range(times):
        yield "search"
    return True


# ---- interaction --------------------------------------------------------------------------------------------
@skill("attack the nearest visible monster until it is gone", panics=False)
def fight(bot: Bot, max_swings: int = 20) -> SkillGen:
    fought = False
    for _ in range(max_swings):
        if not bot.monsters:
            return fought
        near = [m for m in bot.monsters if bot.direction_to(m)]
        if not near:
            if not (yield from travel_to(bot, bot.monsters, adjacent=True)):
                return fought
            continue
        target = near[0]
        yield bot.direction_to(target)  # moving into a monster attacks it
        fought = True
        if bot.prompt_open() and "Really attack" in bot.message:
            yield "northwest"  # 'y'
    return fought


@skill("walk to the nearest visible object and pick it up")
def pick_up(bot: Bot) -> SkillGen:
    items = [o for o in bot.objects if o != bot.pos]
    if items and not (yield from travel_to(bot, items)):
        return False
    if not items and "here" not in bot.message:
        return False
    before = len(bot.inventory)
    yield "pickup"
    return len(bot.inventory) > before


@skill("zap a wand of cold or frost horn across lava to freeze it (needs the wand in the inventory)")
def freeze_lava(bot: Bot, reach: int = 4) -> SkillGen:
    letter = bot.item_letter("wand")
    key = bot.key_primitive(letter) if letter else None
    if key is None or not bot.lava:
        return False
    walk, lava = bot.walkable, set(bot.lava)
    spots = {}
    for x, y in bot.tree:
        for name, (dx, dy) in DIRECTIONS.items():
            for j in range(1, reach + 1):
                cell = (x + j * dx, y + j * dy)
                if cell in lava:
                    spots.setdefault((x, y), name)
                    break
                if not (0 <= cell[1] < walk.shape[0] and 0 <= cell[0] < walk.shape[1]) or not walk[cell[1], cell[0]]:
                    break
    if not spots or not (yield from travel_to(bot, spots)):
        return False
    if bot.pos not in spots:
        return False
    before = len(bot.lava)
    yield ("zap", key, spots[bot.pos])
    return len(bot.lava) < before


ORTHOGONAL = ("east", "west", "north", "south")


def boulder_pushes(bot: Bot) -> list[tuple[int, int, tuple[int, int], str, int, tuple[int, int]]]:
    """Every straight push of a visible boulder into water that the known map allows, best first.

    A plan is (water cells still beyond the one it fills, moves to stand behind the boulder + pushes, boulder, compass
    direction, pushes, the water cell it fills). The boulder's line must run over floor or never-seen cells (a
    boulder's shadow; no other boulder, no monster) to a water cell in view, and the cell behind it must be reachable. Plans that finish a crossing (no water
    beyond) come first, so a two-wide river is crossed by pushing the second boulder along a line already half filled.
    """
    water, dist = set(bot.water), bot.distances
    walk = bot.walkable | (bot.terrain == -1) | (bot.terrain == S_STONE)
    blocked = set(bot.boulders) | set(bot.monsters)
    h, w = walk.shape
    plans = []
    for bx, by in bot.boulders:
        for name in ORTHOGONAL:
            dx, dy = DIRECTIONS[name]
            behind = (bx - dx, by - dy)
            if behind not in dist:
                continue
            x, y, pushes = bx + dx, by + dy, 1
            while 0 <= y < h and 0 <= x < w and (x, y) not in water and walk[y, x] and (x, y) not in blocked:
                x, y, pushes = x + dx, y + dy, pushes + 1
            if (x, y) not in water:
                continue
            beyond, cx, cy = 0, x + dx, y + dy
            while (cx, cy) in water:
                beyond, cx, cy = beyond + 1, cx + dx, cy + dy
            plans.append((beyond, dist[behind] + pushes, (bx, by), name, pushes, (x, y)))
    return sorted(plans)


@skill("push a boulder in a straight line into water to fill it (a way across a river)")
def push_boulder(bot: Bot) -> SkillGen:
    """Walk behind the best boulder (:func:`boulder_pushes`) and push it until it drops into the water; True when
    the water cell is filled (NetHack: 9 times in 10 for water, otherwise the boulder sinks without a trace)."""
    plans = boulder_pushes(bot)
    if not plans:
        return False
    _, _, (bx, by), name, pushes, (wx, wy) = plans[0]
    dx, dy = DIRECTIONS[name]
    if not (yield from travel_to(bot, {(bx - dx, by - dy)})):
        return False
    for _ in range(pushes):
        before = bot.pos
        yield name
        if bot.pos == before:
            return False  # the boulder did not move (something unseen behind it)
    return int(bot.cmap()[wy, wx]) not in WATER_CMAP


def first_primitive(bot: Bot, skill_fn) -> tuple[str, ...] | None:
    """The command a skill would issue first from the current state, without stepping or counting.

    Used by the scripted controller in the primitive-only interface: the same policy, one key per decision."""
    calls, guard = bot.calls, list(bot.panic_guard)
    gen = skill_fn(bot)
    try:
        item = next(gen)
    except StopIteration:
        item = None
    finally:
        gen.close()
        bot.calls, bot.panic_guard = calls, guard
    if item is None:
        return None
    return item if isinstance(item, tuple) else (item,)
