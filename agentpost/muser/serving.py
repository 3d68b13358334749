"""Serving with cached long-term interests and a replay over the test period (muser.md section 7).

The long-term interests (far + mid tokens) are computed asynchronously and cached; the short-term interests
(recent tokens) are recomputed at every request and fused with the cached long part by the model's gate
(:meth:`agentpost.muser.model.MuSeR.fuse`, serving form). A staleness policy says, for each request, from which
history length r <= n the cached long part was computed (n = the history length at the request):

* ``actions`` N: refreshed after every N actions since the start of the period -> r = n0 + N floor((n - n0)/N);
  N = 1 is always fresh.
* ``time`` T: a batch job at t_cut + T, t_cut + 2T, ... -> r = n0 + #(period actions before the request with
  time <= the latest job time); T = 0 is always fresh.
* ``never``: the cache from the start of the period, r = n0.

The offline number is the same model with r = n (always fresh). Compute saved = 1 - (distinct (user, r) long-part
computations) / (requests), i.e. the share of long-term encoder calls a fresh server would make that the cached one
skips (lazy refresh: a user without requests costs nothing in either).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agentpost.muser.train import history_windows, model_device, ranking_metrics, target_ranks

POLICIES = ("actions", "time", "never")


def refresh_lengths(n: np.ndarray, times: np.ndarray, n0: int, t_cut: int, policy: str, interval: float) -> np.ndarray:
    """History length r of the cache used at each request of ONE user (requests in time order, history lengths
    ``n`` = n0, n0 + 1, ..., times ``times``)."""
    n = np.asarray(n, dtype=np.int64)
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if np.any(np.diff(n) != 1) or (len(n) and n[0] != n0):
        raise ValueError("requests of one user must have history lengths n0, n0 + 1, ... in order")
    if policy == "never":
        return np.full_like(n, n0)
    if policy == "actions":
        if interval < 1 or int(interval) != interval:
            raise ValueError(f"actions interval must be an integer >= 1, got {interval}")
        return n0 + int(interval) * ((n - n0) // int(interval))
    if interval < 0:
        raise ValueError(f"time interval must be >= 0, got {interval}")
    if interval == 0:
        return n.copy()
    job = t_cut + np.floor((np.asarray(times) - t_cut) / interval) * interval  # latest job time <= request
    k = np.arange(len(n))
    # actions i < k (the earlier requests' events) that happened at or before the job time
    return np.array([n0 + int(np.sum(times[:kk] <= job[kk])) for kk in k], dtype=np.int64)


@dataclass
class Replay:
    """Per-request records of a replay (same requests, same order, for every policy)."""

    users: np.ndarray
    n: np.ndarray  # history length at each request
    n0: np.ndarray  # history length of that user at the start of the period
    times: np.ndarray
    targets: np.ndarray
    histories: list[np.ndarray]  # full history at each request


def build_replay(case, t_cut: int) -> Replay:
    """Requests of a time-split test period (:func:`agentpost.data.movietweetings.time_split`), sorted by user
    then time."""
    n = np.array([len(h) for h in case.history], dtype=np.int64)
    order = np.lexsort((n, case.user))
    users, n = case.user[order], n[order]
    n0 = np.zeros_like(n)
    for u in np.unique(users):
        sel = users == u
        n0[sel] = n[sel].min()
    return Replay(users, n, n0, case.time[order], case.target[order], [case.history[i] for i in order])


def policy_lengths(rep: Replay, t_cut: int, policy: str, interval: float) -> np.ndarray:
    """r for every request of the replay."""
    r = np.empty_like(rep.n)
    for u in np.unique(rep.users):
        sel = np.flatnonzero(rep.users == u)
        r[sel] = refresh_lengths(rep.n[sel], rep.times[sel], int(rep.n0[sel[0]]), t_cut, policy, interval)
    return r


@torch.no_grad()
def cached_scores(model, histories: list[np.ndarray], r: np.ndarray) -> torch.Tensor:
    """Scores (B, N) with the long part from ``history[:r]`` (cached) and the short part from the full history, on
    the model's device."""
    w, dev = model.window, model_device(model)
    cached = history_windows([h[:k] for h, k in zip(histories, r)], w)
    u_long, has_long, _ = model.long_short(torch.from_numpy(cached).to(dev))
    _, _, u_short = model.long_short(torch.from_numpy(history_windows(histories, w)).to(dev))
    return model.score(model.fuse(u_long, has_long, u_short), model.items.all_items())


def replay_policy(
    model, rep: Replay, t_cut: int, policy: str, interval: float, *, batch_size: int = 512, ks=(10, 50)
) -> dict:
    """Online (cached) metrics per request, the compute saved and the mean staleness (n - r) of one policy."""
    if not getattr(model.cfg, "split_serving", False):
        raise ValueError("replay needs a model trained in the serving form (split_serving=True)")
    r = policy_lengths(rep, t_cut, policy, interval)
    ranks = []
    for s in range(0, len(r), batch_size):
        h = rep.histories[s : s + batch_size]
        sc = cached_scores(model, h, r[s : s + batch_size])
        ranks.append(target_ranks(sc, torch.as_tensor(rep.targets[s : s + batch_size]), h))
    computations = len({(int(u), int(k)) for u, k in zip(rep.users, r)})
    ranks = np.concatenate(ranks)
    return {
        "metrics": ranking_metrics(ranks, ks),
        "ranks": ranks,
        "compute_saved": 1 - computations / len(r),
        "staleness_actions": float(np.mean(rep.n - r)),
        "r": r,
    }
