"""``kv_backend="paged"`` (LSE recovery, Alg. 3, + in-place compaction, Alg. 4, on a paged mirror) against the
dense backend (eager probabilities + gather) on a tiny random GQA model: same keep sets, same cache, same log-probs.
Synthetic token stream; the Triton kernels run in the interpreter (tests/conftest.py)."""

import numpy as np
import pytest
import torch

from agentpost.actkv.engine import CompressedSession, generate, score_trace
from agentpost.actkv.policies import make_policy
from agentpost.actkv.regions import RoundLayout
from agentpost.models.lm import tiny_random_lm
from tests.unit._actkv_helpers import CountingTok

torch.set_num_threads(1)

N, PREFIX, BUDGET = 72, 8, 12
SPANS = ((8, 36), (36, 64), (64, 72))
REGIONS = ((14, 17), (22, 27), (44, 49))  # [start, end) action tokens; round 0 has two regions (the second counts)
# a small nucleus leaves fewer hits than B: zero keep scores are then kept by recency (the tie-break is exercised)
# and at the second compression Alg. 4 leaves the survivors out of position order
ACTKV = {"p": 0.3}


@pytest.fixture(scope="module")
def model():
    return tiny_random_lm(seed=0, vocab_size=512)


@pytest.fixture(scope="module")
def trace():
    ids = torch.randint(5, 500, (N,), generator=torch.Generator().manual_seed(3))
    mask = [False] * N
    for a, b in REGIONS:
        mask[a:b] = [True] * (b - a)
    return ids, RoundLayout(PREFIX, SPANS, tuple(mask), tuple(a for a, _ in REGIONS))


def _chunks(a, b, step=5):
    """Chunks of a round, cut at region starts so ``region_open`` marks a chunk's first token (as score_trace)."""
    cuts = sorted({a, b} | {s for s, _ in REGIONS if a < s < b} | set(range(a, b, step)))
    return zip(cuts[:-1], cuts[1:])


@pytest.mark.claim("actkv", "C4")
@pytest.mark.claim("actkv", "C5")
def test_paged_backend_keeps_the_same_entries_as_dense(model, trace):
    ids, lay = trace
    amask = torch.tensor(lay.action_mask)
    sess = {
        be: CompressedSession(model, make_policy("actkv", **ACTKV), BUDGET, prefix_len=PREFIX, kv_backend=be)
        for be in ("dense", "paged")
    }
    sess["paged"].paged.initial_blocks = 1  # the paged pool starts at one block and must grow (re-homing entries)
    for s in sess.values():
        s.feed(ids[:PREFIX])
    permuted = False
    for r, (a, b) in enumerate(SPANS):
        if r:
            for s in sess.values():
                s.round = r
                s.compress()
            dense, paged = sess["dense"], sess["paged"]
            for layer in range(2):
                # keep set, as trace positions of the surviving entries, identical on every layer
                assert torch.equal(dense.positions[layer], paged.positions[layer]), (r, layer)
                dl, pl = dense.cache.layers[layer], paged.cache.layers[layer]
                assert torch.equal(dl.keys, pl.keys) and torch.equal(dl.values, pl.values)
                # the paged pool holds the survivors in Alg. 4's order; order[] maps them to the dense order
                k_paged, _ = paged.paged.cache.to_dense(layer, 0)
                order = paged.paged.order[layer]
                assert torch.equal(k_paged, dl.keys[0, :, PREFIX:][:, order])
                permuted |= not torch.equal(order, torch.arange(order.numel()))
            assert paged.cache_len == PREFIX + BUDGET
        for c0, c1 in _chunks(a, b):
            out = {be: s.feed(ids[c0:c1], amask[c0:c1], c0 in lay.region_starts) for be, s in sess.items()}
            assert torch.allclose(out["dense"], out["paged"], atol=1e-5)
    assert permuted  # Alg. 4 moved survivors out of position order at least once: the write-back order mattered
    st = sess["paged"].stats
    assert st.kv_backend == "paged" and st.compressions == sess["dense"].stats.compressions == 2
    assert all(st.kernel_s.get(r, 0) > 0 for r in (1, 2))


@pytest.mark.claim("actkv", "C4")
def test_score_trace_paged_gives_dense_action_logprobs(model, trace):
    ids, lay = trace
    res = {
        be: score_trace(model, ids.tolist(), lay, make_policy("actkv", **ACTKV), BUDGET, chunk=8, kv_backend=be)
        for be in ("dense", "paged")
    }
    assert np.abs(res["dense"].logprob - res["paged"].logprob).max() < 1e-5
    assert res["paged"].action_nll.size == sum(b - a for a, b in REGIONS)
    assert res["paged"].stats.budgets == res["dense"].stats.budgets == [BUDGET, BUDGET]


def test_greedy_generation_is_the_same_on_both_backends(model):
    prompt = torch.randint(10, 500, (12,), generator=torch.Generator().manual_seed(1)).tolist()
    runs = {
        be: generate(
            model,
            CountingTok(),
            prompt,
            4,
            make_policy("actkv", **ACTKV),
            3,
            max_new_tokens=24,
            on_action_end=lambda g: [11, 12],
            kv_backend=be,
        )
        for be in ("dense", "paged")
    }
    assert runs["dense"][0] == runs["paged"][0]
    assert runs["paged"][1].compressions == runs["dense"][1].compressions > 0


@pytest.mark.parametrize(
    "name,kw", [("h2o", {}), ("actkv", {"head_reduce": "per_head"}), ("actkv", {"head_reduce": "max"})]
)
def test_paged_backend_refuses_what_it_does_not_implement(model, name, kw):
    with pytest.raises(ValueError, match="mean_of_max"):
        CompressedSession(model, make_policy(name, **kw), 10, prefix_len=2, kv_backend="paged")
