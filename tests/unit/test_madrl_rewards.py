"""MaD-RL rewards (mad-rl.md, "Mechanism tests" 1, 2 and 5): hand-worked table, autograd derivatives, edge cases."""

import pytest
import torch

from agentpost.madrl.rewards import (
    DIVERGENCES,
    TABLE_RELATION,
    arm_rewards,
    category_reward,
    divergence,
    empirical_distribution,
    matching_rewards,
    neg_gradient,
    smooth_target,
)
from agentpost.rl import group_advantage

P_STAR = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
P_HAT = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)  # counts 6/3/1 of G = 10

# Hand-computed (mad-rl.md test 1), e.g. forward KL: 0.5/0.6 - 1 = -0.1667, 0.2/0.1 - 1 = 1; JSD for c=3:
# m = 0.15, (log 0.15 - log 0.1)/2 = log(1.5)/2 = 0.2027.
TABLE = {
    "l2": [-0.1, 0.0, 0.1],
    "forward_kl": [-0.1667, 0.0, 1.0],
    "reverse_kl": [-0.1823, 0.0, 0.6931],
    "jsd": [-0.0435, 0.0, 0.2027],
}
# mad-rl.md test 2: -dD/dp_hat at the same point (L2 given there already times 1/2).
NEG_GRAD = {
    "l2": [-0.2, 0.0, 0.2],
    "forward_kl": [0.8333, 1.0, 2.0],
    "reverse_kl": [-1.1823, -1.0, -0.3069],
    "jsd": [-0.0435, 0.0, 0.2027],
}


def autograd_neg_gradient(p_hat, p_star, name):
    x = p_hat.clone().requires_grad_(True)
    divergence(x, p_star, name).backward()
    return -x.grad


@pytest.mark.claim("madrl", "C3")
@pytest.mark.parametrize("name", DIVERGENCES)
def test_hand_worked_reward_table(name):
    assert category_reward(P_HAT, P_STAR, name).tolist() == pytest.approx(TABLE[name], abs=1e-4)
    assert neg_gradient(P_HAT, P_STAR, name).tolist() == pytest.approx(NEG_GRAD[name], abs=1e-4)


@pytest.mark.claim("madrl", "C3")
@pytest.mark.parametrize("name", DIVERGENCES)
def test_gradient_form_equals_autograd_at_random_points(name):
    gen = torch.Generator().manual_seed(0)
    for k in (2, 5, 9):
        for _ in range(20):
            p_hat = torch.rand(k, generator=gen, dtype=torch.float64) + 0.01
            p_hat = p_hat / p_hat.sum()
            p_star = torch.rand(k, generator=gen, dtype=torch.float64) + 0.01
            p_star = p_star / p_star.sum()
            auto = autograd_neg_gradient(p_hat, p_star, name)
            torch.testing.assert_close(neg_gradient(p_hat, p_star, name), auto, rtol=1e-12, atol=1e-12)
            kappa, b = TABLE_RELATION[name]
            torch.testing.assert_close(category_reward(p_hat, p_star, name), kappa * auto + b, rtol=1e-12, atol=1e-12)


@pytest.mark.claim("madrl", "C3")
@pytest.mark.parametrize("name", DIVERGENCES)
def test_table_and_gradient_forms_give_the_same_zscored_advantages(name):
    cats = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1, 2])
    gid = torch.zeros(10, dtype=torch.int64)
    table = matching_rewards(cats, gid, P_STAR, name, form="table", target_smoothing=0.0)
    grad = matching_rewards(cats, gid, P_STAR, name, form="gradient", target_smoothing=0.0)
    assert table[[0, 6, 9]].tolist() == pytest.approx(TABLE[name], abs=1e-4)
    # Equal up to the std's eps (1e-6 by default), which is not scale-free; with eps = 0 exactly equal.
    torch.testing.assert_close(
        group_advantage(table, gid, eps=0.0), group_advantage(grad, gid, eps=0.0), rtol=1e-9, atol=1e-9
    )


def test_empirical_distribution_counts_invalid_in_the_denominator():
    cats = torch.tensor([0, 0, 1, -1])
    assert empirical_distribution(cats, 3, eps=1e-6).tolist() == pytest.approx([0.5, 0.25, 1e-6])
    assert empirical_distribution(cats, 3, eps=1e-6, invalid_policy="exclude").tolist() == pytest.approx(
        [2 / 3, 1 / 3, 1e-6]
    )
    with pytest.raises(ValueError, match="categories must lie"):
        empirical_distribution(torch.tensor([3]), 3, eps=1e-6)
    with pytest.raises(ValueError, match="eps must be > 0"):
        empirical_distribution(cats, 3, eps=0.0)


