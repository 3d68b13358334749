"""Worked numbers from rl-primitives.md ("Mechanism tests") for agentpost.rl."""

import math

import pytest
import torch

from agentpost.rl import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    SegmentMismatch,
    aggregate,
    broadcast_segment_values,
    broadcast_sequence_values,
    clipped_policy_loss,
    get_advantage,
    group_advantage,
    kl_estimate,
    policy_objective,
    rloo_advantage,
    segment_ids,
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
    obj = policy_objective(
        lr, torch.zeros_like(lr), m, m, ratio_level="segment", segment_ids=seg, eps_low=10, eps_high=10
    )
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
    old, ref = (
        torch.randn(shape, generator=g, dtype=torch.float64),
        torch.randn(shape, generator=g, dtype=torch.float64),
    )
    adv = torch.randn(shape, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 0, 0, 0, 0], [0, 1, 1, 1, 0, 1]])

    def run(lp):
        lp = lp.clone().requires_grad_(True)
        loss, _ = clipped_policy_loss(
            lp,
            old,
            ref,
            adv,
            mask,
            eps_low=0.2,
            eps_high=0.2,
            dual_clip_c=3.0,
            kl_coef=0.1,
            kl_kind="k3",
            agg_mode="token_mean",
        )
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


def test_k3_unclamped_unless_asked_and_verl_low_var_kl_clamps():
    # delta = logp - logp_ref = -29: k3 = e^29 - 29 - 1 = 3.9313e12 with no clamp at all (was 4.85e8 = e^20 - 21)
    lp, ref = torch.tensor([-30.0], dtype=torch.float64), torch.tensor([-1.0], dtype=torch.float64)
    assert kl_estimate(lp, ref, kind="k3").item() == pytest.approx(math.exp(29) - 30, rel=1e-12)
    assert kl_estimate(lp, ref, kind="k3").item() == pytest.approx(3.9313e12, rel=1e-4)
    lp = lp.clone().requires_grad_(True)
    kl_estimate(lp, ref, kind="k3").sum().backward()
    assert lp.grad.item() == pytest.approx(1 - math.exp(29), rel=1e-12)  # d/dlogp (e^-d + d - 1) = 1 - e^-d, not 0
    # delta = -3: k3 = e^3 - 4 = 16.0855; verl's low_var_kl clamps the result to 10; an explicit clamp is honoured
    lp, ref = torch.tensor([-4.0], dtype=torch.float64), torch.tensor([-1.0], dtype=torch.float64)
    assert kl_estimate(lp, ref, kind="k3").item() == pytest.approx(16.0855, abs=1e-4)
    assert kl_estimate(lp, ref, kind="low_var_kl").item() == 10.0
    assert kl_estimate(lp, ref, kind="k3", clamp=10.0).item() == 10.0
    assert kl_estimate(lp, ref, kind="low_var_kl", clamp=5.0).item() == 5.0
    # low_var_kl equals k3 where no clamp binds (delta = 0.5: 0.10653)
    assert kl_estimate(torch.tensor([-1.0]), torch.tensor([-1.5]), kind="low_var_kl").item() == pytest.approx(
        0.10653, abs=1e-5
    )
    with pytest.raises(ValueError, match="clamp must be > 0"):
        kl_estimate(lp, ref, clamp=0.0)


