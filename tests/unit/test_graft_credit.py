"""graft.md, "Mechanism tests" 1-7 with the spec's worked numbers, plus the credit interface."""

import math

import numpy as np
import pytest
import torch

from agentpost.graft import (
    CreditConfig,
    Trajectory,
    bellman_residual,
    bellman_values,
    build_graph,
    cosine_clusters,
    default_k_max,
    graph_gae,
    grpo_c_objective,
    mc_returns,
    node_group_stats,
    node_normalise,
    step_credit,
    td0_advantages,
)
from agentpost.graft.proposition import ESTIMATORS, LatticeMDP, estimates, mse_over_groups, ordering_margin

GAMMA, LAM = 0.9, 0.95


def worked(prefix=False):
    """Spec test 1: T1 s0-a->s1-b->win, T2 s0-c->s2-d->lose, T3 s0-a->s1-e->lose (test 4: a shared root r-x->s0)."""
    paths = [
        (("s0", "s1", "win"), ("a", "b"), 1.0),
        (("s0", "s2", "lose"), ("c", "d"), 0.0),
        (("s0", "s1", "lose"), ("a", "e"), 0.0),
    ]
    if prefix:
        paths = [(("r",) + s, ("x",) + a, r) for s, a, r in paths]
    return [Trajectory(s, a, r) for s, a, r in paths]


def solved(trajs, **kw):
    g = build_graph(trajs)
    v = bellman_values(g, gamma=GAMMA, **kw)
    return g, v, td0_advantages(g, v.values, gamma=GAMMA)


def node(g, trajs, state):
    for tr, nodes in zip(trajs, g.node_of):
        if state in tr.states:
            return nodes[tr.states.index(state)]
    raise KeyError(state)


@pytest.mark.claim("graft", "C2")
def test_worked_graph_values_and_td0():
    trajs = worked()
    g, v, td = solved(trajs)
    assert v.converged
    for state, value in (("win", 1.0), ("lose", 0.0), ("s1", 0.45), ("s2", 0.0), ("s0", 0.27)):
        assert v.values[node(g, trajs, state)] == pytest.approx(value, abs=1e-12)
    per = g.split(td)
    assert per[0] == pytest.approx([0.135, 0.45])  # T1
    assert per[1] == pytest.approx([-0.27, 0.0])  # T2: its first step gets -0.27
    assert per[2] == pytest.approx([0.135, -0.45])  # T3: the good first step of a failed rollout gets +0.135
    counts = g.edge_counts()
    s0, s1 = node(g, trajs, "s0"), node(g, trajs, "s1")
    assert counts[(s0, "a", s1)] == 2 and len(counts) == 5  # edges carry actions and counts


@pytest.mark.claim("graft", "C3")
def test_node_normalisation_worked_numbers():
    trajs = worked()
    g, _, td = solved(trajs)
    pop = g.split(node_normalise(g, td, ddof=0))
    unb = g.split(node_normalise(g, td, ddof=1))
    assert [pop[0][0], pop[1][0], pop[2][0]] == pytest.approx([0.7071, -1.4142, 0.7071], abs=1e-4)
    assert [unb[0][0], unb[1][0], unb[2][0]] == pytest.approx([0.5774, -1.1547, 0.5774], abs=1e-4)
    assert [pop[0][1], pop[2][1]] == pytest.approx([1.0, -1.0], abs=1e-5)  # group at s1 = {0.45, -0.45}
    assert pop[1][1] == 0.0  # singleton at s2 with A = 0


@pytest.mark.claim("graft", "C3")
def test_singleton_rule():
    g = build_graph([Trajectory(("a", "b"), ("go",), 1.0)])
    for a, expected in ((0.3, 1.0), (-0.3, -1.0), (0.0, 0.0)):
        assert node_normalise(g, np.array([a]))[0] == pytest.approx(expected, abs=1e-5)


def random_group(rng, n_traj=6, n_states=5, length=7):
    """Random walks over a few states (cycles, revisits, shared sinks) with binary outcomes."""
    trajs = []
    for _ in range(n_traj):
        states = ["s0"] + [f"s{rng.integers(n_states)}" for _ in range(length - 1)]
        end = "win" if rng.random() < 0.5 else "lose"
        trajs.append(
            Trajectory(tuple(states + [end]), tuple(f"a{rng.integers(3)}" for _ in range(length)), float(end == "win"))
        )
    return trajs


