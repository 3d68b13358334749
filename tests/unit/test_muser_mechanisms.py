"""MuSeR formulas with worked examples (muser.md "Mechanism tests"); small synthetic tensors, labelled as such."""

import math

import numpy as np
import pytest
import torch

from agentpost.muser.compression import (
    FAR,
    MID,
    RECENT,
    compress,
    compressed_length,
    pool_blocks,
    segment_ids,
    segment_lengths,
)
from agentpost.muser.interests import (
    adaptive_score,
    interest_attention,
    interest_cosines,
    interest_weights,
    multi_query_interests,
    orthogonality_penalty,
)
from agentpost.muser.loss import alignment_infonce, next_k_contrastive
from agentpost.muser.train import ranking_metrics, target_ranks


@pytest.mark.claim("muser", "C1")
def test_compression_length_spec_example():
    # L = 10,000, L_r = 200, L_m = 3,200, strides 1/16/64 -> 200 + 200 + ceil(6,600/64) = 504 tokens
    assert segment_lengths(10_000, 200, 3_200) == (6_600, 3_200, 200)
    assert compressed_length(10_000, 200, 3_200, (1, 16, 64)) == 504
    x = torch.randn(1, 10_000, 2)
    z, zm = compress(x, torch.ones(1, 10_000, dtype=torch.bool), 200, 3_200, (1, 16, 64))
    assert z.shape == (1, 504, 2) and bool(zm.all())
    seg = segment_ids(10_000, 200, 3_200, (1, 16, 64))
    assert [(seg == s).sum().item() for s in (FAR, MID, RECENT)] == [104, 200, 200]
    # a history shorter than L_r passes raw
    assert compressed_length(150, 200, 3_200) == 150
    short = torch.randn(1, 150, 2)
    z, _ = compress(short, torch.ones(1, 150, dtype=torch.bool), 200, 3_200)
    assert torch.equal(z, short)


@pytest.mark.claim("muser", "C1")
def test_mean_pooling_block_means_permutation_and_order():
    # window of 10 = far 4 (stride 4), mid 4 (stride 2), recent 2; values e_k = k (1-d), k = 1..10
    x = torch.arange(1.0, 11.0).view(1, 10, 1)
    m = torch.ones(1, 10, dtype=torch.bool)
    z, zm = compress(x, m, recent_len=2, mid_len=4, strides=(1, 2, 4))
    assert z.flatten().tolist() == [2.5, 5.5, 7.5, 9.0, 10.0]  # mean(1..4); mean(5,6); mean(7,8); raw 9, 10
    # permuting inside a block leaves the token unchanged; swapping across blocks changes it
    perm = x.clone()
    perm[0, [0, 3]] = perm[0, [3, 0]]
    assert torch.equal(compress(perm, m, 2, 4, (1, 2, 4))[0], z)
    swap = x.clone()
    swap[0, [4, 6]] = swap[0, [6, 4]]
    assert not torch.equal(compress(swap, m, 2, 4, (1, 2, 4))[0], z)
    # padding (left) is excluded from the mean; an all-padding block becomes a padding token
    pm = m.clone()
    pm[0, :3] = False
    zp, zmp = compress(x, pm, 2, 4, (1, 2, 4))
    assert zp[0, 0, 0].item() == 4.0 and zmp.tolist() == [[True, True, True, True, True]]
    pm[0, :4] = False
    assert compress(x, pm, 2, 4, (1, 2, 4))[1][0, 0].item() is False
    # the partial block is the oldest one (blocks counted back from the segment boundary)
    z3, _ = pool_blocks(torch.arange(1.0, 6.0).view(1, 5, 1), torch.ones(1, 5, dtype=torch.bool), 2)
    assert z3.flatten().tolist() == [1.0, 2.5, 4.5]


def test_attentive_pooling_is_a_softmax_over_real_positions():
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    w = torch.tensor([math.log(3.0), 0.0])  # weights e^{w.e}: 3 and 1 -> 0.75 / 0.25
    z, _ = pool_blocks(x, torch.ones(1, 2, dtype=torch.bool), 2, pool="attentive", attn=w)
    assert torch.allclose(z, torch.tensor([[[0.75, 0.25]]]))
    z, _ = pool_blocks(x, torch.tensor([[False, True]]), 2, pool="attentive", attn=w)
    assert torch.allclose(z, torch.tensor([[[0.0, 1.0]]]))
    assert torch.allclose(
        pool_blocks(x, torch.ones(1, 2, dtype=torch.bool), 2, pool="attentive", attn=torch.zeros(2))[0],
        pool_blocks(x, torch.ones(1, 2, dtype=torch.bool), 2)[0],
    )


