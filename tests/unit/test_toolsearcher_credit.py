"""Worked numbers from toolsearcher.md ("Mechanism tests" 1-4, 8, 9)."""

import numpy as np
import pytest

from agentpost.toolsearcher.credit import (
    event_advantages,
    first_discovery,
    group_credit,
    normalized_tool_credit,
    parse_tool_list,
    selection_reward,
    set_f1,
)

G1, G2 = "Cat.toolA.api1", "Cat.toolB.api2"


def answer(*names):
    return "<tool_list>\n" + "\n".join(names) + "\n</tool_list>"


@pytest.mark.claim("toolsearcher", "C1")
def test_first_discovery_refinding_earns_nothing():
    D = first_discovery([[G1, "x"], [G1]], [G1, G2])
    assert D.tolist() == [[1, 0], [0, 0]]


@pytest.mark.claim("toolsearcher", "C1")
def test_mastered_tool_gets_zero():
    s_hat = normalized_tool_credit(np.array([[1, 1], [1, 0], [1, 0]]))
    assert np.all(s_hat[:, 0] == 0.0)
    assert s_hat[:, 1] == pytest.approx([1.1547, -0.5773, -0.5773], abs=1e-4)


def worked_group(gate="after_norm", nondiscovery="zero"):
    results = [[[G1], [G2]], [[G1], [G1]], [["x"]]]
    answers = [answer(G1, G2), answer(G1), answer()]
    return group_credit(results, answers, [G1, G2], gate=gate, nondiscovery=nondiscovery)


@pytest.mark.claim("toolsearcher", "C1")
def test_worked_example_search_credit():
    c = worked_group()
    assert c.s.tolist() == [[1, 1], [1, 0], [0, 0]]
    assert c.s_hat == pytest.approx(np.array([[0.5773, 1.1547], [0.5773, -0.5773], [-1.1547, -0.5773]]), abs=1e-4)
    assert c.search_adv[0] == pytest.approx([0.5773, 1.1547], abs=1e-4)
    assert c.search_adv[1] == pytest.approx([0.5773, 0.0], abs=1e-4)
    assert c.search_adv[2] == pytest.approx([0.0])


@pytest.mark.claim("toolsearcher", "C2")
def test_worked_example_selection_and_gate():
    c = worked_group()
    assert c.rewards == pytest.approx([1.1, 0.7667, 0.1], abs=1e-4)
    assert c.selection_adv == pytest.approx([0.8729, 0.2182, -1.0911], abs=1e-4)
    assert c.all_found.tolist() == [True, False, False]
    assert c.gated_selection_adv == pytest.approx([0.8729, 0.0, 0.0], abs=1e-4)
    f = c.factors([True, True, False])
    assert [len(r) for r in f] == [3, 3, 1]  # K_i search events, then A_sel only for rollouts that answered
    assert f[0] == pytest.approx([0.5773, 1.1547, 0.8729], abs=1e-4)
    assert f[1] == pytest.approx([0.5773, 0.0, 0.0], abs=1e-4)
    assert f[2] == pytest.approx([0.0])


@pytest.mark.claim("toolsearcher", "C2")
def test_gate_modes():
    after, before, none = (worked_group(g) for g in ("after_norm", "before_norm", "none"))
    # rewards [1.1, 0.7667, 0.1]: mean 0.6556, unbiased std 0.5092 -> A_sel [0.8729, 0.2182, -1.0911]
    # after_norm: only rollout 1 found both targets -> [0.8729, 0, 0]
    assert after.gated_selection_adv == pytest.approx([0.8729, 0.0, 0.0], abs=1e-4)
    # before_norm: rewards [1.1, 0, 0]: mean 0.3667, std 0.6351 -> [1.1547, -0.5773, -0.5773]
    assert before.gated_selection_adv == pytest.approx([1.1547, -0.5773, -0.5773], abs=1e-4)
    # none: the ungated worked numbers
    assert none.gated_selection_adv == pytest.approx([0.8729, 0.2182, -1.0911], abs=1e-4)