@pytest.mark.claim("graft", "C4")
def test_graph_gae_equals_td0_under_exact_matching():
    for trajs in [worked(), worked(prefix=True)] + [random_group(np.random.default_rng(s)) for s in range(20)]:
        g, v, td = solved(trajs, tol=1e-13)
        assert v.converged
        gae = graph_gae(g, td, gamma=GAMMA, lam=LAM)
        assert np.max(np.abs(gae - td)) < 1e-10


@pytest.mark.claim("graft", "C4")
def test_graph_gae_differs_under_the_other_readings():
    trajs = random_group(np.random.default_rng(3))
    g, v, td = solved(trajs, tol=1e-13)
    assert np.max(np.abs(graph_gae(g, td, gamma=GAMMA, lam=LAM, gae_edges="distinct") - td)) > 1e-3
    vu = bellman_values(g, gamma=GAMMA, tol=1e-13, value_weighting="uniform_actions")
    td_u = td0_advantages(g, vu.values, gamma=GAMMA)
    assert np.max(np.abs(graph_gae(g, td_u, gamma=GAMMA, lam=LAM) - td_u)) > 1e-3


@pytest.mark.claim("graft", "C4")
def test_distinct_edges_counterexample():
    trajs = worked(prefix=True)
    g, v, td = solved(trajs)
    assert v.values[node(g, trajs, "r")] == pytest.approx(0.243)
    first = g.split(td)
    assert [f[0] for f in first] == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)
    distinct = g.split(graph_gae(g, td, gamma=GAMMA, lam=LAM, gae_edges="distinct"))
    # hop 1: (0.135 - 0.27) / 2 = -0.0675, times gamma*lambda = 0.855; hop 2: (0.45 - 0.45 + 0) / 3 = 0
    assert distinct[0][0] == pytest.approx(0.855 * -0.0675, abs=1e-12)
    assert round(distinct[0][0], 4) == -0.0577
    raw = g.split(graph_gae(g, td, gamma=GAMMA, lam=LAM, gae_edges="raw"))
    assert raw[0][0] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.claim("graft", "C2")
def test_bellman_fixed_point_unreachable_and_k_max():
    assert default_k_max(0.99, 1e-8) == 1883
    trajs = random_group(np.random.default_rng(7))
    # a node that only leads into a cycle, never to a sink: "loop" -> "loop2" -> "loop" is truncated at a non-final
    # state that also occurs as non-final, so it is a normal node and nothing downstream of it is a sink.
    trajs.append(Trajectory(("s0", "loop", "loop2", "loop", "loop2"), ("x", "y", "x", "y"), 0.0))
    trajs.append(Trajectory(("loop2", "loop"), ("x",), 0.0))
    g = build_graph(trajs)
    v = bellman_values(g, gamma=GAMMA)
    assert v.converged and v.sweeps <= v.k_max
    assert bellman_residual(g, v, gamma=GAMMA) < 1e-8
    for state in ("loop", "loop2"):
        assert v.values[node(g, trajs, state)] == 0.0
        assert v.distance[node(g, trajs, state)] == -1
    assert g.conflicts == 2  # both final states also occur as non-final states (sink_policy decides)


def test_bellman_reverse_bfs_order():
    trajs = worked(prefix=True)
    g, v, _ = solved(trajs)
    order_states = [g.labels[u] for u in v.order]
    assert order_states[:2] == ["s1", "s2"] and order_states[2:] == ["s0", "r"]


@pytest.mark.claim("graft", "C2")
def test_proposition_1_ordering_with_margin():
    """Spec test 6: MSE(graft) <= MSE(gigpo) <= MSE(grpo) over many groups, each gap > 4 standard errors."""
    mdp = LatticeMDP.make(horizon=4, win_x=(1, 3), gamma=0.9, seed=0)
    for n in (8, 16):
        mse = mse_over_groups(mdp, group_size=n, n_groups=200, seed=1)
        for better, worse in (("graft", "gigpo"), ("gigpo", "grpo")):
            gap, se = ordering_margin(mse, better, worse)
            assert gap > 4 * se > 0, (n, better, worse, gap, se)
    small = mse_over_groups(mdp, group_size=4, n_groups=200, seed=1)["graft"].mean()
    large = mse_over_groups(mdp, group_size=32, n_groups=200, seed=1)["graft"].mean()
    assert large < 0.5 * small  # the graph estimate improves as N grows; the Monte Carlo ones do not


