"""Gated delta rule and state drift: spec mechanism tests 1, 2, 3 and 5 (papers/deltas.md), and agreement of the
recurrent and chunked forms with each other and with transformers' Qwen3.5 reference."""

import math

import pytest
import torch
from transformers.models.qwen3_5.modeling_qwen3_5 import torch_recurrent_gated_delta_rule

from agentpost.deltas.rule import chunk_gated_delta, recurrent_gated_delta, state_drift


def _one_token(k, v, alpha, beta):
    """[1, 1, 1, d] inputs for a single token on one head."""
    d = k.numel()
    return (
        torch.zeros(1, 1, 1, d),
        k.view(1, 1, 1, -1),
        v.view(1, 1, 1, -1),
        torch.full((1, 1, 1), math.log(alpha)),
        torch.full((1, 1, 1), beta),
    )


def _stored_state(k, v):
    """A state that already maps unit key k to v (S^T k = v) and holds one more orthogonal pair."""
    k2 = torch.zeros_like(k)
    k2[1] = 1.0
    return (torch.outer(k, v) + torch.outer(k2, torch.ones_like(v)))[None, None]


@pytest.mark.claim("deltas", "C4")
def test_already_stored_pair_gives_zero_drift_for_any_beta():
    k = torch.tensor([1.0, 0.0, 0.0])
    v = torch.tensor([0.5, -2.0, 1.0])
    S0 = _stored_state(k, v)
    for beta in (0.1, 0.5, 1.0):
        _, S1, drift = recurrent_gated_delta(*_one_token(k, v, 1.0, beta), initial_state=S0, chunk_size=1)
        assert torch.equal(S1, S0)
        assert drift.item() == 0.0


@pytest.mark.claim("deltas", "C4")
def test_novel_value_drift_is_beta_times_value_change_over_state_norm():
    k = torch.tensor([1.0, 0.0, 0.0])
    v, v_new = torch.tensor([0.5, -2.0, 1.0]), torch.tensor([1.5, -2.0, 3.0])
    S0 = _stored_state(k, v)
    beta = 0.5
    _, S1, drift = recurrent_gated_delta(*_one_token(k, v_new, 1.0, beta), initial_state=S0, chunk_size=1)
    # ||S1 - S0||_F = beta ||v' - v|| = 0.5 * sqrt(1 + 0 + 4); ||S0||_F = sqrt(0.25 + 4 + 1 + 3) = sqrt(8.25)
    assert torch.linalg.matrix_norm(S1 - S0).item() == pytest.approx(0.5 * math.sqrt(5.0), rel=1e-6)
    assert drift.item() == pytest.approx(0.5 * math.sqrt(5.0) / (math.sqrt(8.25) + 1e-6), rel=1e-6)
    absolute = state_drift(S0, S1, drift_norm="absolute")
    assert absolute.item() == pytest.approx(0.5 * math.sqrt(5.0), rel=1e-6)


def test_decay_alone_produces_drift_which_the_write_term_excludes():
    k = torch.tensor([1.0, 0.0, 0.0])
    v = torch.tensor([0.5, -2.0, 1.0])
    S0 = _stored_state(k, v)
    alpha, beta = 0.5, 0.5
    _, S1, _ = recurrent_gated_delta(*_one_token(k, v, alpha, beta), initial_state=S0)
    # S' - S = (alpha - 1) S + beta (1 - alpha) k v^T
    expected = (alpha - 1) * S0 + beta * (1 - alpha) * torch.outer(k, v)[None, None]
    torch.testing.assert_close(S1 - S0, expected)
    assert torch.linalg.matrix_norm(S1 - S0).item() > 0.1


