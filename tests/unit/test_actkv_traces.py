"""Trace builder: synthetic trace format over real StableToolBench API docs."""

import json

import pytest

from agentpost.data.tool_traces import (
    SPLIT_GROUPS,
    TRACE_LABEL,
    ToolTrace,
    build_traces,
    render_doc,
    split_groups,
    tokenize_trace,
)
from agentpost.data.stabletoolbench import Api
from agentpost.models.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def traces():
    return build_traces("test", n_traces=12, rounds=4, distractors=2, max_doc_chars=200, seed=3)


def test_labeled_synthetic():
    import agentpost.data.tool_traces as m

    assert TRACE_LABEL == "synthetic trace format over real StableToolBench API docs"
    assert TRACE_LABEL in m.__doc__ and TRACE_LABEL in build_traces.__doc__


def test_deterministic_and_seed_dependent(traces):
    again = build_traces("test", n_traces=12, rounds=4, distractors=2, max_doc_chars=200, seed=3)
    assert [t.text() for t in again] == [t.text() for t in traces]
    other = build_traces("test", n_traces=12, rounds=4, distractors=2, max_doc_chars=200, seed=4)
    assert [t.text() for t in other] != [t.text() for t in traces]


def test_whole_groups_held_out():
    splits = split_groups(seed=0)
    assert set(splits) == {"train", "validation", "test"}
    sets = {k: set(v) for k, v in splits.items()}
    assert not (sets["train"] & sets["validation"]) and not (sets["train"] & sets["test"])
    assert not (sets["validation"] & sets["test"])
    assert sum(len(v) for v in sets.values()) == 765
    assert {k: set(v) for k, v in split_groups(seed=1).items()} == sets  # seed only reorders
    groups = {k: {t.group for t in build_traces(k, n_traces=40)} for k in splits}
    for k, g in groups.items():
        assert g <= set(SPLIT_GROUPS[k])
    assert not (groups["train"] & (groups["validation"] | groups["test"]))


def test_held_out_actions_name_apis_unseen_in_training():
    train_names = {r.api_name for t in build_traces("train") for r in t.rounds}
    train_docs = "\n".join(r.observation for t in build_traces("train") for r in t.rounds)
    for split in ("validation", "test"):
        for t in build_traces(split):
            for r in t.rounds:
                assert r.api_name not in train_names
                assert json.dumps(r.api_name, ensure_ascii=False) not in train_docs


def test_action_copies_name_from_an_earlier_observation(traces):
    lags = []
    for t in traces:
        for i, r in enumerate(t.rounds):
            call = json.loads(r.action.removeprefix("<tool_call>").removesuffix("</tool_call>"))
            assert call["name"] == r.api_name
            quoted = '"name": ' + json.dumps(r.api_name, ensure_ascii=False)
            assert r.source_round <= i and quoted in t.rounds[r.source_round].observation
            # the only observation documenting it: tools are unique within a trace
            assert sum(quoted in o.observation for o in t.rounds) == 1
            assert (r.source_round < i) == (i > 0)
            lags.append(i - r.source_round)
            assert r.observation.startswith("<tool_response>\n") and r.observation.endswith("\n</tool_response>")
    assert max(lags) >= 2


def test_docs_are_cut_but_names_kept():
    api = Api("C", "T", "a" * 50, "d" * 500, "GET")
    doc = render_doc(api, 40)
    assert doc.startswith('{"name": "T.' + "a" * 50 + '"') and doc.endswith(" ...")
    assert len(render_doc(api, 120)) == 120 + len(" ...")


def test_tokenization_spans_tile_and_masks_cover_delimiters(traces, tok):
    call_open, call_close = tok.convert_tokens_to_ids(["<tool_call>", "</tool_call>"])
    for t in traces:
        tt = tokenize_trace(t, tok)
        n = len(tt.input_ids)
        assert tt.input_ids == list(tok(t.text(), add_special_tokens=False).input_ids)
        assert tt.prefix_len == len(tok(t.prefix, add_special_tokens=False).input_ids)
        assert tt.round_spans[0][0] == tt.prefix_len and tt.round_spans[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(tt.round_spans, tt.round_spans[1:]))
        assert len(tt.round_spans) == len(t.rounds) and len(tt.action_mask) == n == len(tt.name_mask)
        # action mask: exactly the runs from <tool_call> to </tool_call>, one per round, inside that round
        inside, expect = False, []
        for i in tt.input_ids:
            if i == call_open:
                inside = True
            expect.append(inside)
            if i == call_close:
                inside = False
        assert tt.action_mask == expect
        for (s, e), r in zip(tt.round_spans, t.rounds):
            idx = [i for i in range(s, e) if tt.action_mask[i]]
            assert tt.input_ids[idx[0]] == call_open and tt.input_ids[idx[-1]] == call_close
            assert idx == list(range(idx[0], idx[-1] + 1))
            name_ids = [tt.input_ids[i] for i in range(s, e) if tt.name_mask[i]]
            assert all(tt.action_mask[i] for i in range(s, e) if tt.name_mask[i])
            assert r.api_name in tok.decode(name_ids)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown split"):
        build_traces("dev")
    with pytest.raises(ValueError, match="rounds"):
        build_traces("test", rounds=0)
    with pytest.raises(ValueError, match="too few distinct tools"):
        build_traces("validation", n_traces=1, rounds=60, distractors=2)


def test_trace_type(traces):
    assert isinstance(traces[0], ToolTrace) and len(traces[0].rounds) == 4
    assert traces[0].text().startswith(traces[0].prefix)


def test_generated_mask_is_the_assistant_turns(traces, tok):
    """Generated tokens: from right after each "<|im_start|>assistant\\n" to the round's end; the prefix and every
    tool turn (observation) are not generated. Checked against the decoded text of each run."""
    for t in traces[:4]:
        tt = tokenize_trace(t, tok)
        g = tt.generated_mask
        assert len(g) == len(tt.input_ids) and not any(g[: tt.prefix_len])
        assert all(g[i] for i in range(len(g)) if tt.action_mask[i])  # every action token is generated
        for (s, e), r in zip(tt.round_spans, t.rounds):
            gen = [i for i in range(s, e) if g[i]]
            assert gen == list(range(gen[0], e))  # one run that ends the round
            assert tok.decode(tt.input_ids[gen[0] : e]) == f"{r.reasoning}\n{r.action}<|im_end|>\n"
            assert tok.decode(tt.input_ids[s : gen[0]]).endswith("<|im_start|>assistant\n")
            assert r.observation in tok.decode(tt.input_ids[s : gen[0]])