def test_proposition_truth_is_exact():
    mdp = LatticeMDP.make(horizon=2, win_x=(1,), gamma=0.9, seed=0)
    v = mdp.true_values()
    p0, pr, pu = mdp.p_right[(0, 0)], mdp.p_right[(1, 0)], mdp.p_right[(0, 1)]
    assert v[(1, 0)] == pytest.approx(0.9 * (1 - pr))  # (1,0)-R->(2,0) loses, -U->(1,1) wins
    assert v[(0, 1)] == pytest.approx(0.9 * pu)
    assert v[(0, 0)] == pytest.approx(0.9 * (p0 * v[(1, 0)] + (1 - p0) * v[(0, 1)]))
    est = estimates(mdp, [mdp.sample(np.random.default_rng(s)) for s in range(3)])
    assert set(est) == set(ESTIMATORS) | {"truth"} and all(x.shape == est["truth"].shape for x in est.values())


@pytest.mark.claim("graft", "C3")
def test_grpo_c_sequence_ratio_clips_once_per_step():
    lr = torch.tensor([[0.1, -0.1, 0.3]], dtype=torch.float64)
    mask = torch.ones_like(lr)
    obj = grpo_c_objective(lr, torch.zeros_like(lr), torch.tensor([1.0], dtype=torch.float64), mask)
    assert obj.item() == pytest.approx(math.exp(0.1))
    assert round(math.exp(0.1), 4) == 1.1052
    # a step whose geometric-mean ratio exceeds 1 + eps is clipped as one unit, a padded token does not count
    lr2 = torch.tensor([[0.5, 0.5, 9.0]], dtype=torch.float64)
    mask2 = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    assert grpo_c_objective(lr2, torch.zeros_like(lr2), torch.tensor([2.0]), mask2).item() == pytest.approx(2.4)
    assert grpo_c_objective(lr2, torch.zeros_like(lr2), torch.tensor([-2.0]), mask2).item() == pytest.approx(
        -2.0 * math.exp(0.5)
    )


@pytest.mark.claim("graft", "C3")
def test_grpo_c_differs_from_token_ppo_on_two_tokens_and_agrees_on_one():
    """A 2-token action with log-ratios [0.3, -0.1], eps = 0.2. GRPO-C: w = exp((0.3 - 0.1) / 2) = exp(0.1), inside
    [0.8, 1.2], so J = A exp(0.1). Token-level PPO clips each token: A = 1 gives (min(e^0.3, 1.2) + e^-0.1) / 2 =
    (1.2 + 0.904837) / 2 = 1.052419; A = -1 gives (-e^0.3 - e^-0.1) / 2 = -1.127348 (the clip keeps the larger
    loss). A 1-token action has one ratio, so the two objectives agree (clipped to 1.2 A at log-ratio 0.3)."""
    two = torch.tensor([[0.3, -0.1]], dtype=torch.float64)
    ones = torch.ones_like(two)
    for adv, seq, tok in ((1.0, math.exp(0.1), 1.052419), (-1.0, -math.exp(0.1), -1.127348)):
        a = torch.tensor([adv], dtype=torch.float64)
        assert grpo_c_objective(two, torch.zeros_like(two), a, ones).item() == pytest.approx(seq)
        assert grpo_c_objective(two, torch.zeros_like(two), a, ones, ratio_level="token").item() == pytest.approx(
            tok, abs=1e-6
        )
    assert (
        round((1.2 + math.exp(-0.1)) / 2, 6) == 1.052419
        and round(-(math.exp(0.3) + math.exp(-0.1)) / 2, 6) == -1.127348
    )
    for lr1, a in ((0.3, 1.0), (0.3, -1.0), (-0.5, 1.0), (0.1, 2.0)):
        one = torch.tensor([[lr1]], dtype=torch.float64)
        at = torch.tensor([a], dtype=torch.float64)
        seq = grpo_c_objective(one, torch.zeros_like(one), at, torch.ones_like(one))
        assert (
            seq.item()
            == grpo_c_objective(one, torch.zeros_like(one), at, torch.ones_like(one), ratio_level="token").item()
        )
    assert grpo_c_objective(
        torch.tensor([[0.3]]), torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1)
    ).item() == pytest.approx(1.2)
    with pytest.raises(ValueError, match="ratio_level"):
        grpo_c_objective(two, two, torch.tensor([1.0]), ones, ratio_level="segment")


