"""The diagnostic harness on a tiny random model and a SYNTHETIC trace (mechanism only, not evidence)."""

import pytest

from agentpost.actkv.diagnostic import VARIANTS, budget_for, diag_trace, run_grid
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
        text = (f"<|im_start|>tool\n<tool_response>doc {r} of the api alpha{r}</tool_response><|im_end|>\n"
                f"<|im_start|>assistant\nthink {r}<tool_call>{{\"name\": \"alpha{r}\"}}</tool_call><|im_end|>\n")
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
    df = run_grid(model, {42: [tr]}, ratios=(0.25,), chunk=32, variants=VARIANTS)
    full = df[df.method == "fullkv"].iloc[0]
    assert full.nll_increase_nats == 0 and full.top1_agreement == 1 and full.peak_frac == 1
    assert set(df.method) == {"fullkv", "streamingllm", "h2o", "snapkv", "rkv", "actkv", "actkv+budget",
                              "h2o_normalised", "snapkv_query_head"}
    assert (df.peak_frac <= 1).all()
    assert (df[df.method.str.startswith("actkv")].peak_within_bound == 1).all()
    assert budget_for(tr, 0.25) == round(0.25 * len(tr))
    with pytest.raises(ValueError, match="budget ratio"):
        budget_for(tr, 0)


@pytest.mark.claim("actkv", "C3")
def test_decode_profile_one_token_per_step(setup):
    from agentpost.actkv.diagnostic import decode_profile

    model, _, tr = setup
    prof = decode_profile(model, tr, 0.25, repeats=1)
    act = prof["methods"]["actkv"]
    assert act["peak_within_bound"] and prof["methods"]["fullkv"]["decode_ratio_vs_fullkv"] == 1
    assert [r["round"] for r in act["per_round"]] == [0, 1, 2]
    assert sum(r["tokens"] for r in act["per_round"]) == len(tr) - tr.layout.prefix_len
