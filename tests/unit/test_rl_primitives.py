"""Worked numbers from rl-primitives.md ("Mechanism tests") for agentpost.rl."""

import math

import pytest
import torch

from agentpost.rl import (
    ADVANTAGE_ESTIMATORS, AGGREGATIONS, SegmentMismatch, aggregate, broadcast_segment_values,
    broadcast_sequence_values, clipped_policy_loss, get_advantage, group_advantage, kl_estimate, policy_objective,
    rloo_advantage, segment_ids,
)


def test_group_normalisation_worked_numbers():
    a = group_advantage([1, 0, 0, 1], [0, 0, 0, 0])
    assert torch.allclose(a, torch.tensor([0.8660, -0.8660, -0.8660, 0.8660], dtype=torch.float64), atol=1e-4)
    # unbiased std = 0.57735 -> 0.5 / (0.57735 + 1e-6)
    assert a[0].item() == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-6), abs=1e-12)
    b = group_advantage([1, 0, 0, 1], [0, 0, 0, 0], std_ddof=0)
    assert torch.allclose(b, torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64), atol=1e-5)


def test_all_equal_group_and_singletons():
    assert torch.equal(group_advantage([2.0, 2.0, 2.0], [7, 7, 7]), torch.zeros(3, dtype=torch.float64))
    assert torch.equal(group_advantage([0.3], [1]), torch.tensor([0.3], dtype=torch.float64))
    assert torch.equal(group_advantage([0.3], [1], singleton="zero"), torch.zeros(1, dtype=torch.float64))


def test_groups_are_independent_and_no_std_variant():
    a = group_advantage([1, 0, 5, 3], [0, 0, 1, 1])
    assert a[0] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-6))
    assert a[2] == pytest.approx(1.0 / (math.sqrt(2.0) + 1e-6))
    nostd = get_advantage("grpo_no_std")([1, 0, 5, 3], [0, 0, 1, 1])
    assert nostd.tolist() == [0.5, -0.5, 1.0, -1.0]
    batch = group_advantage([1, 0, 5, 3], [0, 0, 1, 1], scale="batch")
    sd = torch.tensor([1.0, 0, 5, 3]).std().item()  # unbiased over the batch
    assert batch[0].item() == pytest.approx(0.5 / (sd + 1e-6), rel=1e-6)


def test_rloo_and_registry():
    assert rloo_advantage([1.0, 0.0, 0.0, 1.0], [0] * 4).tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert {"grpo", "grpo_no_std", "rloo"} <= set(ADVANTAGE_ESTIMATORS)
    with pytest.raises(KeyError, match="unknown advantage estimator"):
        get_advantage("nope")
    with pytest.raises(ValueError, match="equal length"):
        group_advantage([1.0, 2.0], [0])


def _one(x):
    return torch.tensor([[x]], dtype=torch.float64)


def test_dual_clip_worked_numbers():
    logp, old, m = _one(math.log(5.0)), _one(0.0), _one(1.0)
    assert policy_objective(logp, old, _one(-1.0), m).item() == pytest.approx(-5.0)
    assert policy_objective(logp, old, _one(-1.0), m, dual_clip_c=3.0).item() == pytest.approx(-3.0)
    assert policy_objective(logp, old, _one(1.0), m).item() == pytest.approx(1.2)
    assert policy_objective(logp, old, _one(1.0), m, dual_clip_c=3.0).item() == pytest.approx(1.2)


def test_sequence_ratio():
    lr = torch.tensor([[0.1, -0.1, 0.3]], dtype=torch.float64)
    m = torch.ones_like(lr)
    obj = policy_objective(lr, torch.zeros_like(lr), m, m, ratio_level="sequence", eps_low=10, eps_high=10)
    assert obj[0].tolist() == pytest.approx([math.exp(0.1)] * 3, abs=1e-4)
    seg = torch.tensor([[1, 1, 2]])
    obj = policy_objective(lr, torch.zeros_like(lr), m, m, ratio_level="segment", segment_ids=seg,
                           eps_low=10, eps_high=10)
    assert obj[0].tolist() == pytest.approx([1.0, 1.0, math.exp(0.3)])


def test_kl_estimators_worked_numbers():
    lp, ref = torch.tensor([-1.0], dtype=torch.float64), torch.tensor([-1.5], dtype=torch.float64)
    assert kl_estimate(lp, ref, kind="k1").item() == pytest.approx(0.5)
    assert kl_estimate(lp, ref, kind="k2").item() == pytest.approx(0.125)
    assert kl_estimate(lp, ref, kind="k3").item() == pytest.approx(math.exp(-0.5) - 1 + 0.5)
    assert kl_estimate(lp, ref, kind="k3").item() == pytest.approx(0.10653, abs=1e-5)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1000, generator=g) * 3, torch.randn(1000, generator=g) * 3
    assert (kl_estimate(x, y, kind="k3") >= 0).all()
    lp = lp.clone().requires_grad_(True)
    st = kl_estimate(lp, ref, kind="k3", straight_through_k2=True)
    assert st.item() == pytest.approx(0.10653, abs=1e-5)
    st.sum().backward()
    assert lp.grad.item() == pytest.approx(0.5)  # the k2 gradient: delta
    with pytest.raises(ValueError, match="kind must be"):
        kl_estimate(x, y, kind="k4")


