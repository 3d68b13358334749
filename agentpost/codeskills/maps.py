"""Hand-made MiniHack maps (des files) on which each skill has a known primitive count (mechanism tests, notebook).

Coordinates in a des MAP are relative to the map's top-left corner; ``BRANCH`` places the hero. Each entry gives the
des text, the MiniHack task that hosts it, constructor options and the expected count, derived by hand below.
"""

from __future__ import annotations

_HEAD = 'MAZE: "mylevel", \' \'\nFLAGS:noteleport,hardfloor\nGEOMETRY:center,center\nMAP\n'


def _des(rows: list[str], body: str, lit: bool = True) -> str:
    w, h = len(rows[0]) - 1, len(rows) - 1
    region = f'REGION:(0,0,{w},{h}),{"lit" if lit else "unlit"},"ordinary"\n'
    return _HEAD + "\n".join(rows) + "\nENDMAP\n" + region + body


#: Lit 5-wide corridor room, hero at x=1, stairs at x=5: ``goto_stairs`` takes 4 east moves and wins.
STAIRS_AHEAD = _des(["-------", "|.....|", "-------"], "BRANCH:(1,1,1,1),(0,0,0,0)\nSTAIR:(5,1),down\n")

#: The same room unlit and two squares longer: the hero sees only adjacent squares, so ``explore_room`` walks
#: east one frontier square at a time and stops when the stairs (x=7) come into view from x=6: 5 moves;
#: ``goto_stairs`` then takes 1.
DARK_CORRIDOR = _des(["---------", "|.......|", "---------"], "BRANCH:(1,1,1,1),(0,0,0,0)\nSTAIR:(7,1),down\n",
                     lit=False)

#: An apple two squares east of the hero (no autopickup): ``pick_up`` = 2 moves + 1 pickup = 3 primitives.
APPLE = _des(["-------", "|.....|", "-------"],
             "BRANCH:(1,1,1,1),(0,0,0,0)\nOBJECT:('%',\"apple\"),(3,1)\nSTAIR:(5,1),down\n")

#: A wand of cold on the hero's square (autopickup takes it at the start) and a lava square two east, in a room
#: long enough that the ray (range 7-13) cannot bounce back: ``freeze_lava`` = zap + item letter + direction
#: = 3 primitives and the lava is gone; ``goto_stairs`` then walks 13 squares east.
LAVA = _des(["-----------------", "|..L............|", "-----------------"],
            "BRANCH:(1,1,1,1),(0,0,0,0)\nOBJECT:('/',\"cold\"),(1,1)\nSTAIR:(14,1),down\n")

#: An asleep newt next to the hero: ``fight`` attacks until it is gone.
NEWT = _des(["-------", "|.....|", "-------"],
            "BRANCH:(1,1,1,1),(0,0,0,0)\nMONSTER:(':',\"newt\"),(2,1),asleep\nSTAIR:(5,1),down\n")

#: A river one square wide (x=5, 'W' water, which blocks sight) across a 3-row lit room; the hero at (1,1), a
#: boulder at (3,2) whose shadow hides (4,2): ``push_boulder`` = 1 move southeast to stand behind it + 2 pushes east
#: (the boulder moves 3 -> 4 -> 5 and fills the water; the hero ends at x=4) = 3 primitives; ``goto_stairs`` then
#: walks the 3 squares to the stairs at x=7 over the filled square.
RIVER = _des(["----------", "|....W...|", "|....W...|", "|....W...|", "----------"],
             "BRANCH:(1,1,1,1),(0,0,0,0)\nOBJECT:('`',\"boulder\"),(3,2)\nSTAIR:(7,2),down\n")

#: An empty lit room without stairs or objects: skills that need a target take zero primitives (no progress).
EMPTY = _des(["-------", "|.....|", "-------"], "BRANCH:(1,1,1,1),(0,0,0,0)\n")

NAVIGATION_TASK = "MiniHack-Navigation-Custom-v0"
SKILL_TASK = "MiniHack-Skill-Custom-v0"
