"""In-place compaction (Algorithm 4) and the gather baseline vs their references, plus property tests."""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from agentpost.kernels.actkv import (compact_gather, compact_gather_reference, compact_inplace,
                                     compact_inplace_reference, compaction_plan)
from _actkv_helpers import clone_all, dense_entries, random_paged

OPS = {"inplace": (compact_inplace, compact_inplace_reference), "gather": (compact_gather, compact_gather_reference)}


def _keep(lens, width, kind, seed=0):
    g = torch.Generator().manual_seed(seed)
    keep = torch.zeros(len(lens), width, dtype=torch.bool)
    for r, n in enumerate(lens):
        if kind == "full":
            keep[r, :n] = True
        elif kind == "head":
            keep[r, : n // 2] = True
        elif kind == "middle":
            keep[r, n // 4: n // 4 + n // 2] = True
        elif kind == "tail":
            keep[r, n - n // 2: n] = True
        elif kind == "scattered":
            keep[r, torch.randperm(n, generator=g)[: (2 * n) // 3]] = True
    return keep


def _check_result(before_k, before_v, table0, lens0, k, v, table, lens, keep, freed, perm, bs, ordered):
    """Every invariant of a compaction: survivors, permutation, freed blocks, no leaked or duplicated block."""
    for r in range(len(lens0)):
        n, B = int(lens0[r]), int(keep[r].sum())
        kept = keep[r].nonzero().flatten()
        assert int(lens[r]) == B
        p = perm[r, :B]
        assert sorted(p.tolist()) == kept.tolist()  # exactly the keep set survives, each once
        if ordered:
            assert p.tolist() == kept.tolist()
        old_k = dense_entries(before_k, table0, lens0, r)
        old_v = dense_entries(before_v, table0, lens0, r)
        assert torch.equal(dense_entries(k, table, lens, r), old_k[p])  # metadata permuted by perm matches keys
        assert torch.equal(dense_entries(v, table, lens, r), old_v[p])
        n_freed = math.ceil(n / bs) - math.ceil(B / bs)
        got_freed = [b for b in freed[r].tolist() if b >= 0]
        assert len(got_freed) == n_freed
        used_before = [b for b in table0[r].tolist() if b >= 0]
        used_after = [b for b in table[r].tolist() if b >= 0]
        assert sorted(got_freed + used_after) == sorted(used_before)
        assert len(used_after) == len(used_before) - n_freed and set(got_freed).isdisjoint(used_after)


@pytest.mark.claim("actkv", "C5")
def test_spec_worked_example_y4_bs16_b40():
    """Spec mechanism test 5: Y=4, bs=16, B=40 -> X=3, window [16, 56); |src|=|dst|, disjoint; kept in [16, 56)."""
    k, v, table, lens = random_paged([64], 2, 4, 16, seed=1)
    for seed in range(3):
        keep = _keep([64], 64, "scattered", seed)
        keep[0] = False
        keep[0, torch.randperm(64, generator=torch.Generator().manual_seed(seed))[:40]] = True
        plan = compaction_plan(table, lens, keep, 16)
        window = set(range(16, 56))
        kept = set(keep[0].nonzero().flatten().tolist())
        assert plan.n_freed.tolist() == [1] and plan.new_lens.tolist() == [40]
        assert plan.src_slots.numel() == plan.dst_slots.numel() == len(window - kept) == len(kept - window)
        assert set(plan.src_slots.tolist()).isdisjoint(plan.dst_slots.tolist())
        kk, vv, tt, ll = clone_all(k, v, table, lens)
        freed, perm = compact_inplace(kk, vv, tt, ll, keep)
        assert freed.tolist() == [[int(table[0, 0])]] and tt[0, :3].tolist() == table[0, 1:4].tolist()
        assert set(perm[0].tolist()) == kept
        # entries already inside the window stayed in place
        assert all(perm[0, j - 16] == j for j in window & kept)
        _check_result(k, v, table, lens, kk, vv, tt, ll, keep, freed, perm, 16, ordered=False)


@pytest.mark.claim("actkv", "C5")
@pytest.mark.parametrize("method", ["inplace", "gather"])
@pytest.mark.parametrize("kind", ["empty", "full", "head", "middle", "tail", "scattered"])
def test_compaction_matches_reference(method, kind):
    op, ref = OPS[method]
    lens, bs = [1, 16, 23, 45], 8
    k, v, table, seq = random_paged(lens, 3, 5, bs, seed=4)
    keep = _keep(lens, table.shape[1] * bs, kind, seed=5)
    got = clone_all(k, v, table, seq)
    want = clone_all(k, v, table, seq)
    freed, perm = op(*got, keep)
    rfreed, rperm = ref(*want, keep)
    assert torch.equal(freed, rfreed) and torch.equal(perm, rperm)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    _check_result(k, v, table, seq, *got, keep, freed, perm, bs, ordered=method == "gather")


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
    _check_result(k, v, table, seq, *state, keep, freed, perm, bs, ordered=method == "gather")
    if method == "inplace":  # copies only kept entries outside the window, never more than min(B, n - B)
        plan = compaction_plan(table, seq, keep, bs)
        assert plan.src_slots.numel() <= sum(min(int(keep[r].sum()), n - int(keep[r].sum())) for r, n in enumerate(lens))
    # repeated compaction is stable: keeping everything again moves nothing and frees nothing
    again = clone_all(*state)
    keep_all = torch.arange(width)[None, :] < state[3][:, None]
    freed2, perm2 = op(*again, keep_all)
    assert (freed2 < 0).all()
    for r in range(n_req):
        assert perm2[r, : int(state[3][r])].tolist() == list(range(int(state[3][r])))
    for a, b in zip(again, state):
        assert torch.equal(a, b)


def test_bad_keep_masks_raise():
    k, v, table, seq = random_paged([5], 1, 2, 4)
    dead = torch.zeros(1, 8, dtype=torch.bool)
    dead[0, 6] = True
    with pytest.raises(ValueError, match="beyond seq_lens"):
        compact_inplace(k, v, table, seq, dead)
    with pytest.raises(ValueError, match="bool"):
        compact_inplace(k, v, table, seq, torch.zeros(1, 8, dtype=torch.int64))
