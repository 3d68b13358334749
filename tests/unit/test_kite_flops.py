"""Analytic FLOPs vs the torch profiler, the spec's cost shape (mechanism test 5), budget matching, cost model."""

import pytest
import torch

from agentpost.kite.cost import (
    PAPER_ESTIMATES,
    PAPER_SST_ACTIVE,
    dense_request_flops,
    implied_prefill_params,
    prefill_share,
    saving,
    sst_request_flops,
)
from agentpost.kite.flops import (
    decode_flops,
    decoder_layer_flops,
    forward_flops,
    match_budget,
    prefill_flops,
    prefiller_layer_flops,
    profiler_matmul_flops,
    relative_budget_error,
    training_flops_per_sequence,
)
from agentpost.kite.model import ModelConfig, SSTConfig, build

SMALL = dict(vocab_size=50, d_model=16, n_heads=2, d_ff=24)


def test_layer_flops_hand_computed():
    # d=16, d_ff=24: 8*16^2 + 4*16*24 = 2048 + 1536; query-only: 4*16^2 + 1536
    assert prefiller_layer_flops(16, 24) == 3584
    assert decoder_layer_flops(16, 24) == 2560


def test_sst_prefill_hand_computed():
    cfg = SSTConfig(ModelConfig(n_layers=2, **SMALL), n_decode_layers=2, d_ff_decode=24)
    # 2 x (12 x 3584 + 4*16*12^2) + 2 x (2560 + 4*16*12) + 2*16*50
    assert prefill_flops(cfg, 12, attention="square") == 104448 + 6656 + 1600
    # causal: 12*13/2 = 78 query-key pairs per layer instead of 144
    assert prefill_flops(cfg, 12) == 2 * (12 * 3584 + 4 * 16 * 78) + 6656 + 1600


@pytest.mark.claim("kite", "C3")
@pytest.mark.parametrize("kind", ["sst", "dense_flops", "dense_kv"])
def test_analytic_flops_match_torch_profiler(kind):
    torch.manual_seed(0)
    model = build(kind, attention="matmul", **SMALL).eval()
    x = torch.randint(0, 50, (1, 12))
    assert profiler_matmul_flops(lambda: model(x)) == forward_flops(model.cfg, 12, attention="square")
    assert profiler_matmul_flops(lambda: model.prefill(x)) == prefill_flops(model.cfg, 12, attention="square")
    _, cache = model.prefill(x)
    assert profiler_matmul_flops(lambda: model.decode_step(x[:, :1], cache)) == decode_flops(model.cfg, 12)


@pytest.mark.claim("kite", "C3")
def test_prefill_scales_with_prefiller_only_and_decode_with_both_towers():
    p = ModelConfig(n_layers=2, **SMALL)
    small, big = SSTConfig(p, 2, d_ff_decode=24), SSTConfig(p, 2, d_ff_decode=2400)
    for t in (64, 1024, 8192):
        # per extra prompt token, prefill grows by the Prefiller's cost (+ the last query's attention read):
        slope = prefill_flops(small, t + 1) - prefill_flops(small, t)
        assert slope == prefill_flops(big, t + 1) - prefill_flops(big, t)  # independent of N_D
        assert slope == prefill_flops(p, t + 1) - prefill_flops(p, t) + 2 * 4 * 16
        # decode = Prefiller + Decoder once per token
        assert decode_flops(small, t) == decode_flops(p, t) + 2 * (decoder_layer_flops(16, 24) + 4 * 16 * (t + 1))
    # the dense matched-FLOPs model pays for all 4 layers on every prompt token
    dense4 = ModelConfig(n_layers=4, **SMALL)
    assert prefill_flops(small, 8192) / prefill_flops(dense4, 8192) == pytest.approx(0.5, abs=0.01)


def test_training_flops_is_three_forwards():
    cfg = ModelConfig(n_layers=2, **SMALL)
    assert training_flops_per_sequence(cfg, 8) == 3 * forward_flops(cfg, 8)


def test_match_budget_hand_example():
    sizes = match_budget(1000, 7, 10)  # round(142.86) = 143 sequences over 10 updates
    assert sum(sizes) == 143 and set(sizes) == {14, 15} and len(sizes) == 10
    assert relative_budget_error(1000, 7, sizes) == pytest.approx(0.001)


def test_match_budget_refuses_imprecise_or_impossible_budgets():
    with pytest.raises(ValueError, match="within 2.00%"):
        match_budget(100, 7, 10)  # 14 sequences = 98 FLOPs: 2% off
    with pytest.raises(ValueError, match="fewer than the 10 updates"):
        match_budget(50, 7, 10)
    with pytest.raises(ValueError, match="positive"):
        match_budget(0, 7, 10)


def test_bad_flop_arguments():
    with pytest.raises(ValueError, match="attention count"):
        prefill_flops(ModelConfig(), 4, attention="flash")
    with pytest.raises(ValueError, match="prompt length"):
        prefill_flops(ModelConfig(), 0)
    with pytest.raises(TypeError, match="ModelConfig or SSTConfig"):
        decode_flops("dense", 3)


def test_request_cost_hand_example():
    # SST N_P=1, N_D=1, 10 prompt, 3 output: 2*1*10 + 2*1 + 2*2*2 = 30; dense N_B=2: 2*2*12 = 48
    assert sst_request_flops(1, 1, 10, 3) == 30
    assert dense_request_flops(2, 10, 3) == 48
    assert saving(1, 1, 2, 10, 3) == pytest.approx(1 - 30 / 48)
    assert prefill_share(1, 1, 10, 3) == pytest.approx(22 / 30)


@pytest.mark.claim("kite", "C3")
def test_paper_estimates_are_reproduced_by_one_prefiller_size():
    implied = {
        b: implied_prefill_params(-change, PAPER_SST_ACTIVE, n_b, 32768, 512)
        for b, (n_b, change) in PAPER_ESTIMATES.items()
    }
    a, b = implied.values()
    assert a == pytest.approx(1.369e9, rel=1e-3) and b == pytest.approx(a, rel=1e-3)
    for name, (n_b, change) in PAPER_ESTIMATES.items():
        assert saving(implied[name], PAPER_SST_ACTIVE - implied[name], n_b, 32768, 512) == pytest.approx(-change)
    assert prefill_share(a, PAPER_SST_ACTIVE - a, 32768, 512) > 0.9  # prefill dominates agent-like requests


def test_cost_model_errors():
    with pytest.raises(ValueError, match="unreachable"):
        implied_prefill_params(0.9, 2.0, 1.0, 100, 10)
    with pytest.raises(ValueError, match=">= 1 token"):
        sst_request_flops(1, 1, 0, 3)
