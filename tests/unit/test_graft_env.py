"""The diagnostic's environments (real MiniHack, synthetic text gridworld), the tabular policy and training arms."""

import numpy as np
import pytest

from agentpost.graft.envs import MiniHackRoom, TextGridworld, make_env
from agentpost.graft.train import (
    ActionCode,
    TabularSoftmax,
    TrainConfig,
    rollout,
    run_arms,
    select_lr,
    train_arm,
)

SE = 5  # MiniHack navigation actions: N, E, S, W, NE, SE, SW, NW


@pytest.fixture(scope="module")
def room():
    pytest.importorskip("minihack")
    env = MiniHackRoom("MiniHack-Room-5x5-v0", max_episode_steps=4)
    yield env
    env.close()


def test_minihack_step_limit_is_truncation(room):
    room.reset(1, 2)
    for _ in range(4):
        state, pos, reward, terminated, truncated = room.step(0)  # north, into the wall
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert (state, pos) == (MiniHackRoom.TIMEOUT, None)  # the cleared screen is not the win screen


def test_minihack_itself_reports_the_limit_as_terminated(room):
    """The behaviour the wrapper corrects: NLE 1.3 returns done=True, truncated=False with end status ABORTED."""
    room.reset(1, 2)
    for _ in range(4):
        _, _, done, truncated, info = room.env.step(0)
    assert done and not truncated and info["end_status"] == room.env.StepStatus.ABORTED


def test_minihack_success_is_terminal_with_reward_one(room):
    room = MiniHackRoom("MiniHack-Room-5x5-v0", max_episode_steps=10)  # NLE checks its limit before success
    _, start = room.reset(3, 4)
    for _ in range(4):
        state, pos, reward, terminated, truncated = room.step(SE)
    assert set(np.frombuffer(state, np.int16).tolist()) == {2359}  # the cleared screen: one shared win state
    assert (pos[0] - start[0], pos[1] - start[1]) == (4, 4)
    assert (reward, terminated, truncated) == (1.0, True, False)


def test_minihack_seeded_rollouts_repeat(room):
    policy = TabularSoftmax(room.n_actions)
    a = rollout(room, policy, 5, 6, np.random.default_rng(0))[0]
    b = rollout(room, policy, 5, 6, np.random.default_rng(0))[0]
    assert a == b and isinstance(a.states[0], bytes) and len(a.states[0]) == 21 * 79 * 2


def test_gridworld_render_success_and_truncation():
    env = TextGridworld(size=3, max_steps=3)
    state, pos = env.reset()
    assert state == "@..\n...\n..>" and pos == (0, 0)
    assert [env.step(a)[2:] for a in (0, 0, 0)] == [(0.0, False, False)] * 2 + [(0.0, False, True)]
    env = TextGridworld(size=3, max_steps=10)
    env.reset()
    assert [env.step(a)[2:] for a in (1, 1, 2, 2)][-1] == (1.0, True, False)
    with pytest.raises(ValueError, match="unknown environment"):
        make_env("Atari-Pong", max_steps=5)


def test_tabular_policy_starts_uniform_and_grows():
    pol = TabularSoftmax(4, capacity=2)
    rows = [pol.row(s) for s in ("a", "b", "c", "a")]
    assert rows == [0, 1, 2, 0] and pol.table.shape[0] == 4
    assert pol.probs(2) == pytest.approx([0.25] * 4)


def test_action_code_digits_and_masks():
    code = ActionCode(8, 2)  # MiniHack's eight moves as three binary tokens
    assert (code.base, code.length) == (2, 3) and code.encode(5) == (1, 0, 1) and code.encode(0) == (0, 0, 0)
    assert [code.decode(code.encode(a)) for a in range(8)] == list(range(8))
    assert code.allowed(()).tolist() == [True, True]
    five = ActionCode(5, 3)  # two base-3 tokens: codes 00..11 name actions 0..4; 12 and 20, 21, 22 name none
    assert five.length == 2 and five.encode(4) == (1, 1)
    assert five.allowed(()).tolist() == [True, True, False] and five.allowed((1,)).tolist() == [True, True, False]
    assert (ActionCode(4, 0).base, ActionCode(4, 0).length) == (4, 1) and ActionCode(4, 0).encode(3) == (3,)
    assert (ActionCode(4, 9).base, ActionCode(4, 2).length) == (4, 2)  # a base above the action count: one token
    with pytest.raises(ValueError, match="base"):
        ActionCode(4, 1)


def test_multi_token_policy_samples_token_by_token():
    """Uniform rows: with 8 actions in 3 binary tokens each action has probability (1/2)^3; with 5 actions in
    2 base-3 tokens the masked first token is 1/2 each, so actions 0-2 get 1/6 and actions 3-4 get 1/4."""
    pol = TabularSoftmax(8, capacity=2, token_base=2)
    rng = np.random.default_rng(0)
    counts = np.bincount([pol.act("s", rng)[1] for _ in range(4000)], minlength=8) / 4000
    assert counts == pytest.approx([1 / 8] * 8, abs=0.025)
    assert len(pol.rows) == 7  # the root, two 1-token prefixes, four 2-token prefixes of one state
    decisions, action = pol.act("s", np.random.default_rng(1))
    assert len(decisions) == 3 and pol.code.decode(tuple(t for _, t in decisions)) == action
    five = TabularSoftmax(5, token_base=3)
    counts = np.bincount([five.act("s", rng)[1] for _ in range(6000)], minlength=5) / 6000
    assert counts == pytest.approx([1 / 6] * 3 + [1 / 4] * 2, abs=0.025)
    rows = np.asarray([[five.row("s"), five.row("s", (1,))]])
    logits, logp = five.log_probs(rows, np.asarray([[1, 1]]))
    assert logp.exp().prod().item() == pytest.approx(1 / 4)  # action 4 = tokens (1, 1)
    assert logits.shape == (1, 2, 3)