def test_grpo_c_step_aggregation():
    lr = torch.zeros((3, 1), dtype=torch.float64)
    adv = torch.tensor([1.0, 2.0, 6.0], dtype=torch.float64)
    m = torch.ones_like(lr)
    assert grpo_c_objective(lr, lr, adv, m).item() == pytest.approx(3.0)
    by_traj = grpo_c_objective(lr, lr, adv, m, step_agg="trajectory", traj_ids=torch.tensor([0, 0, 1]))
    assert by_traj.item() == pytest.approx((1.5 + 6.0) / 2)
    with pytest.raises(ValueError, match="traj_ids"):
        grpo_c_objective(lr, lr, adv, m, step_agg="trajectory")


def test_cosine_canonicalisation_merges_near_duplicates():
    emb = np.array([[1.0, 0.0], [0.95, 0.05], [0.0, 1.0], [0.6, 0.8]])
    assert cosine_clusters(emb, 0.9).tolist() == [0, 0, 1, 2]
    assert cosine_clusters(emb, 0.5).tolist() == [0, 0, 1, 1]  # 0.8 to leader 2 beats 0.6 to leader 0
    trajs = [Trajectory(("s0", "s1a", "win"), ("a", "b"), 1.0), Trajectory(("s0", "s1b", "lose"), ("a", "e"), 0.0)]
    vecs = {
        "s0": [1, 0, 0, 0],
        "s1a": [0, 1, 0.05, 0],
        "s1b": [0, 1, 0, 0.05],
        "win": [0, 0, 1, 0],
        "lose": [0, 0, 0, 1],
    }
    embed = lambda states: np.array([vecs[s] for s in states], dtype=float)
    merged = build_graph(trajs, matching="cosine", sim_threshold=0.9, embedder=embed)
    exact = build_graph(trajs)
    assert (merged.n_nodes, exact.n_nodes) == (4, 5)
    v = bellman_values(merged, gamma=GAMMA)
    assert v.values[merged.node_of[0][1]] == pytest.approx(0.45)  # s1a and s1b share the value of one cluster
    with pytest.raises(ValueError, match="embedder"):
        build_graph(trajs, matching="cosine")


def test_credit_interface_and_baselines():
    trajs = worked()
    cfg = CreditConfig(gamma=GAMMA, lam=LAM)
    grpo = step_credit("grpo", trajs, cfg).per_traj  # rewards [1, 0, 0]: unbiased std 0.5774
    assert [x.tolist() for x in grpo] == [
        pytest.approx([1.1547] * 2, abs=1e-4),
        pytest.approx([-0.5774] * 2, abs=1e-4),
        pytest.approx([-0.5774] * 2, abs=1e-4),
    ]
    assert mc_returns(trajs, gamma=GAMMA, include_step_rewards=False).tolist() == pytest.approx([0.81, 0.9, 0, 0, 0, 0])
    gigpo = step_credit("gigpo", trajs, cfg).per_traj
    # anchor s0: returns {0.81, 0, 0} -> [1.1547, -0.5774, -0.5774]; anchor s1: {0.9, 0} -> +-0.7071;
    # anchor s2 is a singleton with G = 0: both singleton rules give A^S = 0 (see the next test for one where they differ)
    assert gigpo[0] == pytest.approx([1.1547 * 2, 1.1547 + 0.7071], abs=2e-4)
    assert gigpo[1] == pytest.approx([-0.5774 * 2, -0.5774], abs=2e-4)
    assert gigpo[2] == pytest.approx([-0.5774 * 2, -0.5774 - 0.7071], abs=2e-4)
    td = step_credit("graft_td", trajs, cfg)
    gae = step_credit("graft_gae", trajs, cfg)
    assert np.allclose(td.flat, gae.flat, atol=1e-10)
    assert td.per_traj[1][0] == pytest.approx(-1.4142, abs=1e-4)
    with pytest.raises(KeyError, match="unknown credit method"):
        step_credit("ppo", trajs, cfg)


