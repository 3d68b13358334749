"""ActKV mechanism tests: action regions, Algorithm 1 (LRFU), Algorithm 2 (confidence budget) — actkv.md tests 1-3, 6, 8."""

import math
import random

import numpy as np
import pytest
import torch

from agentpost.actkv.budget import (
    ConfidenceBudget,
    DeepConfConfidence,
    NegSurprisalConfidence,
    Surprisal,
    TokenConfidence,
    bottom_trend_slope,
    confidence_from_logits,
    deepconf_confidence,
    min_pool,
)
from agentpost.actkv.lrfu import ActionAccumulator, lrfu_update, nucleus_hits, reduce_heads, select_top_b
from agentpost.actkv.regions import HARMONY, QWEN, ActionRegionDetector, detect_rounds


# ------------------------------------------------------------------------------------------- regions (test 8)
def _stream(delims, rng):
    """Synthetic stream: prefix, then rounds of observation / reasoning / action, with ground truth per char."""
    parts = [("SYSTEM task text. ", False)]
    for r in range(3):
        parts += [
            (f"obs {r} result ", False),
            (f"think {r} ", False),
            (delims.open, False),
            (f'{{"name": "f{r}", "id": {r}}}' + delims.close, True),
            (" ", False),
        ]
    text = "".join(p for p, _ in parts)
    truth = [flag for p, flag in parts for _ in p]
    cuts = sorted(rng.sample(range(1, len(text)), 40))
    toks = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
    return toks, truth


@pytest.mark.parametrize("delims", [QWEN, HARMONY])
@pytest.mark.parametrize("seed", range(5))
def test_detector_matches_ground_truth_with_split_delimiters(delims, seed):
    toks, truth = _stream(delims, random.Random(seed))
    det = ActionRegionDetector(delims)
    s = 0
    for tok in toks:
        ev = det.push(tok)
        # a token is in action iff it overlaps the action characters (content + close delimiter)
        assert ev.in_action == any(truth[s : s + len(tok)]), (tok, s)
        s += len(tok)


def test_rounds_end_at_close_delimiter_and_prefix_is_not_scored():
    toks = [
        "<tool_call>",
        "sys",
        " task",
        "obs",
        " hm",
        "<tool_call>",
        "{a}",
        "</tool_call>",
        "obs2",
        "<tool_call>",
        "{b",
        "}</tool_",
        "call>",
        "tail",
    ]
    lay = detect_rounds(toks, prefix_len=3)
    assert lay.round_spans == ((3, 8), (8, 13), (13, 14))
    assert lay.action_mask == (False,) * 6 + (True, True, False, False, True, True, True, False)
    assert lay.region_starts == (5, 9)
    assert lay.mean_round_len == pytest.approx(11 / 3)


# ------------------------------------------------------------------------------------------- Algorithm 1 (test 1)
@pytest.mark.claim("actkv", "C1")
def test_lrfu_worked_example():
    a1 = torch.tensor([0.05, 0.05, 0.8, 0.1], dtype=torch.float64)
    h1 = nucleus_hits(a1, 0.9)
    assert h1.tolist() == [False, False, True, True]
    ks = lrfu_update(torch.zeros(0, dtype=torch.float64), a1, h1, 0.5)
    assert ks.tolist() == pytest.approx([0, 0, 0.8, 0.1], abs=1e-12)
    a2 = torch.tensor([0, 0, 0, 0.05, 0.95, 0], dtype=torch.float64)
    h2 = nucleus_hits(a2, 0.9)
    assert h2.tolist() == [False, False, False, False, True, False]  # entry 3 is not a hit
    ks = lrfu_update(ks, a2, h2, 0.5)
    assert ks.tolist() == pytest.approx([0, 0, 0.4, 0.05, 0.95, 0], abs=1e-12)


def test_nucleus_edge_cases():
    assert nucleus_hits(torch.zeros(3)).tolist() == [False] * 3
    assert nucleus_hits(torch.tensor([0.5, 0.5]), 1.0).tolist() == [True, True]
    with pytest.raises(ValueError, match="nucleus mass"):
        nucleus_hits(torch.ones(2), 0.0)


def test_head_reduction_modes():
    # 4 query heads, 2 KV heads (groups {0,1}, {2,3}), one token, two entries
    attn = torch.tensor([[[0.9, 0.1]], [[0.2, 0.8]], [[0.6, 0.4]], [[0.5, 0.5]]], dtype=torch.float64)
    assert reduce_heads(attn, 2, "per_head")[:, 0].tolist() == [[0.9, 0.8], [0.6, 0.5]]
    assert reduce_heads(attn, 2, "mean_of_max")[0, 0].tolist() == pytest.approx([0.75, 0.65])
    assert reduce_heads(attn, 2, "max")[0, 0].tolist() == pytest.approx([0.9, 0.8])
    with pytest.raises(ValueError, match="head_reduce"):
        reduce_heads(attn, 2, "sum")
    with pytest.raises(ValueError, match="KV heads"):
        reduce_heads(attn, 3)


@pytest.mark.claim("actkv", "C1")
def test_accumulator_running_mean_and_reset():
    acc = ActionAccumulator(1)
    acc.add(torch.tensor([[[0.5, 0.5]]]))
    acc.add(torch.tensor([[[0.2, 0.3, 0.5]]]))
    assert acc.mean()[0].tolist() == pytest.approx([0.35, 0.4, 0.25])
    acc.permute(torch.tensor([0, 2]))
    assert acc.mean()[0].tolist() == pytest.approx([0.35, 0.25])
    acc.reset()
    assert acc.mean()[0].tolist() == [0, 0]