def test_token_ppo_arm_equals_grpo_c_on_one_token_and_differs_on_several():
    env = TextGridworld(size=4, max_steps=12)
    for token_base, equal in ((0, True), (2, False)):  # one token per action; two binary tokens per move
        base = TrainConfig(updates=4, group_size=6, lr=64.0, eval_episodes=8, token_base=token_base)
        runs = run_arms(env, base, 1, ("graft_td", "graft_td_token"), progress=False)
        same = runs["graft_td"]["history"] == runs["graft_td_token"]["history"]
        assert same == equal
    assert TrainConfig(method="graft_td_token").ratio_level == "sequence"  # the arm, not the config, sets it
    with pytest.raises(ValueError, match="ratio_level"):
        TrainConfig(ratio_level="segment")
    with pytest.raises(ValueError, match="token_base"):
        TrainConfig(token_base=1)


def test_training_arms_share_samples_and_graft_gae_matches_td():
    env = TextGridworld(size=4, max_steps=12)
    base = TrainConfig(updates=4, group_size=6, lr=8.0, eval_episodes=16)
    runs = run_arms(env, base, 1, progress=False)
    for arm in runs:
        h = runs[arm]["history"]
        assert [x["update"] for x in h] == [1, 2, 3, 4] and h[-1]["episodes"] == 24
        assert runs[arm]["grad_steps"] == 4 * base.ppo_epochs and len(runs[arm]["train_success"]) == 24
    # first update: the same uniform policy and the same random numbers in every arm
    first = {arm: runs[arm]["history"][0]["env_steps"] for arm in runs}
    assert len(set(first.values())) == 1
    assert len({runs[arm]["init"] for arm in runs}) == 1
    assert np.array_equal(runs["graft_td"]["eval_success"], runs["graft_gae"]["eval_success"])
    assert runs["graft_gae"]["gae_minus_td_max"] < 1e-6
    stats = runs["graft_td"]["group_stats"]
    assert len(stats) == 4 and all(0.0 <= s["frac_steps_in_groups_ge2"] <= 1.0 for s in stats)


def test_two_seeds_are_two_replications():
    """A run is one seed: another seed draws other rollouts, so per-item training outcomes differ."""
    env = TextGridworld(size=4, max_steps=12)
    base = TrainConfig(method="grpo", updates=3, group_size=6, lr=8.0, eval_episodes=16)
    a, b = train_arm(env, base, 1), train_arm(env, base, 2)
    assert list(a["train_success"]) == list(b["train_success"])  # the same item ids
    assert a["train_success"] != b["train_success"] or a["history"] != b["history"]
    assert [h["env_steps"] for h in a["history"]] != [h["env_steps"] for h in b["history"]]


def test_select_lr_per_arm_flags_grid_edges():
    env = TextGridworld(size=4, max_steps=12)
    base = TrainConfig(updates=12, group_size=6, eval_episodes=4)
    chosen, rows = select_lr(env, base, ["grpo"], [1e-9, 1e-8, 8.0], [5, 6])
    assert chosen == {"grpo": 8.0}  # a learning rate that learns beats two that do not move the policy
    assert [r["lr"] for r in rows] == [1e-9, 1e-8, 8.0] and all(r["at_grid_edge"] for r in rows)
    assert sum(r["selected"] for r in rows) == 1
    with pytest.raises(ValueError, match="lr_grid"):
        select_lr(env, base, ["grpo"], [1.0, 2.0], [5])


def test_credit_moves_the_policy_towards_success():
    env = TextGridworld(size=4, max_steps=12)
    out = train_arm(env, TrainConfig(method="graft_td", updates=15, group_size=8, lr=8.0, eval_episodes=64), 3)
    untrained = train_arm(env, TrainConfig(method="graft_td", updates=1, group_size=1, lr=1e-9, eval_episodes=64), 3)
    assert out["eval_success"].mean() > untrained["eval_success"].mean() + 0.2


def test_bad_train_config_is_named():
    with pytest.raises(ValueError, match="method"):
        TrainConfig(method="ppo")
    with pytest.raises(ValueError, match="group_size"):
        TrainConfig(group_size=0)


def test_headroom_pilot_rows():
    """The pilot that chose the MiniHack task: one row per (arm, rate) with one success value per seed."""
    from agentpost.graft.pilot import headroom_rows

    rows = list(
        headroom_rows(
            "gridworld",
            max_steps=12,
            updates=2,
            arms=["grpo", "graft_td"],
            lrs=[8.0, 64.0],
            seeds=[1, 2],
            group_size=4,
            eval_episodes=4,
        )
    )
    assert [(r["arm"], r["lr"]) for r in rows] == [("grpo", 8.0), ("grpo", 64.0), ("graft_td", 8.0), ("graft_td", 64.0)]
    assert all(len(r["train_success"]) == 2 and all(0.0 <= x <= 1.0 for x in r["eval_success"]) for r in rows)
    assert rows[0]["token_base"] == 2