@pytest.mark.claim("muser", "C2")
def test_interest_attention_rows_sum_to_one_masking_and_constant_h():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, generator=g)
    h = torch.randn(2, 5, 4, generator=g)
    mask = torch.tensor([[True] * 5, [False, False, True, True, True]])
    a = interest_attention(q, h, mask)
    assert torch.allclose(a.sum(-1), torch.ones(2, 3))
    assert torch.all(a[1, :, :2] == 0)  # padding gets exactly zero weight
    # changing padded rows of H does not change any interest
    h2 = h.clone()
    h2[1, :2] = 100.0
    assert torch.allclose(multi_query_interests(q, h2, mask)[1], multi_query_interests(q, h, mask)[1])
    # all rows equal to h -> every u_m = h
    hc = torch.tensor([0.3, -1.0, 2.0, 0.5]).expand(1, 5, 4)
    u = multi_query_interests(q, hc, torch.ones(1, 5, dtype=torch.bool))
    assert torch.allclose(u, hc[:, :3])
    # worked example: q = (1, 0), H = ((2, 0), (0, 0)), d = 2 -> logits (2/sqrt2, 0), a = (0.8044, 0.1956)
    a = interest_attention(
        torch.tensor([[1.0, 0.0]]), torch.tensor([[[2.0, 0.0], [0.0, 0.0]]]), torch.ones(1, 2, dtype=torch.bool)
    )
    assert a.flatten().tolist() == pytest.approx([0.80443, 0.19557], abs=1e-5)


@pytest.mark.claim("muser", "C2")
def test_adaptive_score_worked_example_and_bounds():
    u = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    e = torch.tensor([[0.6, 0.8]])
    cos = interest_cosines(u, e)
    assert cos.flatten().tolist() == pytest.approx([0.6, 0.8])
    assert interest_weights(cos, 0.1).flatten().tolist() == pytest.approx([0.1192, 0.8808], abs=1e-4)
    assert adaptive_score(cos, 0.1).item() == pytest.approx(7.7616, abs=1e-4)
    assert adaptive_score(cos, 0.1, "max").item() == pytest.approx(8.0)
    same = interest_cosines(torch.tensor([[[1.0, 1.0], [2.0, 2.0]]]), e)
    assert interest_weights(same, 0.1).flatten().tolist() == pytest.approx([0.5, 0.5])
    assert adaptive_score(same, 0.1).item() == pytest.approx(same[0, 0, 0].item() / 0.1)
    g = torch.Generator().manual_seed(1)
    cos = interest_cosines(torch.randn(4, 6, 8, generator=g), torch.randn(50, 8, generator=g))
    s = adaptive_score(cos, 0.07)
    assert torch.all(s <= cos.max(1).values / 0.07 + 1e-5) and torch.all(s >= cos.min(1).values / 0.07 - 1e-5)


@pytest.mark.claim("muser", "C2")
def test_orthogonality_penalty_worked_examples():
    orth = torch.tensor([[[1.0, 0.0], [0.0, 3.0]]])
    assert orthogonality_penalty(orth).item() == pytest.approx(0.0)
    u = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])  # u_2 = (1,1) normalised -> (1,1)/sqrt 2
    assert orthogonality_penalty(u, "normalized").item() == pytest.approx(1.0)  # 2 x 0.5
    assert orthogonality_penalty(u, "raw").item() == pytest.approx(2.0)  # 2 x 1^2
    assert orthogonality_penalty(u, "mean_gram").item() == pytest.approx(0.25)  # (0 + .5 + .5 + 0)/4
    with pytest.raises(ValueError, match="ortho form"):
        orthogonality_penalty(u, "mi")


def test_next_k_contrastive_worked_example_and_masks():
    pos = torch.tensor([[2.0, 1.0]])
    neg = torch.tensor([[0.0, 0.0]])
    want = -0.5 * (math.log(math.e**2 / (math.e**2 + 2)) + math.log(math.e / (math.e + 2)))
    assert want == pytest.approx(0.39549, abs=1e-5)
    assert next_k_contrastive(pos, neg).item() == pytest.approx(want, abs=1e-6)
    # a masked positive drops out of the mean; a masked negative drops out of the denominator
    assert next_k_contrastive(pos, neg, torch.tensor([[True, False]])).item() == pytest.approx(
        -math.log(math.e**2 / (math.e**2 + 2)), abs=1e-6
    )
    assert next_k_contrastive(
        pos, torch.tensor([[0.0, 50.0]]), neg_mask=torch.tensor([[True, False]])
    ).item() == pytest.approx(
        -0.5 * (math.log(math.e**2 / (math.e**2 + 1)) + math.log(math.e / (math.e + 1))), abs=1e-6
    )


@pytest.mark.claim("muser", "C3")
def test_alignment_infonce_worked_example():
    eye = torch.eye(2)
    assert alignment_infonce(eye, eye, tau=1.0).item() == pytest.approx(math.log(math.e + 1) - 1, abs=1e-6)
    assert alignment_infonce(eye, eye.flip(0), tau=1.0).item() == pytest.approx(math.log(math.e + 1), abs=1e-6)


def test_full_catalogue_ranks_mask_seen_items_and_break_ties_by_index():
    scores = torch.tensor([[0.9, 0.5, 0.7, 0.5, 0.1]])  # items 1..5
    assert target_ranks(scores, torch.tensor([4]), [np.array([])]).tolist() == [3]  # 0.9, 0.7, item 2 tie
    assert target_ranks(scores, torch.tensor([4]), [np.array([1, 2])]).tolist() == [1]
    m = ranking_metrics(np.array([0, 9, 10, 49, 50]))
    assert m["recall@10"].tolist() == [1, 1, 0, 0, 0] and m["recall@50"].tolist() == [1, 1, 1, 1, 0]
    assert m["ndcg@10"].tolist() == pytest.approx([1.0, 1 / math.log2(11), 0, 0, 0])