@pytest.mark.claim("graft", "C1")
def test_gigpo_singleton_rule():
    """A state visited once: GiGPO's own step_norm_reward centres on the group's own mean (A^S = 0); verl's GRPO
    singleton rule (mean 0, std 1) gives it its full return G_t."""
    trajs = [Trajectory(("s0", "s1", "win"), ("a", "b"), 1.0), Trajectory(("s0", "s2", "lose"), ("c", "d"), 0.0)]
    # episode: rewards [1, 0], unbiased std 0.7071 -> +-0.7071; anchor s0: returns {0.81, 0} -> +-0.7071;
    # s1 (G = 0.9) and s2 (G = 0) are singletons
    gigpo = step_credit("gigpo", trajs, CreditConfig(gamma=GAMMA)).per_traj
    assert gigpo[0] == pytest.approx([1.4142, 0.7071], abs=2e-4)
    assert gigpo[1] == pytest.approx([-1.4142, -0.7071], abs=2e-4)
    verl = step_credit("gigpo", trajs, CreditConfig(gamma=GAMMA, gigpo_singleton="zero_mean_unit_std")).per_traj
    assert verl[0] == pytest.approx([1.4142, 0.7071 + 0.9], abs=2e-4)
    assert verl[1] == pytest.approx([-1.4142, -0.7071], abs=2e-4)
    with pytest.raises(ValueError, match="gigpo_singleton"):
        CreditConfig(gigpo_singleton="one")


def test_node_group_stats():
    g = build_graph(worked())
    st = node_group_stats(g)
    # s0 has 3 out-steps, s1 2, s2 1: nodes mean 2, steps mean (3*3 + 2*2 + 1) / 6, 5 of 6 steps in groups >= 2
    assert st["mean_group_size_nodes"] == pytest.approx(2.0)
    assert st["mean_group_size_steps"] == pytest.approx(14 / 6)
    assert st["frac_steps_in_groups_ge2"] == pytest.approx(5 / 6)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="len\\(states\\)"):
        Trajectory(("a",), ("x",), 1.0)
    with pytest.raises(ValueError, match="matching"):
        build_graph(worked(), matching="fuzzy")
    with pytest.raises(ValueError, match="gamma"):
        bellman_values(build_graph(worked()), gamma=0.0)
    with pytest.raises(ValueError, match="gae_edges"):
        g, v, td = solved(worked())
        graph_gae(g, td, gamma=GAMMA, lam=LAM, gae_edges="unique")


def test_sink_policy_for_a_final_state_seen_elsewhere():
    """sink_policy: T4 is truncated at s1, which is non-final in T1 and T3."""
    trajs = worked() + [Trajectory(("s0", "s1"), ("a",), 0.0, terminated=False)]
    normal = build_graph(trajs)
    s1 = node(normal, trajs, "s1")
    assert s1 not in normal.sink_value and normal.conflicts == 1
    assert bellman_values(normal, gamma=GAMMA).values[s1] == pytest.approx(0.45)
    fixed = build_graph(trajs, sink_policy="always")
    assert fixed.sink_value[s1] == 0.0 and fixed.conflicts == 0
    assert bellman_values(fixed, gamma=GAMMA).values[s1] == 0.0


def test_step_rewards_enter_td0_and_break_the_identity():
    """Step advantages: A_t = r_t + gamma V' - V with a -0.1 penalty on every step (values stay eq. 5)."""
    trajs = [Trajectory(tr.states, tr.actions, tr.reward, step_rewards=(-0.1,) * tr.length) for tr in worked()]
    g, v, _ = solved(trajs)
    td = td0_advantages(g, v.values, gamma=GAMMA, include_step_rewards=True)
    assert g.split(td)[1] == pytest.approx([-0.37, -0.1])
    gae = graph_gae(g, td, gamma=GAMMA, lam=LAM)
    assert g.split(gae)[1][0] == pytest.approx(-0.37 + 0.855 * -0.1)  # hop 1 from s2: its one step, -0.1
    assert mc_returns(trajs, gamma=GAMMA, include_step_rewards=True)[:2] == pytest.approx(
        [-0.1 + 0.9 * (-0.1 + 0.9), -0.1 + 0.9]
    )


def test_norm_group_distinct_edges():
    """norm_group="distinct": at s0 the distinct edges carry {0.135, -0.27}: mean -0.0675, population std 0.2025."""
    trajs = worked()
    g, _, td = solved(trajs)
    per = g.split(node_normalise(g, td, norm_group="distinct"))
    assert [per[0][0], per[1][0], per[2][0]] == pytest.approx([1.0, -1.0, 1.0], abs=1e-4)
