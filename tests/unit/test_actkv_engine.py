"""The dense generation loop on a tiny random GQA model (transformers 5 DynamicCache): exactness of FullKV,
budget/peak invariants, prefix protection, round-boundary-only eviction, re-rotation, greedy decoding."""

import numpy as np
import pytest
import torch

from agentpost.actkv.budget import ConfidenceBudget, DeepConfConfidence
from agentpost.actkv.engine import CompressedSession, generate, rerotate, score_trace
from agentpost.actkv.policies import POLICIES, make_policy
from agentpost.actkv.regions import ActionRegionDetector, RoundLayout
from agentpost.models.lm import tiny_random_lm
from tests.unit._actkv_helpers import CountingTok

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model():
    return tiny_random_lm(seed=0)


N = 120
PREFIX = 20
SPANS = ((20, 50), (50, 90), (90, 120))


@pytest.fixture(scope="module")
def trace():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(10, 4000, (N,), generator=g)
    mask = [False] * N
    for a in (40, 80, 110):
        mask[a : a + 6] = [True] * 6
    return ids, RoundLayout(PREFIX, SPANS, tuple(mask), (39, 79, 109))


def _kw(name):
    return {"window": 8} if name == "snapkv" else {}


def test_fullkv_matches_one_forward(model, trace):
    ids, lay = trace
    with torch.no_grad():
        lp = torch.log_softmax(model(ids.view(1, -1)).logits[0].double(), -1)
    ref = lp[:-1].gather(-1, ids[1:].view(-1, 1)).squeeze(-1).numpy()
    res = score_trace(model, ids.tolist(), lay, make_policy("fullkv"), None, chunk=16)
    assert np.abs(res.logprob[1:] - ref).max() < 1e-5
    assert res.peak_entries == N


@pytest.mark.claim("actkv", "C3")
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_peak_entries_bounded_by_prefix_budget_and_round(model, trace, name):
    ids, lay = trace
    budget = 30
    res = score_trace(model, ids.tolist(), lay, make_policy(name, **_kw(name)), budget, chunk=16)
    for r, (a, b) in enumerate(SPANS):
        bound = PREFIX + budget + (b - a) if name != "fullkv" else b
        if name not in ("fullkv", "actkv"):  # baselines let the open part grow to B + L_bar (+ one chunk)
            bound = PREFIX + budget + int(lay.mean_round_len) + 16
        assert res.stats.peak_entries[r] <= bound, (name, r)
    assert np.isfinite(res.action_nll).all() and res.action_nll.size == 18


@pytest.mark.claim("actkv", "C3")
def test_actkv_evicts_only_at_round_boundaries_and_never_the_prefix(model, trace):
    ids, lay = trace
    sess = CompressedSession(model, make_policy("actkv"), 10, prefix_len=PREFIX)
    sess.feed(ids[:PREFIX])
    sizes = []
    for r, (a, b) in enumerate(SPANS):
        if r:
            sess.compress()
            assert sess.cache_len == PREFIX + 10  # prefix + B after compression
        sess.round = r
        for s in range(a, b, 8):
            before = sess.cache_len
            sess.feed(ids[s : min(s + 8, b)], torch.tensor(lay.action_mask[s : min(s + 8, b)]))
            assert sess.cache_len == before + min(8, b - s)  # nothing evicted inside a round
        sizes.append(sess.cache_len)
        for pos in sess.positions:
            assert pos[:, :PREFIX].tolist() == [list(range(PREFIX))] * 2
    assert sess.stats.compressions == 2


def _full_logp(model, ids):
    """Log-softmax of one plain forward: row t - 1 is the distribution that decoded token t."""
    with torch.no_grad():
        return torch.log_softmax(model(ids.view(1, -1)).logits[0].double(), -1)


