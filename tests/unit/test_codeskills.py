"""Mechanism tests for agentpost.codeskills on real MiniHack (spec code-skills.md, "Mechanism tests")."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("minihack")

from agentpost.codeskills import maps
from agentpost.codeskills.bot import Bot
from agentpost.codeskills.controllers import (
    LMController,
    RandomController,
    ScriptedController,
    join_prompt,
    parse_action,
    prompt_parts,
    render_prompt,
)
from agentpost.codeskills.env import (
    ABORTED,
    DEATH,
    PRIMITIVE_KEYS,
    TASK_SUCCESSFUL,
    classify_end,
    make_env,
    seeded_reset,
)
from agentpost.codeskills.runtime import Budgets, action_space, discounted, run_decision, run_episode
from agentpost.codeskills.skills import SKILLS

NO_PANICS = ()


def fresh(des, task=maps.NAVIGATION_TASK, seed=7, **opt):
    env = make_env(task, des_file=des, **opt)
    obs, _ = seeded_reset(env, seed)
    return Bot(env, obs)


def decide(bot, action, interface="skill", budgets=Budgets(), limit=1000):
    return run_decision(bot, action_space(interface), action, budgets, limit, NO_PANICS)


def episode(task, controller, interface, budgets=Budgets(), seed=1, **kw):
    env = make_env(task, **kw.pop("env", {}))
    return run_episode(
        env,
        controller,
        action_space(interface),
        budgets,
        env_seed=seed,
        rng=np.random.default_rng(seed),
        task=task,
        interface=interface,
        **kw,
    )


def test_glyph_layout_matches_nle():
    from nle import nethack

    from agentpost.codeskills import bot as b

    for name in (
        "GLYPH_PET_OFF",
        "GLYPH_INVIS_OFF",
        "GLYPH_DETECT_OFF",
        "GLYPH_BODY_OFF",
        "GLYPH_RIDDEN_OFF",
        "GLYPH_OBJ_OFF",
        "GLYPH_CMAP_OFF",
        "GLYPH_EXPLODE_OFF",
        "MAX_GLYPH",
    ):
        assert getattr(b, name) == getattr(nethack, name), name


# ---- environment: seeding, termination vs truncation -------------------------------------------------------
def test_explicit_seeding_gives_identical_maps():
    env = make_env("MiniHack-Room-Random-5x5-v0")
    maps_ = [seeded_reset(env, 42)[0]["chars"].copy() for _ in range(3)]
    assert all(np.array_equal(maps_[0], m) for m in maps_[1:])
    others = [seeded_reset(env, s)[0]["chars"].copy() for s in range(43, 49)]
    assert any(not np.array_equal(maps_[0], m) for m in others)  # the seed really drives the level


def test_four_southeast_moves_win_room_5x5():
    env = make_env("MiniHack-Room-5x5-v0")
    seeded_reset(env, 0)
    bot = Bot(env, seeded_reset(env, 0)[0])
    rewards = [bot.step("southeast") for _ in range(4)]
    assert rewards == [0.0, 0.0, 0.0, 1.0] and bot.success and bot.end.kind == "terminated"


def test_step_limit_arrives_as_terminated_and_is_classified_truncated():
    env = make_env("MiniHack-Room-15x15-v0", max_episode_steps=5)
    seeded_reset(env, 3)
    wall = list(PRIMITIVE_KEYS).index("search")
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step(wall)
    assert (terminated, truncated, int(info["end_status"])) == (True, False, ABORTED)  # NLE's own signalling
    assert classify_end(terminated, truncated, info).kind == "truncated"
    res = episode(
        "MiniHack-Room-15x15-v0",
        ScriptedController(),
        "primitive",
        env={"max_episode_steps": 5},
        budgets=Budgets(max_decisions=100),
    )
    assert (res.end_kind, res.stop_reason, res.primitive_steps, res.success) == (
        "truncated",
        "env_step_limit",
        5,
        False,
    )


def test_classify_end_table():
    assert classify_end(True, False, {"end_status": TASK_SUCCESSFUL}).reason == "success"
    assert classify_end(True, False, {"end_status": DEATH}).kind == "terminated"
    assert classify_end(False, True, {"end_status": 0}).kind == "truncated"
    assert classify_end(False, False, {"end_status": 0}).kind == "running"


def test_bad_task_and_budgets_fail_clearly():
    with pytest.raises(ValueError, match="unknown MiniHack task"):
        make_env("MiniHack-NoSuchTask-v0")
    with pytest.raises(ValueError, match="max_decisions"):
        Budgets(max_decisions=0)
    with pytest.raises(ValueError, match="counts"):
        Budgets(counts="everything")
    with pytest.raises(ValueError, match="interface"):
        action_space("hybrid")


# ---- skills on hand-made maps: known primitive counts ----------------------------------------------------
def test_goto_stairs_takes_four_moves():
    bot = fresh(maps.STAIRS_AHEAD)
    out = decide(bot, "goto_stairs")
    assert (out.steps, out.result, bot.success) == (4, "episode_end", True)


def test_explore_room_then_goto_stairs_in_the_dark():
    bot = fresh(maps.DARK_CORRIDOR)
    assert not bot.stairs
    out = decide(bot, "explore_room")
    assert (out.steps, out.result, bool(bot.stairs)) == (5, "done", True)
    out = decide(bot, "goto_stairs")
    assert (out.steps, bot.success) == (1, True)


def test_pick_up_takes_two_moves_and_one_pickup():
    bot = fresh(maps.APPLE, maps.SKILL_TASK)
    out = decide(bot, "pick_up")
    assert (out.steps, out.result) == (3, "done") and any("apple" in v for v in bot.inventory.values())


def test_freeze_lava_is_one_three_key_command_then_the_way_is_open():
    bot = fresh(maps.LAVA, maps.SKILL_TASK, autopickup=True)
    assert bot.item_letter("wand") and bot.lava and bot.path_to(bot.stairs) is None
    out = decide(bot, "freeze_lava")
    assert (out.steps, out.result, bot.lava) == (3, "done", [])
    out = decide(bot, "goto_stairs")
    assert (out.steps, bot.success) == (13, True)


def test_boulder_glyph_matches_nle_and_a_boulder_is_neither_floor_nor_an_item():
    from agentpost.codeskills.bot import BOULDER_GLYPH

    bot = fresh(maps.RIVER)
    ((bx, by),) = bot.boulders
    assert chr(int(bot.chars[by, bx])) == "`" and int(bot.glyphs[by, bx]) == BOULDER_GLYPH
    assert not bot.walkable[by, bx] and (bx, by) not in bot.objects


def test_push_boulder_is_one_move_and_two_pushes_then_the_river_is_crossed():
    """maps.RIVER: 1 move southeast + 2 pushes east fill the water square (NetHack: 'Now you can cross it!')."""
    bot = fresh(maps.RIVER)
    ((bx, by),) = bot.boulders
    filled = (bx + 2, by)
    assert filled in bot.water and bot.path_to(bot.stairs or [(bx + 4, by)]) is None
    out = decide(bot, "push_boulder")
    assert (out.steps, out.result) == (3, "done") and "cross it" in bot.message
    assert filled not in bot.water and bot.pos == (bx + 1, by) and not bot.boulders
    walked = decide(bot, "explore_room").steps  # onto the filled square, whence the stairs come into view
    walked += decide(bot, "goto_stairs").steps
    assert (walked, bot.success) == (3, True)  # x = 4 -> 7


def test_push_boulder_crosses_minihack_river_narrow():
    """The real two-wide River-Narrow task (instance 420000): the scripted skill policy pushes one boulder into each
    water column of one row and walks over them to the stairs; without push_boulder it cannot cross."""
    env = make_env("MiniHack-River-Narrow-v0")
    res = run_episode(
        env,
        ScriptedController(),
        action_space("skill"),
        Budgets(),
        env_seed=420000,
        rng=np.random.default_rng(0),
        keep_trace=True,
    )
    pushes = [t["outcome"].result for t in res.trace if t["choice"].action == "push_boulder"]
    assert res.success and pushes == ["done", "done"]
    without = [s for s in action_space("skill").skills if s != "push_boulder"]
    from agentpost.codeskills.runtime import ActionSpace

    res = run_episode(
        env, ScriptedController(), ActionSpace(skills=without), Budgets(), env_seed=420000, rng=np.random.default_rng(0)
    )
    assert not res.success


def test_task_instructions_are_per_task_family_and_reach_the_prompt():
    from agentpost.codeskills.controllers import task_instruction

    assert "boulders" in task_instruction("MiniHack-River-Narrow-v0") == task_instruction("River-v0")
    assert "wand" in task_instruction("Quest-Easy-v0") and task_instruction("MiniHack-Sokoban1a-v0") == ""
    text = render_prompt(fresh(maps.STAIRS_AHEAD), action_space("skill"), [], task="River-Narrow-v0")
    assert "Task: River-Narrow-v0 - The staircase lies across a river" in text


def test_fight_kills_an_adjacent_newt_within_its_swing_cap():
    bot = fresh(maps.NEWT)
    assert len(bot.monsters) == 1
    out = decide(bot, "fight")
    assert out.result == "done" and 1 <= out.steps <= 20 and not bot.monsters


def test_skills_without_a_target_take_zero_steps():
    bot = fresh(maps.EMPTY)
    for name in ("goto_stairs", "pick_up", "fight", "freeze_lava"):
        out = decide(bot, name)
        assert (out.steps, out.result) == (0, "failed"), name
    assert decide(bot, "search_hidden").steps == 5


def test_skill_cap_stops_a_skill_exactly():
    bot = fresh(maps.STAIRS_AHEAD)
    out = decide(bot, "goto_stairs", budgets=Budgets(skill_step_cap=3))
    assert (out.steps, out.result, bot.steps, bot.done) == (3, "cap", 3, False)


def test_open_prompt_makes_every_skill_return_false_without_stepping():
    bot = fresh(maps.LAVA, maps.SKILL_TASK, autopickup=True)
    decide(bot, "zap", interface="mixed")
    assert bot.prompt_open() and "zap" in bot.message
    for name in SKILLS:
        assert decide(bot, name).steps == 0, name


# ---- runtime: quantities and budgets -------------------------------------------------------------------
def test_discounted_skill_reward_worked_example():
    assert discounted([0, 0, 1], 0.99) == pytest.approx(0.9801)


def test_string_action_space_rejects_integers():
    space = action_space("mixed")
    assert "explore_room" in space and "north" in space and "fly" not in space
    with pytest.raises(TypeError):
        3 in space  # noqa: B015
    assert len(action_space("primitive")) == len(PRIMITIVE_KEYS)


@pytest.mark.claim("codeskills", "C2")
def test_decisions_equal_primitive_steps_in_primitive_only_mode_and_bound_them_otherwise():
    for interface in ("primitive", "skill", "mixed"):
        for seed in range(3):
            r = episode("MiniHack-Quest-Easy-v0", RandomController(), interface, seed=seed)
            assert r.decisions <= r.primitive_steps + r.zero_step_decisions
            if interface == "primitive":
                assert r.decisions == r.primitive_steps


@pytest.mark.claim("codeskills", "C2")
def test_one_skill_decision_runs_many_primitives_the_scripted_policy_at_two_granularities():
    prim = episode("MiniHack-Room-15x15-v0", ScriptedController(), "primitive", seed=5)
    skill = episode("MiniHack-Room-15x15-v0", ScriptedController(), "skill", seed=5)
    assert prim.success and skill.success
    assert skill.primitive_steps == prim.primitive_steps == prim.decisions > 1 and skill.decisions == 1


def test_nested_calls_count_in_all_calls_not_in_decisions():
    bot = fresh(maps.STAIRS_AHEAD)
    decide(bot, "goto_stairs")
    assert bot.calls == 2  # goto_stairs and the travel_to it calls
    env = make_env(maps.NAVIGATION_TASK, des_file=maps.DARK_CORRIDOR)
    top = run_episode(
        env,
        ScriptedController(),
        action_space("skill"),
        Budgets(max_decisions=1),
        env_seed=7,
        rng=np.random.default_rng(0),
    )
    assert (top.decisions, top.stop_reason) == (1, "decision_budget") and top.all_calls > top.decisions
    allc = run_episode(
        env,
        ScriptedController(),
        action_space("skill"),
        Budgets(max_decisions=3, counts="all_calls"),
        env_seed=7,
        rng=np.random.default_rng(0),
    )
    assert allc.all_calls >= 3 and allc.decisions < allc.all_calls


def test_decision_budget_stops_exactly_and_independently_of_the_step_limit():
    r = episode("MiniHack-Room-15x15-v0", RandomController(), "primitive", budgets=Budgets(max_decisions=7))
    assert (r.decisions, r.primitive_steps, r.stop_reason, r.end_kind) == (7, 7, "decision_budget", "truncated")


def test_primitive_budget_stops_exactly_and_independently_of_the_decision_budget():
    r = episode("MiniHack-Corridor-R3-v0", ScriptedController(), "skill", budgets=Budgets(max_primitive_steps=9))
    assert (r.primitive_steps, r.stop_reason) == (9, "primitive_budget") and r.decisions < 100


def test_no_progress_stop_after_exactly_the_limit():
    env = make_env(maps.NAVIGATION_TASK, des_file=maps.EMPTY)

    class Stubborn:  # always picks a skill that has no target here: zero primitive steps per decision
        name = "stubborn"

        def reset(self, rng):
            pass

        def act(self, bot, space):
            from agentpost.codeskills.runtime import Choice

            return Choice("goto_stairs")

        def observe(self, *a):
            pass

    r = run_episode(
        env, Stubborn(), action_space("skill"), Budgets(no_progress_limit=6), env_seed=7, rng=np.random.default_rng(0)
    )
    assert (r.decisions, r.primitive_steps, r.zero_step_decisions, r.stop_reason) == (6, 0, 6, "no_progress")


def test_episodes_are_deterministic_under_a_seed():
    a = episode("MiniHack-Quest-Easy-v0", RandomController("equal_mass"), "mixed", seed=11).row()
    b = episode("MiniHack-Quest-Easy-v0", RandomController("equal_mass"), "mixed", seed=11).row()
    assert a == b


# ---- controllers ---------------------------------------------------------------------------------------------
@pytest.mark.claim("codeskills", "C4")
def test_equal_mass_gives_skills_and_primitives_half_each():
    space = action_space("mixed")
    p = RandomController.probabilities(space, "equal_mass")
    n_s = len(space.skills)
    assert p[:n_s].sum() == pytest.approx(0.5) and p[n_s:].sum() == pytest.approx(0.5)
    u = RandomController.probabilities(space, "uniform")
    assert u[:n_s].sum() == pytest.approx(n_s / len(space))  # the dilution: 6 of 25 actions are skills
    assert np.allclose(RandomController.probabilities(action_space("skill"), "equal_mass"), 1 / n_s)


def test_scripted_mixed_equals_scripted_skill_only():
    a = episode("MiniHack-Corridor-R3-v0", ScriptedController(), "skill", seed=2).row()
    b = episode("MiniHack-Corridor-R3-v0", ScriptedController(), "mixed", seed=2).row()
    a.pop("interface"), b.pop("interface")
    assert a == b


def test_strict_grammar():
    space = action_space("mixed")
    assert parse_action("goto_stairs", space) == "goto_stairs"
    assert parse_action("  north \nbecause it is close", space) == "north"
    assert parse_action("go north", space) is None
    assert parse_action("North", space) is None
    assert parse_action("teleport", space) is None
    assert parse_action("", space) is None
    assert parse_action("north.", space) is None


class _ScriptedLM:
    """A stand-in causal LM (synthetic, for the interface test only): generate() appends fixed token ids."""

    def __init__(self, reply_ids):
        import torch

        self.reply = torch.tensor([reply_ids])
        self.device = torch.device("cpu")

    def generate(self, ids, **kw):
        import torch

        return torch.cat([ids, self.reply[:, : kw["max_new_tokens"]]], dim=1)


def test_lm_controller_counts_calls_tokens_and_unparseable_with_a_tiny_random_lm():
    from agentpost.models.lm import tiny_random_lm
    from agentpost.models.tokenizer import load_tokenizer

    tok = load_tokenizer()
    ctrl = LMController(tiny_random_lm(0), tok, max_new_tokens=4, task="Room-5x5")
    r = episode("MiniHack-Room-5x5-v0", ctrl, "skill", budgets=Budgets(max_decisions=3))
    assert r.lm_calls == r.decisions == 3
    assert r.prompt_tokens > 100 and 3 <= r.output_tokens <= 12
    assert r.unparseable + r.skill_decisions == 3
    stub = LMController(_ScriptedLM(tok("goto_stairs\n")["input_ids"]), tok, max_new_tokens=8)
    r = episode("MiniHack-Room-5x5-v0", stub, "skill")
    assert (r.success, r.decisions, r.unparseable, r.primitive_steps) == (True, 1, 0, 4)


def test_prompt_lists_every_action_and_shows_the_map():
    bot = fresh(maps.STAIRS_AHEAD)
    space = action_space("mixed")
    text = render_prompt(bot, space, ["north -> 1 steps, primitive"], task="demo")
    assert all(f"- {n}:" in text for n in space.names) and "|@...>|" in text and text.endswith("Action:")


def test_another_registered_task_runs_through_the_same_api():
    """An environment not used in the chapter (a dark 15x15 room) runs with no code change."""
    results = [episode("MiniHack-Room-Dark-15x15-v0", ScriptedController(), "skill", seed=s) for s in range(3)]
    assert all(r.success for r in results)
    assert sum(r.decisions for r in results) < sum(r.primitive_steps for r in results)


def test_sft_traces_match_the_lm_prompt_and_training_lowers_the_target_loss():
    from agentpost.codeskills.controllers import join_prompt
    from agentpost.codeskills.sft import collect_traces, encode, finetune
    from agentpost.models.lm import tiny_random_lm
    from agentpost.models.tokenizer import load_tokenizer

    traces = collect_traces(["MiniHack-Room-5x5-v0"], 1, [900], interfaces=("skill", "primitive"))
    assert [e["action"] for e in traces] == ["goto_stairs"] + ["southeast"] * 4  # the scripted teacher's choices
    first = join_prompt(traces[0]["head"], traces[0]["history"], traces[0]["tail"])
    assert first.endswith("Action:") and "Recent decisions:\n(none)" in first
    assert "southeast -> 1 steps, primitive" in traces[2]["history"]  # the LM controller's history format
    tok = load_tokenizer()
    ids, mask, dropped = encode(traces[0], tok, max_prompt_tokens=None)
    assert dropped == 0 and len(ids) == len(mask) and sum(mask) == len(tok(" goto_stairs\n")["input_ids"]) + 1
    assert tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=True) == " goto_stairs\n"
    log = finetune(
        tiny_random_lm(0), tok, traces, updates=30, lr=3e-3, batch_size=4, max_prompt_tokens=None, progress=False
    )
    assert log["final_loss"] < log["first_loss"]


def test_sft_truncation_drops_history_never_the_instruction_or_action_list():
    """Over the token cap the oldest history lines go first; the instruction, the action list and the observation
    stay, exactly as the LM controller builds its prompt at inference (the old rule kept the last tokens)."""
    from agentpost.codeskills.controllers import INSTRUCTION, fit_prompt_ids, prompt_ids
    from agentpost.codeskills.sft import encode
    from agentpost.models.tokenizer import load_tokenizer

    tok = load_tokenizer()
    head, tail = prompt_parts(fresh(maps.STAIRS_AHEAD), action_space("mixed"), task="demo")
    history = [f"north -> {k} steps, primitive" for k in range(12)]
    bare = len(prompt_ids(tok, join_prompt(head, [], tail)))
    full = len(prompt_ids(tok, join_prompt(head, history, tail)))
    cap = full - 1  # one token too many: the oldest line must go
    ids, dropped = fit_prompt_ids(tok, head, history, tail, cap)
    assert dropped == 1 and len(ids) <= cap
    assert ids == prompt_ids(tok, join_prompt(head, history[1:], tail))
    ids, dropped = fit_prompt_ids(tok, head, history, tail, bare)  # room for no history at all
    assert dropped == len(history) and tok.decode(ids).startswith(INSTRUCTION) and "- freeze_lava:" in tok.decode(ids)
    with pytest.raises(ValueError, match="without history"):
        fit_prompt_ids(tok, head, history, tail, bare - 1)
    example = {"head": head, "history": history, "tail": tail, "action": "north"}
    ids, mask, dropped = encode(example, tok, cap)
    assert dropped == 1 and sum(mask) == len(tok(" north\n")["input_ids"]) + 1


def test_lm_policy_spec_is_checked_and_the_hub_fails_clearly_offline(monkeypatch):
    from agentpost.codeskills.diagnostic import load_lm_policy
    from agentpost.models.hub import HubModelUnavailable

    with pytest.raises(ValueError, match="lm_policy must be"):
        load_lm_policy("gpt-5")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubModelUnavailable, match="cannot load hub model"):
        load_lm_policy("hub:Qwen/Qwen2.5-1.5B-Instruct")
    with pytest.raises(FileNotFoundError, match="no tool-LM checkpoint"):
        load_lm_policy("sft:/nonexistent/checkpoint")


def test_prompt_ids_use_the_chat_template_where_there_is_one():
    from agentpost.codeskills.controllers import prompt_ids
    from agentpost.models.tokenizer import load_tokenizer

    tok = load_tokenizer()
    assert prompt_ids(tok, "Action:") == tok("Action:")["input_ids"]
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"
    assert prompt_ids(tok, "Action:") == tok("<|im_start|>Action:<|im_end|>")["input_ids"]


def test_budget_modes_equal_decisions_or_equal_primitive_steps():
    from agentpost.codeskills.diagnostic import budgets_for

    base = Budgets(max_decisions=100)
    assert budgets_for("eqdec", base, 1000) == base
    eq = budgets_for("eqsteps", base, 1000)  # primitive-only may press as many keys as the task allows
    assert eq.max_decisions == 1000 and eq.max_primitive_steps is None
    assert budgets_for("eqsteps", Budgets(max_decisions=100, max_primitive_steps=300), 1000).max_decisions == 300
    assert budgets_for("eqsteps", base, 50).max_decisions == 100  # never below the decision budget
    with pytest.raises(ValueError, match="budget mode"):
        budgets_for("equal", base, 10)


def test_run_grid_is_one_seed_with_nested_items_and_measured_facts():
    from agentpost.codeskills.diagnostic import arm_facts_of, arm_outcomes, run_grid

    arms = (("random_uniform", "primitive"), ("scripted", "skill"))
    a = run_grid(
        ["MiniHack-Room-5x5-v0"], {"MiniHack-Room-5x5-v0": 3}, 1, arms, Budgets(max_decisions=10), progress=False
    )
    b = run_grid(
        ["MiniHack-Room-5x5-v0"], {"MiniHack-Room-5x5-v0": 3}, 2, arms, Budgets(max_decisions=10), progress=False
    )
    out = arm_outcomes(a, "decisions")
    assert sorted(out) == [
        "random_uniform_primitive_eqdec",
        "random_uniform_primitive_eqsteps",
        "scripted_skill_eqdec",
        "scripted_skill_eqsteps",
    ]
    assert list(out["scripted_skill_eqdec"]) == ["room_5x5-s1-e0", "room_5x5-s1-e1", "room_5x5-s1-e2"]
    assert max(out["random_uniform_primitive_eqdec"].values()) <= 10  # equal decisions: 10
    assert max(out["random_uniform_primitive_eqsteps"].values()) > 10  # equal steps: the room's 100-step limit
    assert set(b["item"]).isdisjoint(a["item"])  # each seed draws its own instances
    facts = arm_facts_of(a, Budgets(max_decisions=10))
    assert facts["scripted_skill_eqdec"]["data_version"] == facts["random_uniform_primitive_eqdec"]["data_version"]
    assert facts["scripted_skill_eqdec"]["checkpoint"] == facts["scripted_skill_eqsteps"]["checkpoint"]
    assert facts["scripted_skill_eqsteps"]["max_decisions_by_task"] == {"MiniHack-Room-5x5-v0": 100}


# ---- the greedy search controller (agentpost.codeskills.search) ------------------------------------------
def test_potential_is_minus_the_move_distance_to_the_stairs_and_the_model_moves_without_stepping():
    from agentpost.codeskills.search import ModelBot, Potential

    bot = fresh(maps.STAIRS_AHEAD)  # hero x=1, stairs x=5 in a one-row room: 4 moves
    phi = Potential(bot)
    assert phi(bot) == -4.0
    model = ModelBot(bot)
    model.step("east")
    assert (model.pos, phi(model), bot.pos, bot.steps) == ((bot.pos[0] + 1, bot.pos[1]), -3.0, bot.pos, 0)
    model.step("north")  # into the wall: nothing moves, the step is counted
    assert (model.pos[0], model.steps) == (bot.pos[0] + 1, 2)


def test_model_push_predicts_the_real_push_boulder():
    """maps.RIVER: the dry run of push_boulder fills the same water square in the same 3 primitives as the game."""
    from agentpost.codeskills.search import ModelBot, Potential, dry_run

    bot = fresh(maps.RIVER)
    ((bx, by),) = bot.boulders
    phi = Potential(bot)
    before = phi(bot)
    end, n = dry_run(bot, "push_boulder", action_space("skill"), phi, 50)
    model = ModelBot(bot)
    for key in ("southeast", "east", "east"):
        model.step(key)
    assert (bx + 2, by) not in model.water and not model.boulders and model.pos == (bx + 1, by)
    assert n == 3 and end > before  # filling the water is progress: the crossing costs CROSS less
    out = decide(bot, "push_boulder")
    assert out.steps == n and bot.pos == model.pos and (bx + 2, by) not in bot.water


def test_greedy_scores_progress_per_step_and_its_choice_does_not_depend_on_the_action_count():
    from agentpost.codeskills.search import GreedyController

    bot = fresh(maps.STAIRS_AHEAD)
    g = GreedyController()
    scores = g.scores(bot, action_space("mixed"))
    assert scores["goto_stairs"] == (1.0, 4.0, 4) and scores["east"] == (1.0, 1.0, 1) and scores["west"][1] <= 0
    assert g.act(bot, action_space("mixed")).action == "goto_stairs"  # equal rate, more progress per decision
    assert g.act(bot, action_space("primitive")).action == "east"
    from agentpost.codeskills.runtime import ActionSpace

    for extra in ((), ("search", "pickup"), tuple(PRIMITIVE_KEYS)):  # adding keys never changes the choice
        assert g.act(bot, ActionSpace(skills=("goto_stairs", "explore_room"), primitives=extra)).action == "goto_stairs"
    empty = fresh(maps.EMPTY)  # no stairs, nothing unexplored: no action makes progress, the fallback
    assert g.act(empty, action_space("mixed")).action == "search_hidden"
    assert g.act(empty, action_space("primitive")).action == "search"


def test_greedy_mixed_chooses_both_skills_and_keys_and_crosses_the_river():
    from agentpost.codeskills.search import GreedyController

    res = episode("MiniHack-River-Narrow-v0", GreedyController(), "mixed", seed=420000)
    assert res.success and res.skill_decisions > 0 and res.primitive_decisions > 0


def test_can_move_is_legal_moves_at_the_hero_cell():
    env = make_env("MiniHack-Corridor-R3-v0")
    for s in range(3):
        bot = Bot(env, seeded_reset(env, s)[0])
        for _ in range(30):
            legal = bot.legal_moves(bot.walkable)
            x, y = bot.pos
            assert {n: bot.can_move(n) for n in legal} == {n: bool(m[y, x]) for n, m in legal.items()}
            moves = [n for n in legal if legal[n][y, x]]
            if not moves or bot.done:
                break
            bot.step(moves[len(bot.visited) % len(moves)])