def test_loss_applies_the_configured_kl_clamp():
    # one token, ratio 1 (logp = logp_old), A = 0: the loss is beta * KL alone; delta = -3
    lp, old, ref = _one(-4.0), _one(-4.0), _one(-1.0)
    adv, m = _one(0.0), _one(1.0)
    kw = dict(eps_low=0.2, eps_high=0.2, dual_clip_c=None, kl_coef=1.0, agg_mode="token_mean")
    assert clipped_policy_loss(lp, old, ref, adv, m, kl_kind="k3", **kw)[0].item() == pytest.approx(16.0855, abs=1e-4)
    assert clipped_policy_loss(lp, old, ref, adv, m, kl_kind="low_var_kl", **kw)[0].item() == pytest.approx(10.0)
    assert clipped_policy_loss(lp, old, ref, adv, m, kl_kind="k3", kl_clamp=2.0, **kw)[0].item() == pytest.approx(2.0)
    from agentpost.toolsearcher.loss import LossConfig, event_level_loss

    cfg = LossConfig(kl_coef=1.0, dual_clip_c=None)  # the official config: low_var_kl
    assert event_level_loss(lp, old, ref, adv, m, cfg)[0].item() == pytest.approx(10.0)


def test_dr_grpo_singleton_follows_verl():
    # verl compute_grpo_outcome_advantage: a group of one has mean 0 and std 1, so r = 0.7 stays 0.7
    a = get_advantage("grpo_no_std")([0.7, 1.0, 0.0], [5, 6, 6])
    assert a.tolist() == pytest.approx([0.7, 0.5, -0.5])
    assert get_advantage("grpo_no_std")([0.7], [5], singleton="zero").tolist() == [0.0]


