"""MuSeR training and evaluation on a device: the CPU path is the default path, bit for bit, and CUDA
(when this machine has it) gives the CPU's metrics within a stated tolerance. All data here is SYNTHETIC: users
whose sequences walk through a few item ranges, and a random stand-in for the MiniLM text matrix."""

import numpy as np
import pytest
import torch

from agentpost.data.movietweetings import EvalCase, Split
from agentpost.muser.diagnostic import arm_config, history_length_table, history_lengths, run_arms
from agentpost.muser.model import MuSeRConfig
from agentpost.muser.serving import cached_scores
from agentpost.muser.train import TrainConfig, resolve_device, train_model

ARMS = ["recent_single", "compression", "full", "sasrec", "comirec", "popularity"]
KW = dict(num_interests=3, ortho_lambda=0.1, align_weight=0.1)


def _synthetic_split(n_users: int = 80, n_items: int = 60, seed: int = 0) -> Split:
    """Synthetic leave-last-out split: each user walks through a contiguous block of items with small jumps."""
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(n_users):
        start, length = rng.integers(0, n_items), rng.integers(6, 30)
        seqs.append(((start + np.cumsum(rng.integers(1, 4, length))) % n_items + 1).astype(np.int64))
    users = np.arange(n_users)
    return Split(
        train=[s[:-2] for s in seqs],
        train_times=[np.zeros(len(s) - 2, dtype=np.int64) for s in seqs],
        validation=EvalCase(users, [s[:-2] for s in seqs], np.array([s[-2] for s in seqs])),
        test=EvalCase(users, [s[:-1] for s in seqs], np.array([s[-1] for s in seqs])),
        stats={},
    )


def _base(n_items: int = 60) -> MuSeRConfig:
    return MuSeRConfig(
        n_items=n_items, dim=8, max_len=12, recent_len=3, mid_len=4, strides=(1, 2, 4), num_interests=3, dropout=0.0
    )


def _runs(device=None):
    split = _synthetic_split()
    sem = {"full": torch.from_numpy(np.random.default_rng(1).normal(size=(60, 16)).astype(np.float32))}
    tc = TrainConfig(epochs=1, batch_size=128, n_sampled=16)
    kw = {} if device is None else {"device": device}
    return run_arms(ARMS, _base(), tc, split, 7, semantic=sem, progress=False, **KW, **kw)


def test_cpu_device_gives_the_default_results_bit_for_bit():
    default, cpu = _runs(), _runs("cpu")
    for arm in ARMS:
        assert cpu[arm]["checkpoint"] == default[arm]["checkpoint"]
        assert cpu[arm]["history"] == default[arm]["history"]
        for case in ("validation", "test"):
            for m, values in default[arm][case].items():
                assert np.array_equal(cpu[arm][case][m], values), (arm, case, m)
    # the learned arms learned something on the synthetic walks (a check that the comparison is not of constants)
    assert default["full"]["test"]["recall@10"].mean() > 0


def test_device_is_checked(monkeypatch):
    assert resolve_device("cpu") == resolve_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ValueError, match="cpu or cuda"):
        resolve_device("meta")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="is_available"):
        resolve_device("cuda")


def test_history_length_table_by_hand():
    """Synthetic split with test histories of lengths 2, 4, 9 and 12 (thresholds 3 and 10)."""
    lens = [2, 4, 9, 12]
    case = EvalCase(np.arange(4), [np.ones(n, dtype=np.int64) for n in lens], np.ones(4, dtype=np.int64))
    split = Split(train=[], train_times=[], validation=case, test=case, stats={})
    assert history_lengths(split).tolist() == lens
    row = history_length_table({"toy": split}, {"L_r": 3, "L": 10}).iloc[0].to_dict()
    assert row == {
        "data": "toy",
        "evaluated users": 4,
        "median": 6.5,
        "p90": pytest.approx(11.1),
        "max": 12,
        "users > L_r": 3,
        "share > L_r": 0.75,
        "users > L": 1,
        "share > L": 0.25,
    }


CUDA_TOLERANCE = 0.04  # absolute, on a mean Recall@10 / NDCG@10 over 80 users: about three users flipped


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)")
def test_cuda_matches_cpu_within_tolerance():
    """Same seed, dropout off: the same starting weights (fingerprinted on the CPU), the same batches and sampled
    negatives; per-epoch losses agree to 1e-4 relative, mean metrics to CUDA_TOLERANCE, cached scores to 1e-3."""
    cpu, cuda = _runs("cpu"), _runs("cuda")
    for arm in ARMS:
        assert cuda[arm]["checkpoint"] == cpu[arm]["checkpoint"]
        for hc, hg in zip(cpu[arm]["history"], cuda[arm]["history"]):
            assert hg == pytest.approx(hc, rel=1e-4), arm
        for m in ("recall@10", "ndcg@10", "recall@50"):
            assert abs(cuda[arm]["test"][m].mean() - cpu[arm]["test"][m].mean()) <= CUDA_TOLERANCE, (arm, m)
    split = _synthetic_split()
    sem = torch.from_numpy(np.random.default_rng(1).normal(size=(60, 16)).astype(np.float32))
    cfg = arm_config("full", _base(), **KW)
    tc = TrainConfig(epochs=1, batch_size=64, n_sampled=16)
    m_cpu = train_model(cfg, tc, split.train, 3, sem, progress=False).model
    m_gpu = train_model(cfg, tc, split.train, 3, sem, progress=False, device="cuda").model
    r = np.array([max(len(h) - 2, 0) for h in split.test.history])
    sc, sg = cached_scores(m_cpu, split.test.history, r), cached_scores(m_gpu, split.test.history, r)
    assert sg.is_cuda and torch.allclose(sg.cpu(), sc, atol=1e-3)
