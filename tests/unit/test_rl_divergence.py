"""agentpost.rl.divergence: hand-computed values, the generalised JSD's beta, zero-mass terms, and the registry."""

import math

import pytest
import torch

from agentpost.registry import Registry
from agentpost.rl import DIVERGENCES, forward_kl, generalized_jsd, jsd, reverse_kl

P = torch.log(torch.tensor([0.5, 0.5], dtype=torch.float64))  # target (teacher)
Q = torch.log(torch.tensor([0.25, 0.75], dtype=torch.float64))  # model (student)


def test_worked_values():
    # KL(P||Q) = 0.5 ln 2 + 0.5 ln(2/3) = 0.143841; KL(Q||P) = 0.25 ln 0.5 + 0.75 ln 1.5 = 0.130812
    assert forward_kl(P, Q).item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3), abs=1e-12)
    assert forward_kl(P, Q).item() == pytest.approx(0.143841, abs=1e-6)
    assert reverse_kl(P, Q).item() == pytest.approx(0.130812, abs=1e-6)
    # M = (0.375, 0.625): KL(P||M) = 0.032269, KL(Q||M) = 0.035375 -> JSD = 0.033822
    assert jsd(P, Q).item() == pytest.approx(0.033822, abs=1e-6)
    # beta = 1/4: M = (0.3125, 0.6875); 0.25 * 0.075775 + 0.75 * 0.009473 = 0.026048
    assert generalized_jsd(P, Q, 0.25).item() == pytest.approx(0.026048, abs=1e-6)


def test_generalized_jsd_properties():
    assert torch.equal(generalized_jsd(P, Q, 0.5), jsd(P, Q))
    # JSD_beta(P||Q) = JSD_{1-beta}(Q||P), zero on equal inputs, at most log 2 for beta = 1/2.
    assert generalized_jsd(P, Q, 0.3).item() == pytest.approx(generalized_jsd(Q, P, 0.7).item(), abs=1e-12)
    assert generalized_jsd(P, P, 0.3).item() == pytest.approx(0.0, abs=1e-12)
    disjoint = torch.log(torch.tensor([1.0, 0.0], dtype=torch.float64)), torch.log(torch.tensor([0.0, 1.0]))
    assert jsd(*(x.double() for x in disjoint)).item() == pytest.approx(math.log(2), abs=1e-12)
    for beta in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="beta"):
            generalized_jsd(P, Q, beta)


def test_zero_mass_terms_are_zero_in_value_and_gradient():
    # P = (1, 0), Q = (1/2, 1/2): KL(P||Q) = ln 2, no NaN from 0 log 0, finite gradient in Q.
    p = torch.log(torch.tensor([1.0, 0.0], dtype=torch.float64))
    q_logits = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    q = torch.log_softmax(q_logits, -1)
    value = forward_kl(p, q)
    value.backward()
    assert value.item() == pytest.approx(math.log(2), abs=1e-12)
    assert torch.isfinite(q_logits.grad).all()
    assert q_logits.grad.tolist() == pytest.approx([-0.5, 0.5])  # d/dz of -log softmax(z)_0 = softmax - onehot
    # The model putting mass where the target has none: reverse KL is +inf, not NaN.
    assert reverse_kl(p, q.detach()).item() == math.inf


def test_per_position_over_last_dim_and_shape_error():
    batch = torch.stack([P, Q])
    assert forward_kl(batch, batch.flip(0)).tolist() == pytest.approx([0.143841, 0.130812], abs=1e-6)
    with pytest.raises(ValueError, match="differ"):
        forward_kl(P, torch.zeros(3, dtype=torch.float64))


def test_registry():
    assert list(DIVERGENCES) == ["forward_kl", "reverse_kl", "jsd"]
    assert DIVERGENCES.lookup("jsd") is jsd
    with pytest.raises(KeyError, match=r"unknown divergence 'tv'; known: \['forward_kl', 'jsd', 'reverse_kl'\]") as err:
        DIVERGENCES.lookup("tv")
    assert isinstance(err.value, ValueError) and str(err.value).startswith("unknown divergence 'tv'")
    reg = Registry("widget", {"a": 1})
    assert reg.register("b")(2) == 2 and dict(reg) == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        reg.register("a")(3)
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("")
