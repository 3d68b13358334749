"""Token mapping (toolsearcher.md test 5), inert tool text (test 6) and the strict protocol, on a SYNTHETIC stand-in
world (12 random-embedding API docs in 3 categories; labelled synthetic, used only for mechanism tests)."""

import numpy as np
import pytest
import torch

from agentpost.rl import segment_ids
from agentpost.toolsearcher.credit import group_credit
from agentpost.toolsearcher.env import SearchEnv, answer_text, clauses, parse_turn, search_call
from agentpost.toolsearcher.loss import LossConfig, event_level_loss, token_advantages
from agentpost.toolsearcher.policy import PRIOR_THETA, LogLinearPolicy, Task, layout, token_logits, token_logp
from agentpost.toolsearcher.retrieval import Retriever

CATS = ("Alpha", "Beta", "Gamma")


class SyntheticRetriever(Retriever):
    """Dense retriever over random unit vectors (synthetic stand-in)."""

    def __init__(self, rng):
        names = [f"{CATS[i % 3]}.tool{i // 3}.api{i}" for i in range(12)]
        super().__init__(names, [n.split(".")[0] for n in names])
        self.doc_emb = rng.normal(size=(12, 8))
        self.doc_emb /= np.linalg.norm(self.doc_emb, axis=1, keepdims=True)
        self.memo = {}

    def scores(self, query):
        return self.doc_emb @ self.memo[query]


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(0)
    ret = SyntheticRetriever(rng)
    env = SearchEnv(ret, [f"doc {n} " * 30 for n in ret.names], topk=3, max_turns=4, max_response_tokens=40)
    cent = np.stack([ret.doc_emb[ret.categories == c].mean(0) for c in CATS])
    cent /= np.linalg.norm(cent, axis=1, keepdims=True)
    tasks = []
    for u in range(2):
        cl = clauses(f"Request {u} asks for alpha things. It also wants beta things. And gamma too please.")
        emb = rng.normal(size=(len(cl), 8))
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        ret.memo.update(zip(cl, emb))
        tasks.append(Task(f"t{u}", (ret.names[u], ret.names[5 + u]), cl, emb))
    pol = LogLinearPolicy(env, ret.doc_emb, cent)
    groups = [(t, [pol.run(t, rng) for _ in range(3)]) for t in tasks]
    eps = [e for _, g in groups for e in g]
    factors = []
    for t, g in groups:
        gc = group_credit([e.rollout.results for e in g], [e.rollout.answer for e in g], t.targets)
        factors += gc.factors([e.rollout.has_answer for e in g])
    lay = layout(eps)
    adv, mask, dropped = token_advantages(lay.mask, factors, "raise")
    return lay, adv, mask, factors, eps


@pytest.mark.claim("toolsearcher", "C3")
def test_token_mapping_constant_per_segment(world):
    lay, adv, mask, factors, eps = world
    ids = segment_ids(mask)
    assert (mask == 0).any() and (mask == 1).any()
    for i, row in enumerate(factors):
        for t, value in enumerate(row, start=1):
            assert torch.all(adv[i][ids[i] == t] == value)
        assert torch.all(adv[i][mask[i] == 0] == 0)
        # one search segment per search event (+ the answer segment)
        assert len(row) == len(eps[i].rollout.results) + int(eps[i].rollout.has_answer)


def _grad(lay, adv, mask, perturb):
    theta = torch.tensor(PRIOR_THETA + 0.3, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor(PRIOR_THETA, dtype=torch.float64)
    logits = token_logits(lay, theta) + perturb
    logp = token_logp(logits, lay.chosen)
    logp_ref = token_logp(token_logits(lay, ref), lay.chosen).detach()
    loss, _ = event_level_loss(logp, lay.logp_old, logp_ref, adv, mask, LossConfig(kl_coef=0.1))
    loss.backward()
    return loss.detach(), theta.grad


@pytest.mark.claim("toolsearcher", "C3")
def test_tool_response_tokens_contribute_nothing(world):
    lay, adv, mask, _, _ = world
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(lay.valid.shape, generator=g, dtype=torch.float64) * 5
    tool = (mask == 0)[..., None]
    base_loss, base = _grad(lay, adv, mask, torch.zeros_like(noise))
    l_tool, g_tool = _grad(lay, adv, mask, noise * tool)
    assert torch.equal(base, g_tool) and torch.equal(base_loss, l_tool)
    l_asst, g_asst = _grad(lay, adv, mask, noise * ~tool)
    assert not torch.allclose(base, g_asst)
    # without the mask the same tool-position perturbation would change the gradient (the test is not vacuous)
    full = torch.ones_like(mask)
    assert not torch.allclose(_grad(lay, adv, full, torch.zeros_like(noise))[1], _grad(lay, adv, full, noise * tool)[1])


def test_segment_mismatch_is_dropped_and_counted(world):
    lay, _, _, factors, _ = world
    bad = [row + [1.0] if i == 0 else row for i, row in enumerate(factors)]
    adv, keep, dropped = token_advantages(lay.mask, bad, "drop")
    assert dropped == 1 and keep[0].sum() == 0 and torch.all(adv[0] == 0)


def test_strict_protocol_parsing():
    cats = CATS
    assert parse_turn(search_call("find weather", "Alpha"), cats).category == "Alpha"
    assert parse_turn(search_call("find weather"), cats).kind == "search"
    assert parse_turn(answer_text(["a.b.c"]), cats).kind == "answer"
    for bad in [
        "hello",
        "<tool_call>{not json}</tool_call>",
        search_call("x") + search_call("y"),
        '<tool_call>{"name": "other", "arguments": {"query": "x"}}</tool_call>',
        search_call("x", "Zeta"),
        search_call("x") + answer_text([]),
    ]:
        assert parse_turn(bad, cats).kind == "malformed"
    assert clauses("Find a hotel. Also book it now please. Ok.") == (
        "Find a hotel. Also book it now please. Ok.",
        "Find a hotel.",
        "Also book it now please.",
    )


def test_tool_text_truncated_and_malformed_turn_retrieves_nothing(world):
    lay, *_ = world
    rng = np.random.default_rng(1)
    ret = SyntheticRetriever(rng)
    ret.memo["q"] = ret.doc_emb[0]
    env = SearchEnv(ret, ["word " * 500] * 12, topk=5, max_turns=8, max_response_tokens=25)
    idx, text = env.respond(parse_turn(search_call("q"), CATS))
    assert idx[0] == 0 and len(idx) == 5
    assert len(env._tok.encode(text[len("<tool_response>") : -len("</tool_response>")])) <= 26
    idx, text = env.respond(parse_turn("garbage", CATS))
    assert idx == [] and "error" in text
