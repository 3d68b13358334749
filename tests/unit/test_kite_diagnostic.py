"""The KITE diagnostic at one seed: measured arm facts, stable items, and two seeds that are real replications."""

import numpy as np
import pytest

from agentpost.record.outcomes import outcomes_payload
from agentpost.kite.diagnostic import run_diagnostic
from agentpost.kite.train import TrainSpec

TINY = dict(d_model=16, n_heads=2, d_ff=32, n_prefill=1, n_decode=1)
SPEC = TrainSpec(seq_len=8, batch_size=32, stage1_updates=2, stage2_updates=2, warmup=1)


def _run(seed):
    return run_diagnostic(
        seed=seed, lr_grid=[3e-3, 1e-2], spec=SPEC, model_kwargs=TINY, train_chars=20_000, eval_chunks=1
    )


@pytest.fixture(scope="module")
def two_seeds():
    return _run(42), _run(43)


def test_facts_are_measured_and_sst_starts_where_dense_kv_starts(two_seeds):
    r, _ = two_seeds
    facts = r.facts()
    assert {f["updates"] for f in facts.values()} == {SPEC.updates}
    # the SST's stage-1 Prefiller and dense_kv are the same architecture seeded alike: the same initial weights
    assert facts["sst"]["checkpoint"] == facts["dense_kv"]["checkpoint"] != facts["dense_flops"]["checkpoint"]
    assert len({f["data_version"] for f in facts.values()}) == 1
    assert {a: f["selected_lr"] for a, f in facts.items()} == r.selected_lr
    assert len(r.runs) == 6  # 3 arms x 2 rates, each trained once at this seed
    payload = outcomes_payload("test_nll", r.test_nll, items=r.items, facts=facts)
    assert payload["items"] == [str(i) for i in r.items] and len(r.items) == len(set(r.items))


def test_two_seeds_score_the_same_items_with_different_outcomes(two_seeds):
    a, b = two_seeds
    assert a.items == b.items and a.data_version == b.data_version
    for arm in a.test_nll:
        assert not np.array_equal(a.test_nll[arm], b.test_nll[arm]), arm
    assert a.facts()["dense_flops"]["checkpoint"] != b.facts()["dense_flops"]["checkpoint"]


def test_a_seed_repeats_exactly():
    again, first = _run(42), _run(42)
    for arm in first.test_nll:
        assert np.array_equal(again.test_nll[arm], first.test_nll[arm])


def test_bad_input_is_refused_before_training():
    with pytest.raises(ValueError, match="lr_grid"):
        run_diagnostic(seed=1, lr_grid=[], spec=SPEC, model_kwargs=TINY, train_chars=20_000, eval_chunks=1)
    with pytest.raises(ValueError, match="unknown arms"):
        run_diagnostic(
            seed=1, lr_grid=[1e-3], spec=SPEC, model_kwargs=TINY, train_chars=20_000, eval_chunks=1, arms=("sst", "moe")
        )