def test_sign_property_and_min_variant():
    rng = np.random.default_rng(0)
    pool = [f"c.t.{i}" for i in range(8)]
    targets = pool[:3]
    for _ in range(50):
        results = [[list(rng.choice(pool, 2, replace=False)) for _ in range(rng.integers(1, 4))] for _ in range(4)]
        c = group_credit(results, [answer()] * 4, targets)
        s = np.stack([D.max(0) for D in c.D]).astype(float)
        s_hat = (s - s.mean(0)) / (s.std(0, ddof=1) + 1e-6)  # eq. 2, computed here with numpy
        for i, (D, a) in enumerate(zip(c.D, c.search_adv)):
            assert np.all(a >= 0)
            assert np.all(a[D.sum(1) == 0] == 0)  # an event that discovers nothing earns exactly 0
            expected = [max(s_hat[i, j] for j in np.flatnonzero(row)) if row.any() else 0.0 for row in D]
            assert a == pytest.approx(expected, abs=1e-12)
    D = np.array([[1, 0], [0, 0]])
    assert event_advantages(D, np.array([0.5, -0.7]), "min").tolist() == pytest.approx([0.5, -0.7])
    assert event_advantages(D, np.array([0.5, -0.7]), "zero").tolist() == pytest.approx([0.5, 0.0])


@pytest.mark.claim("toolsearcher", "C2")
def test_reward_and_strict_parse():
    assert set_f1({G1, G2}, {G1, G2}) == 1.0
    assert selection_reward(answer(G1, G2), [G1, G2]) == pytest.approx(1.1)
    assert selection_reward("no list here", [G1]) == 0.0
    assert selection_reward(answer(G1) + answer(G1), [G1]) == 0.0  # two blocks: no bonus, no prediction
    assert selection_reward("<tool_list>\n" + G1, [G1]) == 0.0  # unterminated block
    assert selection_reward(None, [G1]) == 0.0
    assert parse_tool_list(answer("Finance.spacHero.Latest SPAC Deals, IPOs, Closings")) == (
        frozenset({"Finance.spacHero.Latest SPAC Deals, IPOs, Closings"}),
        True,
    )
    # conditional_selection scores against the targets the searches found
    assert selection_reward(answer(G1), [G1, G2], found={G1}, mode="conditional_selection") == pytest.approx(1.1)
    with pytest.raises(ValueError, match="reward mode"):
        selection_reward(answer(G1), [G1], mode="gt_match")


@pytest.mark.claim("toolsearcher", "C2")
def test_comma_separated_list_and_malformed_blocks():
    # the spec's form <tool_list>c.t.a1, c.t.a2</tool_list>: two names -> F1 1 + 0.1 = 1.1 (read as one name: 0.1)
    assert selection_reward("<tool_list>c.t.a1, c.t.a2</tool_list>", ["c.t.a1", "c.t.a2"]) == pytest.approx(1.1)
    assert parse_tool_list("<tool_list>c.t.a1,c.t.a2\nc.t.a3</tool_list>") == (
        frozenset({"c.t.a1", "c.t.a2", "c.t.a3"}),
        True,
    )
    # a comma inside an API name stays inside it, also in the comma-separated form
    spac = "Finance.spacHero.Latest SPAC Deals, IPOs, Closings"
    assert parse_tool_list(f"<tool_list>{spac}, c.t.a1</tool_list>")[0] == frozenset({spac, "c.t.a1"})
    # malformed double list (two openings, one closing): no prediction and no format bonus (was 0.1)
    assert selection_reward(f"<tool_list>{G1}<tool_list>{G1}</tool_list>", [G1]) == 0.0
    assert selection_reward(f"</tool_list>{answer(G1)}", [G1]) == 0.0
    # an empty well-formed block keeps the bonus (the spec's P_3 = {} with r = 0.1)
    assert selection_reward("<tool_list></tool_list>", [G1]) == pytest.approx(0.1)
