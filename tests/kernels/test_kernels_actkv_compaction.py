"""In-place compaction (Algorithm 4) and the gather baseline vs their references (properties: *_props.py)."""

import pytest
import torch

from agentpost.kernels.actkv import compact_inplace, compaction_plan
from tests.kernels._actkv_helpers import OPS, check_compaction, clone_all, randperm, random_paged


def _keep(lens, width, kind, seed=0):
    g = torch.Generator().manual_seed(seed)
    keep = torch.zeros(len(lens), width, dtype=torch.bool)
    for r, n in enumerate(lens):
        if kind == "full":
            keep[r, :n] = True
        elif kind == "head":
            keep[r, : n // 2] = True
        elif kind == "middle":
            keep[r, n // 4 : n // 4 + n // 2] = True
        elif kind == "tail":
            keep[r, n - n // 2 : n] = True
        elif kind == "scattered":
            keep[r, randperm(g, n)[: (2 * n) // 3]] = True
    return keep


@pytest.mark.claim("actkv", "C5")
def test_spec_worked_example_y4_bs16_b40():
    """Spec mechanism test 5: Y=4, bs=16, B=40 -> X=3, window [16, 56); |src|=|dst|, disjoint; kept in [16, 56)."""
    k, v, table, lens = random_paged([64], 2, 4, 16, seed=1)
    for seed in range(3):
        keep = _keep([64], 64, "scattered", seed)
        keep[0] = False
        keep[0, randperm(torch.Generator().manual_seed(seed), 64)[:40]] = True
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
        check_compaction(k, v, table, lens, kk, vv, tt, ll, keep, freed, perm, 16, ordered=False)


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
    check_compaction(k, v, table, seq, *got, keep, freed, perm, bs, ordered=method == "gather")


@pytest.mark.claim("actkv", "C5")
@pytest.mark.parametrize("method", ["inplace", "gather"])
def test_keep_mask_exactly_seq_len_wide_with_partial_last_block(method):
    """keep may be [R, n]: Alg. 4's window then reaches into the dead tail of the partial last block."""
    k, v, table, seq = random_paged([11], 2, 4, 4, seed=8)  # Y=3 blocks of 4, last one holds 3 entries
    keep = torch.zeros(1, 11, dtype=torch.bool)
    keep[0, [0, 1, 2, 9]] = True  # B=4 -> X=1, window [8, 12) ends past n=11; moves 0, 1, 2 into 8, 10, 11
    state = clone_all(k, v, table, seq)
    freed, perm = OPS[method][0](*state, keep)
    check_compaction(k, v, table, seq, *state, keep, freed, perm, 4, ordered=method == "gather")
    if method == "inplace":
        assert perm[0].tolist() == [0, 9, 1, 2]


def test_bad_keep_masks_raise():
    k, v, table, seq = random_paged([5], 1, 2, 4)
    dead = torch.zeros(1, 8, dtype=torch.bool)
    dead[0, 6] = True
    with pytest.raises(ValueError, match="beyond seq_lens"):
        compact_inplace(k, v, table, seq, dead)
    with pytest.raises(ValueError, match="bool"):
        compact_inplace(k, v, table, seq, torch.zeros(1, 8, dtype=torch.int64))