def test_budget_rule_reads_the_confidence_of_the_tokens_fed_so_far(model, trace):
    # B = 200 > every evictable count: compressions evict nothing, so the logits equal one plain forward and the
    # confidence the rule sees can be computed independently: T_t = -mean of the top-20 log-probs of row t - 1
    ids, lay = trace
    lp = _full_logp(model, ids)
    want = np.full(N, np.nan)
    want[PREFIX:] = (-lp[PREFIX - 1 : N - 1].topk(20, dim=-1).values.mean(-1)).numpy()
    rule = ConfidenceBudget(budget=0, window=4, stride=2, bottom=0.5, growth=2.0, cap=100000)
    res = score_trace(model, ids.tolist(), lay, make_policy("actkv"), 200, budget_rule=rule, chunk=16)
    np.testing.assert_allclose(res.confidence, want, rtol=0, atol=1e-6)
    # each compression (before tokens 50 and 90) applies Alg. 2 to the confidence of tokens 20..50, then 20..90
    # (token 50 is decoded by the row of token 49, fed before the boundary)
    expect, b = [], 200
    for p in (50, 90):
        b = ConfidenceBudget(budget=b, window=4, stride=2, bottom=0.5, growth=2.0, cap=100000).update(
            DeepConfConfidence(want[PREFIX : p + 1])
        )
        expect.append(b)
    assert res.stats.budgets == expect and [bb for _, bb in rule.history] == expect


@pytest.mark.claim("actkv", "C2")
def test_confidence_only_on_generated_tokens(model, trace):
    # each round opens with 10 observation tokens (tool-returned text): no confidence there, nor on the prefix
    ids, lay = trace
    gen = [False] * N
    for a, b in SPANS:
        gen[a + 10 : b] = [True] * (b - a - 10)
    lay = RoundLayout(PREFIX, SPANS, lay.action_mask, lay.region_starts, tuple(gen))
    lp = _full_logp(model, ids)
    conf = -lp[:-1].topk(20, dim=-1).values.mean(-1).numpy()  # conf[t - 1]: confidence of decoding token t
    rule = ConfidenceBudget(budget=0, window=4, stride=2, bottom=0.5)
    res = score_trace(model, ids.tolist(), lay, make_policy("actkv"), 200, budget_rule=rule, chunk=16)
    g = np.array(gen)
    assert np.isnan(res.confidence[~g]).all() and np.isfinite(res.confidence[g]).all()
    np.testing.assert_allclose(res.confidence[g], conf[np.flatnonzero(g) - 1], rtol=0, atol=1e-6)

    # what the rule read at each boundary: generated tokens 30..49 before token 50 (20 values, where the old
    # engine passed 31, observations included), then 30..49 + 60..89 before token 90
    class Seen(ConfidenceBudget):
        def update(self, confidence):
            seen.append(confidence.values.copy())
            return super().update(confidence)

    seen = []
    score_trace(model, ids.tolist(), lay, make_policy("actkv"), 200, budget_rule=Seen(budget=0), chunk=16)
    assert [len(v) for v in seen] == [20, 50]
    np.testing.assert_allclose(seen[1], conf[np.r_[30:50, 60:90] - 1], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="generated_mask must cover action_mask"):
        RoundLayout(PREFIX, SPANS, lay.action_mask, lay.region_starts, tuple([False] * N))


def test_rerotation_composes_with_rope(model):
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    k = torch.randn(1, 2, 5, 16)
    pos = torch.tensor([[3, 7, 11, 20, 40]])
    cos, sin = model.model.rotary_emb(k, pos)
    k_rot, _ = apply_rotary_pos_emb(k, k, cos, sin)
    new = torch.tensor([[0, 1, 2, 3, 4]])
    cos2, sin2 = model.model.rotary_emb(k, new)
    want, _ = apply_rotary_pos_emb(k, k, cos2, sin2)
    got = rerotate(model, k_rot[0], (new - pos).expand(2, -1))
    assert torch.allclose(got, want[0], atol=1e-5)


def test_streamingllm_rerotated_keys_continue_from_cache_length(model, trace):
    ids, lay = trace
    sess = CompressedSession(model, make_policy("streamingllm", rerotate_keys=True), 20, prefix_len=PREFIX)
    sess.feed(ids[:PREFIX])
    sess.feed(ids[PREFIX:70])
    sess.compress()
    assert sess.positions[0][0].tolist() == list(range(PREFIX + 20))
    sess.feed(ids[70:72])
    assert sess.positions[1][0, -2:].tolist() == [PREFIX + 20, PREFIX + 21]


