"""MuSeR model, serving cache and MovieTweetings loader. Model tests use tiny random models on synthetic
sequences (labelled synthetic); data tests read the real files."""

import shutil

import numpy as np
import pytest
import torch

from agentpost.data.movietweetings import EvalCase, Movie, leave_last_out, load_interactions, time_split
from agentpost.muser.diagnostic import ARMS, arm_config, item_texts
from agentpost.muser.model import ComiRecSA, MuSeR, MuSeRConfig, SASRec, build_model
from agentpost.muser.serving import build_replay, cached_scores, policy_lengths, refresh_lengths, replay_policy
from agentpost.muser.train import TrainConfig, batch_loss, evaluate, history_windows, prefixes, train_model


def _cfg(**kw):
    base = dict(n_items=30, dim=8, max_len=12, recent_len=3, mid_len=4, strides=(1, 2, 4), num_interests=3, dropout=0.0)
    return MuSeRConfig(**{**base, **kw})


def test_padding_never_changes_the_interests():
    torch.manual_seed(0)
    m = MuSeR(_cfg()).eval()
    hist = torch.tensor([[0, 0, 0, 0, 0, 5, 6, 7, 8, 9, 10, 11]])
    u = m(hist)
    # the same history in a batch with a longer one, and with padded positions' embeddings perturbed
    both = torch.cat([hist, torch.arange(1, 13)[None]])
    assert torch.allclose(m(both)[0], u[0], atol=1e-6)
    with torch.no_grad():
        m.items.id_emb.weight[0] = 5.0  # padding row (never read: masked)
    assert torch.allclose(m(hist), u, atol=1e-6)


def test_serving_form_fresh_cache_equals_offline_exactly_and_gate():
    torch.manual_seed(0)
    m = MuSeR(_cfg(split_serving=True)).eval()
    hists = [np.arange(1, 11), np.array([4, 5])]
    with torch.no_grad():
        offline = m.score(m(torch.from_numpy(history_windows(hists, m.window))), m.items.all_items())
    assert torch.equal(cached_scores(m, hists, np.array([10, 2])), offline)
    # a user without long history: u = u_short (g = 0)
    ul, has, us = m.long_short(torch.from_numpy(history_windows(hists, m.window)))
    assert has.tolist() == [True, False] and torch.equal(m.fuse(ul, has, us)[1], us[1])


def test_refresh_policies():
    n = np.arange(5, 11)  # six requests, n0 = 5
    t = np.array([10, 20, 30, 100, 110, 250])
    assert refresh_lengths(n, t, 5, 0, "never", 0).tolist() == [5] * 6
    assert refresh_lengths(n, t, 5, 0, "actions", 1).tolist() == n.tolist()
    assert refresh_lengths(n, t, 5, 0, "actions", 4).tolist() == [5, 5, 5, 5, 9, 9]
    assert refresh_lengths(n, t, 5, 0, "time", 0).tolist() == n.tolist()
    # jobs at 100, 200: the request at 100 uses the job at 100, which saw the actions at 10, 20, 30 (its own event
    # is the target); the request at 110 sees those and the action at 100; the one at 250 uses the job at 200
    assert refresh_lengths(n, t, 5, 0, "time", 100).tolist() == [5, 5, 5, 8, 9, 10]
    with pytest.raises(ValueError, match="integer"):
        refresh_lengths(n, t, 5, 0, "actions", 0)


@pytest.mark.claim("muser", "C4")
def test_cache_gap_zero_without_drift_and_grows_with_interval_under_drift():
    """Synthetic: one user whose history drifts from items 1-10 to items 21-30 during the replay."""
    torch.manual_seed(0)
    m = MuSeR(_cfg(max_len=24, recent_len=2, mid_len=6, split_serving=True)).eval()
    with torch.no_grad():
        m.pos.zero_()
        m.seg_emb.weight.zero_()
    drift = np.concatenate([np.tile(np.arange(1, 11), 2), np.arange(21, 31), np.arange(21, 31)])
    steady = np.full(40, 7)
    for seq, drifting in ((drift, True), (steady, False)):
        case = EvalCase(np.zeros(20, dtype=np.int64), [seq[:j] for j in range(20, 40)], seq[20:40], np.arange(20, 40))
        rep = build_replay(case, 20)
        fresh = cached_scores(m, rep.histories, rep.n)
        gaps = [
            float((cached_scores(m, rep.histories, policy_lengths(rep, 20, "actions", k)) - fresh).abs().mean())
            for k in (1, 3, 8, 20)
        ]
        assert gaps[0] == 0.0
        if drifting:
            assert gaps[1] < gaps[2] < gaps[3]
        else:
            assert max(gaps) < 1e-5
    res = replay_policy(m, rep, 20, "never", 0)
    assert res["compute_saved"] == pytest.approx(1 - 1 / 20) and res["staleness_actions"] == pytest.approx(9.5)


