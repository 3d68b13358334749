"""KITE / SST model invariants (spec "Mechanism tests" 1-4) and configuration errors."""

import pytest
import torch

from agentpost.kite.expansion import expand
from agentpost.kite.model import DenseLM, KVCache, ModelConfig, SSTConfig, SSTLM, build, layer_map

SMALL = dict(vocab_size=61, d_model=16, n_heads=2, d_ff=24)


def _model(kind="sst", seed=0, **kw):
    torch.manual_seed(seed)
    return build(kind, **{**SMALL, **kw}).eval()


def _tokens(t=13, batch=2, seed=1):
    return torch.randint(0, SMALL["vocab_size"], (batch, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.claim("kite", "C1")
@torch.no_grad()
def test_decoder_writes_no_kv_cache_bit_identical_under_decoder_perturbation():
    model, x = _model(), _tokens()
    logits, cache = model.prefill(x)
    keys = [k.clone() for k in cache.keys]
    values = [v.clone() for v in cache.values]
    for p in (
        list(model.decoder.parameters())
        + list(model.norm_f.parameters())
        + list(model.in_norm_emb.parameters())
        + list(model.in_norm_pre.parameters())
    ):
        p.add_(torch.randn_like(p))
    logits2, cache2 = model.prefill(x)
    assert cache2.length == cache.length == x.shape[1]
    assert all(torch.equal(a, b) for a, b in zip(keys, cache2.keys))
    assert all(torch.equal(a, b) for a, b in zip(values, cache2.values))
    # the perturbation did change the model's output, so the test is not vacuous
    assert not torch.allclose(logits2, logits)


@pytest.mark.claim("kite", "C1")
@pytest.mark.parametrize("n_prefill,n_decode", [(2, 2), (2, 4), (3, 1)])
@torch.no_grad()
def test_cache_has_exactly_prefiller_layers(n_prefill, n_decode):
    model = _model(n_prefill=n_prefill, n_decode=n_decode)
    _, cache = model.prefill(_tokens())
    assert cache.n_layers == n_prefill
    assert cache.num_elements() == 2 * n_prefill * 2 * 2 * 13 * 8  # 2 x L_P x batch x heads x T x head_dim
    assert all(not hasattr(block, "k") and not hasattr(block, "v") for block in model.decoder)  # query-only


@pytest.mark.claim("kite", "C2")
@pytest.mark.parametrize("kind", ["sst", "dense_flops", "dense_kv"])
@pytest.mark.parametrize("attention", ["sdpa", "matmul"])
@torch.no_grad()
def test_last_only_prefill_matches_full_forward(kind, attention):
    model, x = _model(kind, attention=attention), _tokens()
    full = model(x)
    last, _ = model.prefill(x)
    assert last.shape == (2, 1, SMALL["vocab_size"])
    assert (last[:, 0] - full[:, -1]).abs().max() <= 1e-5


@pytest.mark.claim("kite", "C2")
@torch.no_grad()
def test_sst_prefill_all_positions_matches_forward():
    model, x = _model(), _tokens()
    all_pos, _ = model.prefill(x, last_only=False)
    assert (all_pos - model(x)).abs().max() <= 1e-5


@pytest.mark.claim("kite", "C2")
@pytest.mark.parametrize("kind", ["sst", "dense_flops", "dense_kv"])
@pytest.mark.parametrize("layer_map_mode,n_decode", [("default", 2), ("last", 2), ("proportional", 3)])
@torch.no_grad()
def test_incremental_decoding_equals_full_forward(kind, layer_map_mode, n_decode):
    extra = dict(layer_map=layer_map_mode, n_decode=n_decode) if kind == "sst" else {}
    model, x = _model(kind, **extra), _tokens(t=17)
    full = model(x)
    # capacity smaller than the final length: the cache must grow while decoding
    logits, cache = model.prefill(x[:, :6], capacity=8)
    steps = [logits]
    for t in range(6, 17):
        steps.append(model.decode_step(x[:, t : t + 1], cache))
    assert cache.length == 17
    assert (torch.cat(steps, dim=1) - full[:, 5:]).abs().max() <= 1e-5


@pytest.mark.parametrize("mode", ["both", "prefiller", "embedding"])
@torch.no_grad()
def test_decoder_input_modes_keep_invariants(mode):
    model, x = _model(decoder_input=mode), _tokens()
    assert (model.prefill(x)[0][:, 0] - model(x)[:, -1]).abs().max() <= 1e-5


def test_layer_map_readings():
    assert layer_map(2, 2) == (0, 1)
    assert layer_map(2, 4) == (0, 0, 1, 1)
    assert layer_map(4, 2) == (0, 2)
    assert layer_map(3, 2, "last") == (2, 2)
    with pytest.raises(ValueError, match="equal tower depths"):
        layer_map(2, 3, "same")
    with pytest.raises(ValueError, match="unknown layer_map"):
        layer_map(2, 2, "nope")


def test_expansion_copies_prefiller_weights_into_decoder():
    torch.manual_seed(0)
    small = DenseLM(ModelConfig(n_layers=2, **SMALL))
    sst = expand(small, _model(seed=5))
    assert torch.equal(sst.prefiller.layers[1].k.weight, small.layers[1].k.weight)
    for dec, src in zip(sst.decoder, (0, 1)):
        assert torch.equal(dec.q.weight, small.layers[src].q.weight)
        assert torch.equal(dec.o.weight, small.layers[src].o.weight)
        assert torch.equal(dec.ffn.up.weight, small.layers[src].ffn.up.weight)
    assert torch.equal(sst.norm_f.weight, small.norm_f.weight)
    # the copies are independent parameters: training one tower does not move the other
    assert sst.decoder[0].q.weight.data_ptr() != sst.prefiller.layers[0].q.weight.data_ptr()


def test_random_expansion_keeps_decoder_init():
    torch.manual_seed(0)
    small = DenseLM(ModelConfig(n_layers=2, **SMALL))
    sst = _model(seed=5)
    before = sst.decoder[0].q.weight.clone()
    expand(small, sst, "random")
    assert torch.equal(sst.decoder[0].q.weight, before)
    assert torch.equal(sst.prefiller.layers[0].q.weight, small.layers[0].q.weight)


def test_expansion_errors():
    small = DenseLM(ModelConfig(n_layers=3, **SMALL))
    with pytest.raises(ValueError, match="does not match"):
        expand(small, _model())
    with pytest.raises(ValueError, match="d_ff_decode"):
        expand(DenseLM(ModelConfig(n_layers=2, **SMALL)), _model(d_ff_decode=8))
    with pytest.raises(ValueError, match="expansion init"):
        expand(DenseLM(ModelConfig(n_layers=2, **SMALL)), _model(), "magic")


def test_bad_inputs_are_named():
    model = _model()
    with pytest.raises(ValueError, match="token ids"):
        model(torch.tensor([[0, 61]]))
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.zeros(2, 3))
    _, cache = model.prefill(_tokens())
    with pytest.raises(ValueError, match="one token"):
        model.decode_step(_tokens(t=2), cache)
    with pytest.raises(ValueError, match="n_heads"):
        ModelConfig(d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="decoder_input"):
        SSTConfig(decoder_input="x")
    with pytest.raises(ValueError, match="unknown model kind"):
        build("moe")
    with pytest.raises(ValueError, match="only apply"):
        build("dense_kv", layer_map="last")


def test_kv_cache_write_read_and_growth():
    cache = KVCache.empty(1, 1, 1, 2, capacity=2)
    k = torch.arange(6.0).view(1, 1, 3, 2)
    got_k, _ = cache.write(0, k, -k)
    assert cache.capacity >= 3 and torch.equal(got_k, k)
    cache.advance(3)
    assert torch.equal(cache.read(0)[1], -k)
    assert cache.num_elements() == 2 * 1 * 1 * 1 * 3 * 2


def test_training_forward_backpropagates_into_both_towers():
    model = _model().train()
    loss = model(_tokens()).logsumexp(-1).mean()
    loss.backward()
    assert model.decoder[0].q.weight.grad.abs().sum() > 0
    assert model.prefiller.layers[0].k.weight.grad.abs().sum() > 0
    assert isinstance(model, SSTLM)
