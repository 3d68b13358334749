"""The diagnostic harness on a tiny random model and a SYNTHETIC trace (mechanism only, not evidence)."""

import pytest

from agentpost.actkv.budget import round_half_up
from agentpost.actkv.diagnostic import VARIANTS, budget_for, budget_terms, diag_trace, per_item, run_grid
from agentpost.models.lm import tiny_random_lm
from agentpost.models.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def setup():
    tok = load_tokenizer()
    model = tiny_random_lm(seed=0, hidden_size=32, intermediate_size=64, head_dim=8)
    prefix = "<|im_start|>system\nsolve the task with tools<|im_end|>\n"
    ids = tok(prefix, add_special_tokens=False).input_ids
    spans = []
    for r in range(3):
        start = len(ids)
        text = (
            f"<|im_start|>tool\n<tool_response>doc {r} of the api alpha{r}</tool_response><|im_end|>\n"
            f'<|im_start|>assistant\nthink {r}<tool_call>{{"name": "alpha{r}"}}</tool_call><|im_end|>\n'
        )
        ids += tok(text, add_special_tokens=False).input_ids
        spans.append((start, len(ids)))
    tr = diag_trace("synthetic-0", ids, tok, spans[0][0], spans)
    return model, tok, tr


def test_compress_points_follow_the_observation(setup):
    _, tok, tr = setup
    for p, (a, b) in zip(tr.compress_points, tr.layout.round_spans[1:]):
        assert a < p < b
        assert tok.decode([tr.ids[p - 1]]) == "</tool_response>"
    acts = [tok.decode([i]) for i, m in zip(tr.ids, tr.layout.action_mask) if m]
    assert acts.count("</tool_call>") == 3 and "<tool_call>" not in acts


@pytest.mark.claim("actkv", "C3")
def test_grid_fullkv_is_its_own_reference(setup):
    model, _, tr = setup
    df = run_grid(model, [tr], ratios=(0.25,), chunk=32, variants=VARIANTS)
    full = df[df.method == "fullkv"].iloc[0]
    assert full.nll_increase_nats == 0 and full.top1_agreement == 1 and full.peak_frac == 1
    assert set(df.method) == {
        "fullkv",
        "streamingllm",
        "h2o",
        "snapkv",
        "rkv",
        "actkv",
        "actkv+budget",
        "h2o_normalised",
        "snapkv_query_head",
    }
    assert (df.peak_frac <= 1).all()
    assert (df[df.method.str.startswith("actkv")].peak_within_bound == 1).all()
    outcomes = per_item(df, 0.25, "nll_increase_nats")
    assert "fullkv" not in outcomes and set(outcomes["actkv"]) == {tr.trace_id}
    assert outcomes["actkv"][tr.trace_id] == df[(df.method == "actkv")].nll_increase_nats.iloc[0]


def test_round_half_up_is_not_bankers_rounding():
    assert [round_half_up(x) for x in (104.5, 105.5, 0.5, 2.4999, -0.5)] == [105, 106, 1, 2, 0]
    assert round(104.5) == 104  # the surprise it avoids


def test_budget_readings_by_hand(setup):
    _, _, tr = setup
    n, prefix = len(tr), tr.layout.prefix_len
    # evictable (actkv.md): B = ratio * n rounded half up, the prefix on top
    assert budget_for(tr, 0.5) == (n + 1) // 2
    terms = budget_terms(tr, 0.5)
    assert terms["B"] == (n + 1) // 2 and terms["total_per_head"] == prefix + (n + 1) // 2
    assert terms["kvpress_compression_ratio"] == pytest.approx(1 - (prefix + (n + 1) // 2) / n)
    # total (kvpress): ratio * n is everything a head keeps, prefix included
    total = budget_terms(tr, 0.9, "total")
    assert total["total_per_head"] == round_half_up(0.9 * n) and total["B"] == total["total_per_head"] - prefix
    assert total["kvpress_compression_ratio"] == pytest.approx(1 - total["total_per_head"] / n)
    with pytest.raises(ValueError, match="protected prefix"):
        budget_for(tr, prefix / n / 2, "total")
    with pytest.raises(ValueError, match="budget ratio"):
        budget_for(tr, 0)
    with pytest.raises(ValueError, match="budget_reading"):
        budget_for(tr, 0.5, "kvpress")


def test_budget_ratio_is_read_as_its_decimal():
    from agentpost.actkv.diagnostic import DiagTrace
    from agentpost.actkv.regions import RoundLayout

    tr = DiagTrace("t", tuple(range(835)), RoundLayout(5, ((5, 835),), (False,) * 835, ()), ())
    assert budget_for(tr, 0.1) == 84  # 83.5 rounds up
    assert budget_for(tr, 0.3) == 251  # 250.5 rounds up


@pytest.mark.claim("actkv", "C3")
def test_decode_profile_one_token_per_step(setup):
    from agentpost.actkv.diagnostic import decode_profile

    model, _, tr = setup
    prof = decode_profile(model, tr, 0.25, repeats=1)
    act = prof["methods"]["actkv"]
    assert act["peak_within_bound"] and prof["methods"]["fullkv"]["decode_ratio_vs_fullkv"] == 1
    assert [r["round"] for r in act["per_round"]] == [0, 1, 2]
    assert sum(r["tokens"] for r in act["per_round"]) == len(tr) - tr.layout.prefix_len