def test_arms_are_cumulative_and_the_full_model_is_cacheable():
    base = _cfg()
    cfgs = {a: arm_config(a, base, num_interests=6, ortho_lambda=0.1, align_weight=0.1) for a in ARMS}
    assert cfgs["popularity"] is None
    assert (cfgs["recent_single"].use_long, cfgs["recent_single"].num_interests) == (False, 1)
    assert cfgs["multi"].num_interests == 6 and not cfgs["multi"].use_long
    assert cfgs["compression"].use_long and not cfgs["compression"].semantic
    assert cfgs["semantic"].semantic and cfgs["semantic"].ortho_lambda == 0
    assert cfgs["ortho"].ortho_lambda == 0.1 and cfgs["ortho"].align_weight == 0
    assert cfgs["full"].align_weight == 0.1 and cfgs["full"].split_serving
    assert cfgs["uncompressed"].strides == (1, 1, 1) and cfgs["sasrec"].kind == "sasrec"
    assert (cfgs["comirec"].kind, cfgs["comirec"].num_interests, cfgs["comirec"].semantic) == ("comirec_sa", 6, False)
    assert len({c.dim for c in cfgs.values() if c}) == 1
    with pytest.raises(ValueError, match="semantic"):
        _cfg(align_weight=0.1)


def test_training_step_reduces_loss_and_sasrec_is_causal():
    """Synthetic sequences: item t+1 follows item t (mod 30)."""
    seqs = [((np.arange(8) + s) % 30) + 1 for s in range(30)]
    cfg = _cfg(semantic=True, align_weight=0.1, ortho_lambda=0.1)
    sem = torch.randn(30, 16, generator=torch.Generator().manual_seed(0))
    model, hist, *_ = train_model(cfg, TrainConfig(epochs=15, batch_size=64, n_sampled=8), seqs, 0, sem, progress=False)
    assert hist[-1]["next_k"] < hist[0]["next_k"] and {"ortho", "align"} <= set(hist[0])
    m = evaluate(model, [s[:-1] for s in seqs], np.array([s[-1] for s in seqs]))
    assert m["recall@10"].mean() > 10 / 30
    torch.manual_seed(0)
    sas = SASRec(_cfg(kind="sasrec", num_interests=1)).eval()
    h = torch.tensor([[0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]])
    assert sas(h).shape == (1, 1, 8) and torch.isfinite(sas(h)).all()
    assert prefixes([np.array([1, 2, 3]), np.array([4])])[1].tolist() == [1, 2]


def test_comirec_sa_interests_by_hand():
    """Window of 3 with one padding slot; W_2 = 0 except interest 1 reads tanh(W_1 x)[0] = tanh(x_0) with gain 2."""
    cfg = _cfg(kind="comirec_sa", max_len=3, recent_len=1, num_interests=2, dim=2, heads=1)
    m = build_model(cfg)
    assert isinstance(m, ComiRecSA)
    with torch.no_grad():
        m.items.id_emb.weight[1:4] = torch.tensor([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0]])  # unit rows after normalising
        m.pos.zero_()
        for layer in (m.w1, m.w2):
            layer.weight.zero_()
            layer.bias.zero_()
        m.w1.weight[0, 0] = 1.0  # hidden_0 = x_0
        m.w2.weight[1, 0] = 2.0  # logit_1 = 2 tanh(x_0)
    hist = torch.tensor([[0, 1, 2]])  # items (0.6, 0.8) and (1, 0) after normalisation; slot 0 padding
    a = m.attention(hist)
    # interest 0: uniform over the two items; interest 1: softmax(2 tanh 0.6, 2 tanh 1.0) = softmax(1.0740, 1.5232)
    w = torch.softmax(torch.tensor([2 * np.tanh(0.6), 2 * np.tanh(1.0)]), 0)
    assert a[0, :, 0].tolist() == [0.0, 0.0]
    assert a[0, 0, 1:].tolist() == pytest.approx([0.5, 0.5]) and a[0, 1, 1:].tolist() == pytest.approx(w.tolist())
    u = m(hist).detach()
    assert u[0, 0].tolist() == pytest.approx([0.8, 0.4])
    assert u[0, 1].tolist() == pytest.approx(
        (w[0] * torch.tensor([0.6, 0.8]) + w[1] * torch.tensor([1.0, 0.0])).tolist()
    )
    # an item's score is its best interest's cosine / tau
    e = m.items(torch.tensor([3]))  # (0, 1)
    cos = [float(u[0, k, 1] / u[0, k].norm()) for k in range(2)]
    assert m.score(u, e).item() == pytest.approx(max(cos) / cfg.tau, rel=1e-5)


def test_comirec_sa_ignores_padding_and_trains():
    torch.manual_seed(0)
    m = ComiRecSA(_cfg(kind="comirec_sa")).eval()
    hist = torch.tensor([[0] * 7 + [5, 6, 7, 8, 9]])
    with torch.no_grad():
        m.items.id_emb.weight[0] = 5.0
    assert torch.allclose(m(torch.cat([hist, torch.arange(1, 13)[None]]))[0], m(hist)[0], atol=1e-6)
    assert torch.isfinite(m(torch.zeros(1, 12, dtype=torch.long))).all()  # an empty window stays finite
    seqs = [((np.arange(8) + s) % 30) + 1 for s in range(30)]
    _, hist_log, *_ = train_model(
        _cfg(kind="comirec_sa"), TrainConfig(epochs=10, batch_size=64, n_sampled=8), seqs, 0, progress=False
    )
    assert hist_log[-1]["next_k"] < hist_log[0]["next_k"]