def test_select_top_b_ties_keep_recent_and_inf_forces():
    s = torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]])
    assert select_top_b(s, 2).tolist() == [[3, 4]]
    s = torch.tensor([[math.inf, 0.0, 5.0, 0.0]])
    assert select_top_b(s, 2).tolist() == [[0, 2]]
    assert select_top_b(s, 10).tolist() == [[0, 1, 2, 3]]


# ------------------------------------------------------------------------------------------- Algorithm 2 (tests 2-3)
@pytest.mark.claim("actkv", "C2")
def test_budget_worked_example():
    t = DeepConfConfidence(np.array([5, 5, 4, 4, 3, 3, 2, 2, 1, 1], dtype=float))
    assert min_pool(t.values, 4, 2).tolist() == [4, 3, 2, 1]
    assert bottom_trend_slope(np.array([4, 3, 2, 1.0]), 0.1) == 0.0  # 10th percentile 1.3: one point kept
    assert bottom_trend_slope(np.array([4, 3, 2, 1.0]), 0.5) == pytest.approx(-1.0)  # 2.5: keeps m = 2, 3
    # [5, 1, 4, 2, 3], bottom 0.4: 40th percentile 2.6 keeps m = 1 (1) and m = 3 (2): slope (2 - 1) / (3 - 1)
    assert bottom_trend_slope(np.array([5, 1, 4, 2, 3.0]), 0.4) == pytest.approx(0.5)
    rule = ConfidenceBudget(budget=512, window=4, stride=2, bottom=0.1)
    assert rule.update(t) == 512
    rule = ConfidenceBudget(budget=512, window=4, stride=2, bottom=0.5)
    assert rule.slope(t) == pytest.approx(-1.0)
    assert rule.update(t) == 896
    cap = ConfidenceBudget(budget=20000, window=4, stride=2, bottom=0.5)
    assert cap.update(t) == 30000


@pytest.mark.claim("actkv", "C2")
def test_rising_then_falling_confidence_raises_budget_and_rising_does_not():
    up = np.linspace(1, 10, 60)
    down = np.linspace(10, 0.5, 60)
    rule = ConfidenceBudget(budget=512, window=8, stride=2, bottom=0.5)
    assert rule.update(DeepConfConfidence(np.concatenate([up, down]))) == 896
    rule = ConfidenceBudget(budget=512, window=8, stride=2, bottom=0.5)
    assert rule.update(DeepConfConfidence(up)) == 512  # confidence rising: never grows, never shrinks
    # the same rising-then-falling *surprisal* means confidence fell then rose: the converted value must not grow B
    rule = ConfidenceBudget(budget=512, window=8, stride=2, bottom=0.5)
    assert rule.update(Surprisal(np.concatenate([up, down])).to_confidence()) == 512


@pytest.mark.claim("actkv", "C2")
def test_surprisal_cannot_reach_the_rule():
    rule = ConfidenceBudget()
    with pytest.raises(TypeError, match="TokenConfidence"):
        rule.update(Surprisal(np.ones(100)))
    with pytest.raises(TypeError, match="TokenConfidence"):
        rule.update(np.ones(100))
    with pytest.raises(TypeError, match="form must be explicit"):
        TokenConfidence(np.ones(3), "x")
    assert not hasattr(DeepConfConfidence(np.ones(2)), "to_confidence")  # no second flip
    with pytest.raises(TypeError):
        DeepConfConfidence(np.ones(2)).concat(NegSurprisalConfidence(np.ones(2)))


@pytest.mark.claim("actkv", "C2")
def test_deepconf_direction_peaked_is_more_confident():
    flat = torch.full((1, 20), math.log(1 / 20))
    assert deepconf_confidence(flat).values[0] == pytest.approx(math.log(20))  # ~3.0
    peaked = torch.cat([torch.tensor([[math.log(1 - 19e-6)]]), torch.full((1, 19), math.log(1e-6))], dim=1)
    t = deepconf_confidence(peaked).values[0]
    assert t == pytest.approx(19 / 20 * -math.log(1e-6), rel=1e-4)  # ~13.1
    assert t > math.log(20)
    with pytest.raises(ValueError, match="log-prob"):
        deepconf_confidence(torch.ones(1, 20))


def test_confidence_from_logits_forms():
    logits = torch.tensor([[5.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    deep = confidence_from_logits(logits, k=3)
    assert isinstance(deep, DeepConfConfidence) and deep.values[0] > deep.values[1]
    neg = confidence_from_logits(logits, torch.tensor([0, 0]), form="neg_surprisal")
    assert isinstance(neg, NegSurprisalConfidence) and neg.values[0] > neg.values[1]
    with pytest.raises(ValueError, match="target tokens"):
        confidence_from_logits(logits, form="neg_surprisal")


def test_shrink_is_off_by_default_and_optional():
    up = DeepConfConfidence(np.linspace(0, 10, 40))
    rule = ConfidenceBudget(budget=1000, window=4, stride=2, bottom=0.5)
    for _ in range(3):
        rule.update(up)
    assert rule.budget == 1000
    rule = ConfidenceBudget(budget=1000, window=4, stride=2, bottom=0.5, allow_shrink=True)
    for _ in range(3):
        rule.update(up)
    assert rule.budget == 571


@pytest.mark.claim("actkv", "C1")
def test_algorithm1_step_composes_the_pieces():
    from agentpost.actkv.lrfu import algorithm1_step

    a1 = torch.tensor([[0.05, 0.05, 0.8, 0.1]], dtype=torch.float64)
    keep, ks = algorithm1_step(a1, torch.zeros(1, 0, dtype=torch.float64), 4)
    a2 = torch.tensor([[0, 0, 0, 0.05, 0.95, 0]], dtype=torch.float64)
    keep, ks = algorithm1_step(a2, ks, 2)
    assert keep.tolist() == [[2, 4]] and ks[0].tolist() == pytest.approx([0.4, 0.95])
