"""KITE training schedule, budget matching across arms, determinism, evaluation items, latency table plumbing."""

import math

import numpy as np
import pytest
import torch

from agentpost.kite.latency import advantage_starts, measure, ratios
from agentpost.kite.train import TrainSpec, article_chunks, per_article_nll, sample_windows, token_stream, train_arm
from agentpost.models.schedules import warmup_cosine as lr_at

TINY = dict(vocab_size=4096, d_model=16, n_heads=2, d_ff=32)
SPEC = TrainSpec(seq_len=8, batch_size=32, stage1_updates=3, stage2_updates=3, warmup=2)


def test_lr_schedule_hand_values():
    assert lr_at(0, 10, 1.0, 2) == 0.5
    assert lr_at(1, 10, 1.0, 2) == 1.0
    assert lr_at(2, 10, 1.0, 2) == pytest.approx(1.0)
    assert lr_at(10, 10, 1.0, 2) == pytest.approx(0.1)
    assert lr_at(6, 10, 1.0, 2) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))


def test_sample_windows_shape_and_error():
    stream = torch.arange(100)
    w = sample_windows(stream, 3, 8, torch.Generator().manual_seed(0))
    assert w.shape == (3, 9) and torch.equal(w[:, 1:] - w[:, :-1], torch.ones(3, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="shorter than a window"):
        sample_windows(torch.arange(5), 1, 8, torch.Generator())


def test_arms_share_updates_and_match_budget_and_are_deterministic():
    stream = token_stream("train", 20_000)
    infos = {}
    for arm in ("sst", "dense_flops", "dense_kv"):
        _, infos[arm] = train_arm(arm, stream, SPEC, 3e-3, 42, **TINY)
    assert {i["updates"] for i in infos.values()} == {6}
    budget = infos["sst"]["train_flops"]
    for arm in ("dense_flops", "dense_kv"):
        assert abs(infos[arm]["train_flops"] - budget) / budget <= 0.01
    assert infos["dense_kv"]["sequences"] > infos["sst"]["sequences"] > infos["dense_flops"]["sequences"]
    _, again = train_arm("sst", stream, SPEC, 3e-3, 42, **TINY)
    assert again["final_train_loss"] == infos["sst"]["final_train_loss"]
    with pytest.raises(ValueError, match="unknown arm"):
        train_arm("moe", stream, SPEC, 3e-3, 42, **TINY)


def test_per_article_items_are_test_articles():
    windows, owner = article_chunks("test", 16, 2)
    assert windows.shape[1] == 17 and len(torch.unique(owner)) == 60
    torch.manual_seed(0)
    from agentpost.kite.model import build

    nll = per_article_nll(build("dense_kv", **TINY), windows[:10], owner[:10])
    assert nll.shape == (len(torch.unique(owner[:10])),)
    assert np.all(np.abs(nll - math.log(4096)) < 0.5)  # an untrained model is near uniform


def test_latency_rows_and_ratios_structure():
    rows = measure(
        prompt_lengths=[8, 16], d_model=16, n_heads=2, d_ff=32, vocab_size=64, decode_tokens=2, repeats=2, warmup=0
    )
    assert {(r["arm"], r["prompt"]) for r in rows} == {
        (a, p) for a in ("sst", "dense_flops", "dense_kv") for p in (8, 16)
    }
    table = ratios(rows)
    assert set(table.arm) == {"sst", "dense_kv"}
    sst16 = table[(table.arm == "sst") & (table.prompt == 16)].iloc[0]
    assert 0.4 < sst16.prefill_flop_ratio < 0.6 and 0.9 < sst16.decode_flop_ratio < 1.0


def test_advantage_starts_requires_a_clear_and_lasting_win():
    def row(arm, p, lo, hi):
        return {"arm": arm, "prompt": p, "prefill_ms_p20": lo, "prefill_ms_p80": hi}

    rows = [row("dense_flops", p, 10, 12) for p in (1, 2, 3, 4)]
    rows += [row("sst", 1, 9, 11), row("sst", 2, 5, 9), row("sst", 3, 11, 13), row("sst", 4, 5, 6)]
    assert advantage_starts(rows) == 4
    rows[-2] = row("sst", 3, 5, 6)
    assert advantage_starts(rows) == 2
    assert advantage_starts([row("dense_flops", 1, 1, 2), row("sst", 1, 3, 4)]) is None