def test_full_negatives_and_in_batch_collisions_are_masked():
    torch.manual_seed(0)
    cfg = _cfg()
    m = MuSeR(cfg)
    hist = torch.tensor([[0] * 9 + [1, 2, 3], [0] * 10 + [4, 5]])
    pos = torch.tensor([[6, 7], [6, 0]])
    g = torch.Generator().manual_seed(0)
    for neg in ("in_batch", "sampled", "both", "full"):
        loss, parts = batch_loss(m, hist, pos, cfg, TrainConfig(negatives=neg, n_sampled=5), g)
        assert torch.isfinite(loss) and loss.item() > 0
    with pytest.raises(ValueError, match="negatives"):
        TrainConfig(negatives="hard")


def test_movietweetings_matches_source_md():
    data = load_interactions()
    assert len(data.items) == 16_554 and data.n_interactions == 100_000 and data.n_items == 10_506
    assert all(np.all(np.diff(t) >= 0) for t in data.times)
    lens = np.array([len(s) for s in data.items])
    assert (lens >= 5).sum() == 4_692 and lens[lens >= 5].sum() == 80_854 and lens.max() == 320
    sp = leave_last_out(data, min_eval_len=5)
    assert sp.stats["eval_users"] == 4_692 and sp.stats["short_users_train_only"] == 16_554 - 4_692
    u = sp.test.user[0]
    assert sp.test.target[0] == data.items[u][-1] and sp.validation.target[0] == data.items[u][-2]
    assert len(sp.train[u]) == len(data.items[u]) - 2
    ts = time_split(data)
    assert ts.stats["val_cut"] < ts.stats["test_cut"]
    assert all(t < ts.stats["val_cut"] for tt in ts.train_times for t in tt)
    assert np.all(ts.test.time >= ts.stats["test_cut"]) and all(len(h) >= 1 for h in ts.test.history)
    sub = load_interactions(user_fraction=0.25)
    assert 0.2 < len(sub.items) / 16_554 < 0.3 and np.array_equal(
        sub.users, load_interactions(user_fraction=0.25).users
    )
    assert "Genres:" in data.texts()[0]
    with pytest.raises(ValueError, match="min_eval_len"):
        leave_last_out(data, min_eval_len=2)
    with pytest.raises(ValueError, match="user_fraction"):
        load_interactions(user_fraction=0)


def test_tampered_data_is_refused(tmp_path, monkeypatch):
    from agentpost.data import movietweetings as mt

    from agentpost.data.registry import DataChecksumError, dataset_dir

    folder = tmp_path / "movietweetings-100k"
    folder.mkdir()
    shutil.copy(dataset_dir("movietweetings-100k") / "SOURCE.md", folder / "SOURCE.md")
    (folder / "movies.dat").write_text("1::A (2000)::Drama\n")
    (folder / "ratings.dat").write_text("1::1::5::0\n")
    monkeypatch.setenv("AGENTPOST_DATA", str(tmp_path))
    mt.load_movies.cache_clear()
    with pytest.raises(DataChecksumError, match="movies.dat has 19 bytes; movietweetings-100k/SOURCE.md records"):
        mt.load_movies()
    mt.load_movies.cache_clear()


def test_year_only_text_control_and_its_arm():
    movies = (Movie(1, "Gravity (2013)", ("Drama", "Sci-Fi")), Movie(2, "Untitled", ()))
    assert item_texts(movies, "full") == ["Gravity (2013). Genres: Drama, Sci-Fi.", "Untitled. Genres: unknown genre."]
    assert item_texts(movies, "year") == ["Released in 2013.", "Release year unknown."]
    with pytest.raises(ValueError, match="text mode 'title'"):
        item_texts(movies, "title")
    base = _cfg()
    kw = dict(num_interests=6, ortho_lambda=0.1, align_weight=0.1)
    assert arm_config("semantic_year", base, **kw) == arm_config("semantic", base, **kw)


def test_train_model_counts_updates_and_seeds_are_replications():
    """Synthetic sequences: the optimiser steps are counted, the starting weights are fingerprinted, and two seeds
    start from different weights and give different per-user scores (a seed is a replication)."""
    seqs = [((np.arange(8) + s) % 30) + 1 for s in range(30)]
    tc = TrainConfig(epochs=2, batch_size=64, n_sampled=8)
    a, b, a2 = (train_model(_cfg(), tc, seqs, seed, progress=False) for seed in (0, 1, 0))
    assert a.updates == 2 * int(np.ceil(30 * 7 / 64))
    assert a.checkpoint == a2.checkpoint and a.checkpoint != b.checkpoint
    hist = torch.from_numpy(history_windows([s[:-1] for s in seqs], a.model.window))
    items = a.model.items.all_items()
    sa, sb = a.model.score(a.model(hist), items), b.model.score(b.model(hist), items)
    assert not torch.allclose(sa, sb)