def test_edge_cases():
    # A sampled category always has p_hat >= 1/G, so its reward never sees the eps clamp; an unsampled one gets no
    # sample, hence no reward term.
    cats = torch.tensor([0, 0, 1, 1])
    r = matching_rewards(cats, torch.zeros(4), P_STAR, "reverse_kl", target_smoothing=0.0)
    assert r.tolist() == pytest.approx(
        [torch.log(P_STAR[0] / 0.5).item()] * 2 + [torch.log(P_STAR[1] / 0.5).item()] * 2
    )
    # Zero target mass with smoothing: finite rewards.
    zero_target = torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)
    for name in DIVERGENCES:
        assert torch.isfinite(matching_rewards(torch.tensor([0, 1, 2]), torch.zeros(3), zero_target, name)).all()
    assert smooth_target(zero_target, 0.1).tolist() == pytest.approx([0.1 / 1.3, 0.6 / 1.3, 0.6 / 1.3])
    # All-invalid group: every reward -1, z-scored advantage 0.
    allinv = matching_rewards(torch.tensor([-1] * 4), torch.zeros(4), P_STAR, "jsd")
    assert allinv.tolist() == [-1.0] * 4
    assert group_advantage(allinv, torch.zeros(4)).tolist() == [0.0] * 4


def test_groups_are_separate_and_batch_scope_pools():
    cats = torch.tensor([0, 0, 1, 2])
    gid = torch.tensor([0, 0, 1, 1])
    per_group = matching_rewards(cats, gid, P_STAR, "l2", target_smoothing=0.0)
    assert per_group.tolist() == pytest.approx([0.5 - 1.0, 0.5 - 1.0, 0.3 - 0.5, 0.2 - 0.5])
    pooled = matching_rewards(cats, gid, P_STAR, "l2", target_smoothing=0.0, phat_scope="batch")
    assert pooled.tolist() == pytest.approx([0.0, 0.0, 0.05, -0.05])


def test_arms_and_mixture():
    cats = torch.tensor([0, 0, 1, -1])
    correct = torch.tensor([1.0, 0.0, 1.0, 0.0])
    gid = torch.zeros(4)
    assert arm_rewards("correctness", cats, correct, gid, P_STAR).tolist() == [1.0, 0.0, 1.0, 0.0]
    jsd = arm_rewards("jsd", cats, correct, gid, P_STAR)
    mix = arm_rewards("mixture", cats, correct, gid, P_STAR, task_reward_weight=0.5)
    assert (mix - jsd).tolist() == pytest.approx([0.5, 0.0, 0.5, 0.0])
    with pytest.raises(ValueError, match="unknown arm"):
        arm_rewards("bonus", cats, correct, gid, P_STAR)
    with pytest.raises(ValueError, match="target must be non-negative and sum to 1"):
        matching_rewards(cats, gid, [0.5, 0.6, 0.1], "jsd")


def test_token_space_baseline_rewards():
    """C2's arms: temperature trains on correctness; entropy adds -beta log pi(y) (hand-computed: beta 0.1,
    log pi = -2, -10, -0.5, -4 gives 1.2, 1.0, 1.05, 0.4)."""
    cats = torch.tensor([0, 0, 1, -1])
    correct = torch.tensor([1.0, 0.0, 1.0, 0.0])
    gid = torch.zeros(4)
    assert arm_rewards("temperature", cats, correct, gid, P_STAR).tolist() == [1.0, 0.0, 1.0, 0.0]
    lp = torch.tensor([-2.0, -10.0, -0.5, -4.0])
    r = arm_rewards("entropy", cats, correct, gid, P_STAR, sequence_logp=lp, entropy_coef=0.1)
    assert r.tolist() == pytest.approx([1.2, 1.0, 1.05, 0.4])
    with pytest.raises(ValueError, match="needs sequence_logp and entropy_coef > 0"):
        arm_rewards("entropy", cats, correct, gid, P_STAR, entropy_coef=0.1)
    with pytest.raises(ValueError, match="sequence_logp has shape"):
        arm_rewards("entropy", cats, correct, gid, P_STAR, sequence_logp=lp[:3], entropy_coef=0.1)


def test_entropy_reward_gradient_is_the_entropy_bonus_gradient():
    """Exact expectation over a 4-sequence softmax 'policy': sum_y pi(y) (q_y - beta log pi(y)) grad log pi(y)
    equals grad (E_pi[q] + beta H(pi)) by autograd (the C2 entropy arm's reward is an unbiased entropy bonus)."""
    theta = torch.tensor([0.3, -1.0, 0.7, 0.1], dtype=torch.float64, requires_grad=True)
    q = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    beta = 0.3
    pi = torch.softmax(theta, -1)
    (pi * q - beta * pi * torch.log(pi)).sum().backward()
    with torch.no_grad():
        p = torch.softmax(theta, -1)
        r = arm_rewards(
            "entropy",
            torch.zeros(4, dtype=torch.int64),
            q,
            torch.zeros(4),
            P_STAR,
            sequence_logp=torch.log(p),
            entropy_coef=beta,
        )
        grad_logp = torch.eye(4, dtype=torch.float64) - p  # row y: grad_theta log pi(y)
        score = (p[:, None] * r[:, None] * grad_logp).sum(0)
    torch.testing.assert_close(score, theta.grad, rtol=0, atol=1e-12)
