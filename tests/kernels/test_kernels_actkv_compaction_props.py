"""Hypothesis property tests of both compactions: survivors, permutation, freed blocks, stability."""

import pytest
import torch

from agentpost.kernels.actkv import compaction_plan
from tests.kernels._actkv_helpers import OPS, check_compaction, clone_all, random_paged

hypothesis = pytest.importorskip("hypothesis")  # a dev dependency; a bare GPU image may lack it
from hypothesis import given, settings, strategies as st  # noqa: E402


@pytest.mark.claim("actkv", "C5")
@settings(max_examples=30, deadline=None)
@given(data=st.data(), bs=st.sampled_from([2, 4, 8]), n_req=st.integers(1, 3))
def test_compaction_properties(data, bs, n_req):
    lens = data.draw(st.lists(st.integers(0, 30), min_size=n_req, max_size=n_req))
    method = data.draw(st.sampled_from(["inplace", "gather"]))
    k, v, table, seq = random_paged(lens, 2, 3, bs, seed=sum(lens))
    width = table.shape[1] * bs
    keep = torch.zeros(n_req, width, dtype=torch.bool)
    for r, n in enumerate(lens):
        bits = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
        keep[r, :n] = torch.tensor(bits, dtype=torch.bool)
    op = OPS[method][0]
    state = clone_all(k, v, table, seq)
    freed, perm = op(*state, keep)
    check_compaction(k, v, table, seq, *state, keep, freed, perm, bs, ordered=method == "gather")
    if method == "inplace":  # copies at most B rows (the gather baseline moves 2B), sources and targets disjoint
        plan = compaction_plan(table, seq, keep, bs)
        assert plan.src_slots.numel() <= int(keep.sum())
        assert set(plan.src_slots.tolist()).isdisjoint(plan.dst_slots.tolist())
    # repeated compaction is stable: keeping everything again moves nothing and frees nothing
    again = clone_all(*state)
    keep_all = torch.arange(width)[None, :] < state[3][:, None]
    freed2, perm2 = op(*again, keep_all)
    assert (freed2 < 0).all()
    for r in range(n_req):
        assert perm2[r, : int(state[3][r])].tolist() == list(range(int(state[3][r])))
    for a, b in zip(again, state):
        assert torch.equal(a, b)