def test_write_term_drift_over_a_two_token_chunk_by_hand():
    k1, k2 = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0])
    v = torch.tensor([0.5, -2.0, 1.0])
    S0 = _stored_state(k1, v)  # k1 -> v, k2 -> ones; ||S0||^2 = 5.25 + 3
    inputs = [
        torch.cat(pair, dim=1) for pair in zip(_one_token(k1, v, 0.5, 0.5), _one_token(k2, torch.ones(3), 0.5, 1.0))
    ]
    _, S2, drift = recurrent_gated_delta(
        *inputs, initial_state=S0, chunk_size=2, drift_source="write", dtype=torch.float64
    )
    # token 1 (stored pair): S1 = 0.5 S0 + 0.5 (1 - 0.5) k1 v^T; token 2: S1^T k2 = 0.5 ones, decayed 0.25 ones, so
    # S2 = 0.25 S0 + 0.125 k1 v^T + 0.75 k2 ones^T. Write term: S2 - e^{G_C} S0 with e^{G_C} = 0.25
    write = 0.125 * torch.outer(k1, v) + 0.75 * torch.outer(k2, torch.ones(3))
    torch.testing.assert_close(S2[0, 0] - 0.25 * S0[0, 0].double(), write.double())
    want = math.sqrt(0.125**2 * 5.25 + 0.75**2 * 3) / (math.sqrt(8.25) + 1e-6)
    assert drift.item() == pytest.approx(want, rel=1e-6)  # g = log 0.5 is rounded to fp32
    _, _, d_chunked = chunk_gated_delta(*inputs, initial_state=S0, chunk_size=2, drift_source="write")
    assert d_chunked.item() == pytest.approx(want, rel=1e-5)


def test_zero_state_gives_a_finite_drift_with_eps():
    k = torch.tensor([0.6, 0.8, 0.0])
    v = torch.tensor([1.0, 2.0, 2.0])
    _, S1, drift = recurrent_gated_delta(*_one_token(k, v, 1.0, 1.0), chunk_size=1)
    # S0 = 0: drift = ||k v^T||_F / eps = |k| |v| / 1e-6 = 3 / 1e-6
    assert math.isfinite(drift.item())
    assert drift.item() == pytest.approx(3.0 / 1e-6, rel=1e-5)


def _random_inputs(B, T, H, dk, dv, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, dk, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, dk, generator=gen), dim=-1)
    v = torch.randn(B, T, H, dv, generator=gen)
    g = -torch.rand(B, T, H, generator=gen) * 0.3  # alpha in (0.74, 1]
    beta = torch.rand(B, T, H, generator=gen)
    return q, k, v, g, beta


@pytest.mark.parametrize("T,chunk", [(37, 16), (64, 16), (50, 32), (5, 8)])
def test_chunked_equals_recurrent_including_drift(T, chunk):
    q, k, v, g, beta = _random_inputs(2, T, 3, 12, 20, seed=T)
    S0 = torch.randn(2, 3, 12, 20) * 0.3
    o_r, s_r, d_r = recurrent_gated_delta(q, k, v, g, beta, initial_state=S0, chunk_size=chunk)
    o_c, s_c, d_c = chunk_gated_delta(q, k, v, g, beta, initial_state=S0, chunk_size=chunk)
    torch.testing.assert_close(o_c, o_r, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(s_c, s_r, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(d_c, d_r, rtol=1e-4, atol=1e-6)
    assert d_c.shape == (2, 3, math.ceil(T / chunk))


def test_recurrent_matches_transformers_qwen3_5_reference():
    q, k, v, g, beta = _random_inputs(1, 29, 2, 16, 8, seed=3)
    S0 = torch.randn(1, 2, 16, 8) * 0.2
    ours_o, ours_s, _ = recurrent_gated_delta(q, k, v, g, beta, initial_state=S0)
    ref_o, ref_s = torch_recurrent_gated_delta_rule(
        q, k, v, g=g, beta=beta, initial_state=S0.clone(), output_final_state=True, use_qk_l2norm_in_kernel=False
    )
    torch.testing.assert_close(ours_o, ref_o, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours_s, ref_s, rtol=1e-5, atol=1e-6)


def test_bad_shapes_and_options_are_refused_by_name():
    q, k, v, g, beta = _random_inputs(1, 8, 1, 4, 4)
    with pytest.raises(ValueError, match="g and beta"):
        chunk_gated_delta(q, k, v, g[:, :4], beta)
    with pytest.raises(ValueError, match="drift_norm"):
        state_drift(torch.ones(1, 2, 2), torch.ones(1, 2, 2), drift_norm="cosine")