def test_non_finite_values_at_masked_positions_do_not_contribute():
    # row 0: tokens 0, 1 active; token 2 is padding with logp = -inf and a NaN advantage
    lp = torch.tensor([[math.log(0.5), math.log(0.25), -math.inf]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[math.log(0.5), math.log(0.25), 0.0]], dtype=torch.float64)
    ref = torch.tensor([[math.log(0.5), math.log(0.5), math.nan]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -2.0, math.nan]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    loss, parts = clipped_policy_loss(
        lp,
        old,
        ref,
        adv,
        mask,
        eps_low=0.2,
        eps_high=0.2,
        dual_clip_c=3.0,
        kl_coef=0.1,
        kl_kind="k3",
        agg_mode="token_mean",
    )
    # ratios are 1: objective [1, -2] -> pg = -(1 - 2) / 2 = 0.5; k3 at delta = -ln 2: 2 - ln 2 - 1 = 0.30685 on
    # token 1 and 0 on token 0 -> KL mean 0.153426; loss = 0.5 + 0.1 * 0.153426
    k3 = 2 - math.log(2) - 1
    assert loss.item() == pytest.approx(0.5 + 0.1 * k3 / 2, abs=1e-12)
    loss.backward()
    assert torch.isfinite(lp.grad).all() and lp.grad[0, 2].item() == 0.0
    # d/dlogp: -A/2 from the surrogate (ratio 1), + 0.1/2 * (1 - e^{-delta}) from k3
    assert lp.grad[0, 0].item() == pytest.approx(-0.5, abs=1e-12)
    assert lp.grad[0, 1].item() == pytest.approx(1.0 + 0.05 * (1 - 2.0), abs=1e-12)
    for mode, kw in (
        ("token_mean", {}),
        ("seq_mean_token_mean", {}),
        ("seq_mean_token_sum", {}),
        ("seq_sum_over_width", {}),
        ("dr_grpo", {"max_len": 3}),
        ("global_token_mean", {"global_tokens": 2}),
    ):
        assert torch.isfinite(aggregate(torch.tensor([[1.0, 3.0, math.inf]]), mask, mode, **kw))
    assert aggregate(torch.tensor([[1.0, 3.0, math.nan]]), mask, "token_mean").item() == 2.0


def test_clip_frac_counts_only_binding_clips():
    # Four tokens, eps 0.2: ratios 1.5 (A=+1: high clip binds), 1.5 (A=-1: outside the range, does not bind),
    # 0.5 (A=-1: low clip binds), 0.5 (A=+1: does not bind); a fifth token, masked out, would bind.
    # verl pg_clipfrac: masked mean of [clipped loss > unclipped loss] = 2 / 4.
    logp_old = torch.zeros(1, 5, dtype=torch.float64)
    logp = torch.log(torch.tensor([[1.5, 1.5, 0.5, 0.5, 3.0]], dtype=torch.float64))
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    _, parts = clipped_policy_loss(
        logp,
        logp_old,
        None,
        adv,
        mask,
        eps_low=0.2,
        eps_high=0.2,
        dual_clip_c=None,
        kl_coef=0.0,
        kl_kind="k3",
        agg_mode="token_mean",
    )
    assert parts["clip_frac"].item() == pytest.approx(0.5)
    # At ratio 1.1 (inside the range) nothing binds, whatever the sign; with A = 0 nothing binds either.
    inside = torch.log(torch.full((1, 4), 1.1, dtype=torch.float64))
    _, parts = clipped_policy_loss(
        inside,
        logp_old[:, :4],
        None,
        adv[:, :4],
        mask[:, :4],
        eps_low=0.2,
        eps_high=0.2,
        dual_clip_c=None,
        kl_coef=0.0,
        kl_kind="k3",
        agg_mode="token_mean",
    )
    assert parts["clip_frac"].item() == 0.0
    _, parts = clipped_policy_loss(
        logp,
        logp_old,
        None,
        torch.zeros_like(adv),
        mask,
        eps_low=0.2,
        eps_high=0.2,
        dual_clip_c=None,
        kl_coef=0.0,
        kl_kind="k3",
        agg_mode="token_mean",
    )
    assert parts["clip_frac"].item() == 0.0


def test_clip_frac_uses_the_sequence_ratio_at_sequence_level():
    # Token log-ratios log 2 and -log 2 average to 0: the sequence ratio is 1, so no clip binds (A = +1), while
    # the token-level ratio 2 binds on the first token (1 of 2).
    logp = torch.log(torch.tensor([[2.0, 0.5]], dtype=torch.float64))
    logp_old = torch.zeros_like(logp)
    adv = torch.ones_like(logp)
    mask = torch.ones(1, 2)
    kw = dict(eps_low=0.2, eps_high=0.2, dual_clip_c=None, kl_coef=0.0, kl_kind="k3", agg_mode="token_mean")
    assert clipped_policy_loss(logp, logp_old, None, adv, mask, **kw)[1]["clip_frac"].item() == pytest.approx(0.5)
    assert (
        clipped_policy_loss(logp, logp_old, None, adv, mask, ratio_level="sequence", **kw)[1]["clip_frac"].item() == 0.0
    )


def test_seq_mean_aggregations_skip_fully_masked_rows_unless_asked():
    # Rows: [2, 4] fully kept, [6, -] one token, [9, 9] fully masked (padding of an empty response).
    loss = torch.tensor([[2.0, 4.0], [6.0, 7.0], [9.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0], [0, 0]])
    # verl agg_loss: row means 3 and 6 over the 2 live rows = 4.5; row sums 6 and 6 -> 6.
    assert aggregate(loss, mask, "seq_mean_token_mean").item() == pytest.approx(4.5)
    assert aggregate(loss, mask, "seq_mean_token_sum").item() == pytest.approx(6.0)
    # Counting the empty row (TRL grpo's reading): (3 + 6 + 0) / 3 = 3 and (6 + 6 + 0) / 3 = 4.
    assert aggregate(loss, mask, "seq_mean_token_mean", empty_rows="count").item() == pytest.approx(3.0)
    assert aggregate(loss, mask, "seq_mean_token_sum", empty_rows="count").item() == pytest.approx(4.0)
    # Without empty rows the two readings agree; an all-empty batch gives 0, not NaN.
    assert aggregate(loss[:2], mask[:2], "seq_mean_token_mean", empty_rows="count").item() == pytest.approx(4.5)
    assert aggregate(loss, torch.zeros_like(mask), "seq_mean_token_mean").item() == 0.0
    with pytest.raises(ValueError, match="empty_rows"):
        aggregate(loss, mask, "seq_mean_token_mean", empty_rows="drop")