def _agg_case():
    loss = torch.tensor([[2.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    return loss, mask


def test_aggregation_worked_numbers():
    loss, mask = _agg_case()
    assert aggregate(loss, mask, "token_mean").item() == pytest.approx(1.25)
    assert aggregate(loss, mask, "seq_mean_token_mean").item() == pytest.approx(1.5)
    assert aggregate(loss, mask, "seq_mean_token_sum").item() == pytest.approx(2.5)
    assert aggregate(loss, mask, "seq_sum_over_width").item() == pytest.approx(5 / 3)
    assert aggregate(loss, mask, "dr_grpo", max_len=3).item() == pytest.approx(5 / 6)
    with pytest.raises(KeyError, match="unknown aggregation"):
        aggregate(loss, mask, "mean")
    assert set(AGGREGATIONS) >= {"token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "global_token_mean"}


def test_dp_invariance_with_global_denominator():
    loss, mask = _agg_case()
    total = mask.sum().item()
    split = sum(aggregate(loss[i : i + 1], mask[i : i + 1], "global_token_mean", global_tokens=total) for i in range(2))
    assert split.item() == pytest.approx(aggregate(loss, mask, "token_mean").item())


def test_mask_invariance_of_loss_and_gradient():
    g = torch.Generator().manual_seed(1)
    shape = (3, 6)
    logits = torch.randn(shape, generator=g, dtype=torch.float64)
    old, ref = torch.randn(shape, generator=g, dtype=torch.float64), torch.randn(shape, generator=g, dtype=torch.float64)
    adv = torch.randn(shape, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 0, 0, 0, 0], [0, 1, 1, 1, 0, 1]])

    def run(lp):
        lp = lp.clone().requires_grad_(True)
        loss, _ = clipped_policy_loss(lp, old, ref, adv, mask, eps_low=0.2, eps_high=0.2, dual_clip_c=3.0,
                                      kl_coef=0.1, kl_kind="k3", agg_mode="token_mean")
        loss.backward()
        return loss.detach(), lp.grad

    l1, g1 = run(logits)
    perturbed = torch.where(mask.bool(), logits, logits + 7.0)
    l2, g2 = run(perturbed)
    assert torch.equal(l1, l2) and torch.equal(g1, g2)
    assert torch.all(g1[~mask.bool()] == 0) and torch.any(g1[mask.bool()] != 0)


def test_segment_ids_and_broadcast():
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 0, 1, 1], [1, 1, 1, 0, 0, 0, 0, 0, 0]])
    assert segment_ids(mask).tolist() == [[0, 1, 1, 0, 0, 2, 0, 3, 3], [1, 1, 1, 0, 0, 0, 0, 0, 0]]
    adv = broadcast_segment_values(mask, [[0.5, 0.0, -1.0], [2.0]])
    assert adv.tolist() == [[0, 0.5, 0.5, 0, 0, 0.0, 0, -1.0, -1.0], [2, 2, 2, 0, 0, 0, 0, 0, 0]]
    with pytest.raises(SegmentMismatch, match="row 1: 1 assistant segments but 2 values"):
        broadcast_segment_values(mask, [[0.5, 0.0, -1.0], [2.0, 1.0]])
    assert broadcast_sequence_values(mask, [1.0, -1.0])[1].tolist() == [-1, -1, -1, 0, 0, 0, 0, 0, 0]


def test_library_conventions_trl_and_openrlhf_eps():
    # TRL: eps 1e-4 (scale_rewards="group"); OpenRLHF group_norm: eps 1e-9; both with Bessel's correction
    trl = group_advantage([1, 0, 0, 1], [0] * 4, eps=1e-4)
    assert trl[0].item() == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-4), abs=1e-12)
    orl = group_advantage([1, 0, 0, 1], [0] * 4, eps=1e-9)
    assert orl[0].item() == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-9), abs=1e-12)


def test_asymmetric_clip_bounds():
    logp, old, m, a = _one(math.log(1.5)), _one(0.0), _one(1.0), _one(1.0)
    assert policy_objective(logp, old, a, m, eps_low=0.2, eps_high=0.28).item() == pytest.approx(1.28)
    logp = _one(math.log(0.5))
    assert policy_objective(logp, old, -a, m, eps_low=0.2, eps_high=0.28).item() == pytest.approx(-0.8)