def test_unknown_kv_backend_is_refused(model):
    with pytest.raises(ValueError, match="kv_backend"):
        CompressedSession(model, make_policy("actkv"), 10, prefix_len=2, kv_backend="blocks")


def test_greedy_generation_fullkv_matches_argmax_and_compresses_on_action_close(model):
    prompt = torch.randint(10, 4000, (12,), generator=torch.Generator().manual_seed(3)).tolist()
    out, stats = generate(model, CountingTok(), prompt, 4, make_policy("fullkv"), None, max_new_tokens=6)
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(6):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    assert out == seq[12:]

    # with the budget rule (B = 200 never evicts, so a plain forward replays it): one compression per closed
    # action, none elsewhere, and at the k-th one the rule has the confidence of exactly the tokens decoded so
    # far, observations [11, 12] excluded; each value is -mean(top-20 log-probs) of the row that decoded it
    class Seen(ConfidenceBudget):
        def update(self, confidence):
            seen.append(confidence.values.copy())
            return super().update(confidence)

    seen, tok = [], CountingTok()
    out, stats = generate(
        model,
        tok,
        prompt,
        4,
        make_policy("actkv"),
        200,
        max_new_tokens=40,
        on_action_end=lambda g: [11, 12],
        budget_rule=Seen(budget=200, window=2, stride=1),
    )
    texts = [t for _, t in tok.log[len(prompt) - 4 :]]  # one text per element of out, in order
    det = ActionRegionDetector("qwen")
    for _, t in tok.log[: len(prompt) - 4]:
        det.push(t)
    seq, k, conf, ends = list(prompt), 0, [], []
    while k < len(out):
        lp = _full_logp(model, torch.tensor(seq + [0]))[len(seq) - 1]
        assert int(lp.argmax()) == out[k]  # a decoded token
        conf.append(float(-lp.topk(20).values.mean()))
        seq.append(out[k])
        if det.push(texts[k]).closed:
            ends.append(len(conf))
            assert out[k + 1 : k + 3] == [11, 12]
            for t in texts[k + 1 : k + 3]:
                det.push(t)
            seq += [11, 12]
            k += 2
        k += 1
    assert len(ends) >= 3 and len(stats.budgets) == len(seen) == len(ends)
    assert [len(v) for v in seen] == ends
    np.testing.assert_allclose(seen[-1], conf[: ends[-1]], rtol=0, atol=1e-6)


def test_neg_surprisal_form_records_the_log_probability_of_each_token(model, trace):
    ids, lay = trace
    lp = _full_logp(model, ids)
    rule = ConfidenceBudget(budget=0, window=4, stride=2, bottom=0.5)
    res = score_trace(
        model, ids.tolist(), lay, make_policy("actkv"), 200, budget_rule=rule, chunk=16, confidence_form="neg_surprisal"
    )
    want = lp[PREFIX - 1 : N - 1].gather(-1, ids[PREFIX:].view(-1, 1)).squeeze(-1).numpy()  # log p(x_t), no flip
    np.testing.assert_allclose(res.confidence[PREFIX:], want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(res.confidence[PREFIX:], res.logprob[PREFIX:], rtol=0, atol=1e-6)


def test_snapkv_query_head_keeps_a_set_per_query_head(model, trace):
    ids, lay = trace
    full = score_trace(model, ids.tolist(), lay, make_policy("fullkv"), None, chunk=16)
    res = score_trace(model, ids.tolist(), lay, make_policy("snapkv", window=8, head_mode="query_head"), 30, chunk=16)
    # exact until the first compression (the expanded cache holds the same keys once per query head)
    first = PREFIX + 30 + int(lay.mean_round_len) + 1
    np.testing.assert_allclose(res.logprob[:first], full.logprob[:first], rtol=0, atol=1e-5)
    sess = CompressedSession(model, make_policy("snapkv", window=8, head_mode="query_head"), 10, prefix_len=PREFIX)
    sess.feed(ids[:PREFIX])
    sess.feed(ids[PREFIX:60])
    sess.compress()
    pos = sess.positions[0]
    assert sess.cache.layers[0].keys.shape[1] == 4 and pos.shape == (4, PREFIX + 10)  # H_q = 4 heads stored
    assert any(not torch.equal(pos[h], pos[h + 1]) for h in (0, 2))  # heads of one group keep different entries
