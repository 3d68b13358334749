"""Language modelling on a stream under a full-attention KV budget (the public-data DeltaS diagnostic).

Protocol for one stream of ``P + M + 1`` tokens ``x_0 .. x_{P+M}`` and a trained :class:`HybridForCausalLM`:

1. **Prefix.** Feed ``x_0 .. x_{P-1}`` in chunks of ``chunk_tokens`` carrying the state. For each chunk ``c`` record
   every gated-DeltaNet layer's state before and after it and score
   ``delta_c = mean_layers mean_heads ||S_after - S_before||_F / (||S_before||_F + eps)`` (spec Eq. 3 reading,
   :func:`agentpost.deltas.rule.state_drift`; what the paper leaves open is a parameter: ``layer_agg`` and
   ``head_agg`` mean or max, ``drift_source`` raw or write term only). Each full-attention KV entry (one per prefix token, shared by all
   attention layers and heads) is tagged with its position, its chunk, its chunk's drift and its key norm (mean over
   heads and attention layers).
2. **Evict.** At a budget of ``round(f * P)`` entries each policy keeps sinks + recent window + its best-scored middle
   entries (:mod:`agentpost.deltas.retention`); kept entries keep their positions. ``eviction="streaming"`` (the
   spec's pseudo-code, the default) evicts after every chunk that leaves the cache over the budget, so later chunks
   (their drift, their keys, the linear states) are read on the evicted cache (:func:`stream_prefix`);
   ``"once"`` reads the whole prefix with full KV and cuts it once, the linear states untouched.
3. **Score.** Feed the continuation inputs ``x_P .. x_{P+M-1}`` on the pruned state (their own KV is appended, never
   evicted) and take the next-token NLL of ``x_{P+1} .. x_{P+M}``, mean over the ``M`` targets (nats/token).

References read every cut against: ``full`` (no eviction), ``sinks_recent`` (only the sinks and the recent window:
the whole middle evicted after a full read, the least any policy keeps at any budget) and ``no_kv`` (no prefix KV at all). The
*headroom* of a stream, NLL(sinks_recent) - NLL(full), bounds the difference any two retention policies can make
on it; a policy's *gap recovered* is the share of that headroom it wins back.

The attention reference scores each prefix entry by the attention mass the continuation's queries give it under the
full cache (mean over attention layers, heads and queries): it sees the future, so it is a query-aware upper
reference, not a streaming policy. Full KV (no eviction) is the reference every cut is read against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from agentpost.deltas.hybrid import HybridForCausalLM, HybridState, LinearState
from agentpost.deltas.retention import CacheEntries, make_policy
from agentpost.deltas.rule import DRIFT_SOURCES, state_drift
from agentpost.kv_retention import protected_mask

AGGREGATIONS = ("mean", "max")
#: Reference cuts every stream is scored under, besides the policies (see the module docstring).
REFERENCES = ("full", "sinks_recent", "no_kv")
#: What a stream's continuation is (see :func:`budget_grid`).
TASKS = ("text", "repeat", "repeat_synthetic")
#: When a policy evicts (see :func:`stream_budget_rows`).
EVICTIONS = ("streaming", "once")


@dataclass
class PrefixRecord:
    """The state after the prefix and what every policy may see of its attention KV entries."""

    state: HybridState
    entries: CacheEntries
    chunk_drift: torch.Tensor  # [n_chunks]
    #: [n_chunks, layers, heads] share of each head's raw change that is decay alone,
    #: ||(e^G - 1) S_before|| / ||S_after - S_before|| (1 = the head drifts by forgetting only)
    decay_share: torch.Tensor


def _aggregate(x: torch.Tensor, how: str, dim: int) -> torch.Tensor:
    if how not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")
    return x.mean(dim) if how == "mean" else x.amax(dim)


def _check_drift_readings(chunk_tokens: int, drift_source: str, layer_agg: str, head_agg: str) -> None:
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if drift_source not in DRIFT_SOURCES:
        raise ValueError(f"drift_source must be one of {DRIFT_SOURCES}, got {drift_source!r}")
    for how in (layer_agg, head_agg):
        _aggregate(torch.zeros(1), how, 0)


def _read_chunk(
    model: HybridForCausalLM,
    chunk: torch.Tensor,
    state: HybridState | None,
    *,
    drift_norm: str,
    eps: float,
    drift_source: str,
    layer_agg: str,
    head_agg: str,
):
    """Feed one chunk ``[1, T]`` on ``state`` (spec pseudo-code step 1). Returns the new state, the chunk's drift
    (``drift_source``, over heads by ``head_agg`` then layers by ``layer_agg``), each (layer, head)'s decay share
    ``||(e^G - 1) S_before|| / ||S_after - S_before||`` and the key norm of each arriving entry ``[T]`` (mean over
    heads and attention layers)."""
    before = None if state is None else state.linear_states()
    state = model(chunk, state=state).state
    after = state.linear_states()
    decays = [s.log_decay for s in state.layers if isinstance(s, LinearState)]
    if before is None:
        before = [torch.zeros_like(s) for s in after]
    per_head = torch.stack(
        [
            state_drift(b, a, drift_norm=drift_norm, eps=eps, drift_source=drift_source, log_decay=g)[0]
            for b, a, g in zip(before, after, decays)
        ]
    )  # [L, H]
    drift = _aggregate(_aggregate(per_head, head_agg, 1), layer_agg, 0)
    decay_part = torch.stack(
        [torch.linalg.matrix_norm((g.exp()[..., None, None] - 1) * b.float())[0] for b, g in zip(before, decays)]
    )
    raw = torch.stack([torch.linalg.matrix_norm((a - b).float())[0] for b, a in zip(before, after)])
    T = chunk.shape[1]
    key_norm = torch.stack([c.keys[0, :, -T:].norm(dim=-1).mean(0) for c in state.attention_caches()]).mean(0)
    return state, drift.cpu(), (decay_part / raw.clamp_min(eps)).cpu(), key_norm.cpu()


@torch.no_grad()
def read_prefix(
    model: HybridForCausalLM,
    prefix: torch.Tensor,
    chunk_tokens: int,
    *,
    drift_norm: str = "relative",
    eps: float = 1e-6,
    drift_source: str = "raw",
    layer_agg: str = "mean",
    head_agg: str = "mean",
) -> PrefixRecord:
    """Step 1 of the protocol on a 1-D token tensor ``prefix`` with nothing evicted: per chunk, each DeltaNet head's
    drift (``drift_source``), aggregated over heads (``head_agg``) then layers (``layer_agg``)."""
    if prefix.dim() != 1 or prefix.numel() < 1:
        raise ValueError(f"prefix must be a non-empty 1-D token tensor, got shape {tuple(prefix.shape)}")
    _check_drift_readings(chunk_tokens, drift_source, layer_agg, head_agg)
    ids = prefix.to(next(model.parameters()).device)[None]
    state, drifts, shares, key_norms = None, [], [], []
    for c0 in range(0, ids.shape[1], chunk_tokens):
        state, drift, share, key_norm = _read_chunk(
            model,
            ids[:, c0 : c0 + chunk_tokens],
            state,
            drift_norm=drift_norm,
            eps=eps,
            drift_source=drift_source,
            layer_agg=layer_agg,
            head_agg=head_agg,
        )
        drifts.append(drift)
        shares.append(share)
        key_norms.append(key_norm)
    chunk_drift = torch.stack(drifts)
    chunk_ids = torch.arange(ids.shape[1]) // chunk_tokens
    entries = CacheEntries(
        positions=torch.arange(ids.shape[1]),
        chunk_ids=chunk_ids,
        drift=chunk_drift[chunk_ids],
        key_norm=torch.cat(key_norms),
    )
    return PrefixRecord(state, entries, chunk_drift, torch.stack(shares))


@torch.no_grad()
def stream_prefix(
    model: HybridForCausalLM,
    prefix: torch.Tensor,
    chunk_tokens: int,
    policy,
    budget: int,
    *,
    drift_norm: str = "relative",
    eps: float = 1e-6,
    drift_source: str = "raw",
    layer_agg: str = "mean",
    head_agg: str = "mean",
) -> tuple[HybridState, CacheEntries]:
    """The spec's streaming pseudo-code (steps 1-2) on a 1-D ``prefix``: feed it chunk by chunk; tag each chunk's
    full-attention entries with the chunk's drift, read on the state this policy's earlier evictions left; whenever
    the cache holds more than ``budget`` entries, ``policy`` (a streaming one) keeps ``budget`` of them, which keep
    their original positions. Returns the final state and its entries (positions ascending)."""
    if policy.query_aware:
        raise ValueError(f"policy {policy.name!r} needs the future query: it cannot evict while streaming")
    _check_drift_readings(chunk_tokens, drift_source, layer_agg, head_agg)
    ids = prefix.to(next(model.parameters()).device)[None]
    state, entries = None, None
    for c, c0 in enumerate(range(0, ids.shape[1], chunk_tokens)):
        state, drift, _, key_norm = _read_chunk(
            model,
            ids[:, c0 : c0 + chunk_tokens],
            state,
            drift_norm=drift_norm,
            eps=eps,
            drift_source=drift_source,
            layer_agg=layer_agg,
            head_agg=head_agg,
        )
        T = key_norm.numel()
        arrived = CacheEntries(
            positions=torch.arange(c0, c0 + T), chunk_ids=torch.full((T,), c), drift=drift.expand(T), key_norm=key_norm
        )
        entries = arrived if entries is None else entries.extend(arrived)
        if len(entries) > budget:
            keep = policy.keep(entries, budget)
            state, entries = state.keep(keep), entries.take(keep)
    return state, entries


@torch.no_grad()
def continuation_nll(
    model: HybridForCausalLM, state: HybridState, continuation: torch.Tensor, record_attention: bool = False
):
    """Step 3: per-target NLL ``[M]`` of ``continuation[1:]`` given ``continuation[:-1]`` fed on ``state``; with
    ``record_attention`` also the mass each cached prefix entry gets (mean over layers, heads, queries)."""
    device = next(model.parameters()).device
    cont = continuation.to(device)[None]
    n_cached = state.attention_caches()[0].positions.numel()
    out = model(cont[:, :-1], state=state, record_attention=record_attention)
    nll = F.cross_entropy(out.logits[0].float(), cont[0, 1:], reduction="none").cpu()
    if not record_attention:
        return nll
    mass = torch.stack([w[0, :, :, :n_cached].mean(dim=(0, 1)) for w in out.attention]).mean(0).cpu()
    return nll, mass


def budget_tokens(fraction: float, prefix_tokens: int) -> int:
    if not 0 < fraction <= 1:
        raise ValueError(f"budget fractions must be in (0, 1], got {fraction}")
    return int(round(fraction * prefix_tokens))


def check_budgets(budget_fractions, prefix_tokens: int, n_sinks: int, n_recent: int) -> None:
    """Every budget must leave entries to choose beyond the sinks and the recent window (else all policies agree)."""
    for frac in budget_fractions:
        if budget_tokens(frac, prefix_tokens) <= n_sinks + n_recent:
            raise ValueError(
                f"budget {frac} of {prefix_tokens} prefix tokens = {budget_tokens(frac, prefix_tokens)} "
                f"entries leaves nothing to choose after {n_sinks} sinks + {n_recent} recent; raise the "
                f"budget or the prefix, or lower n_sinks / n_recent"
            )


@torch.no_grad()
def stream_budget_rows(
    model: HybridForCausalLM,
    tokens: torch.Tensor,
    prefix_tokens: int,
    chunk_tokens: int,
    budget_fractions,
    policies,
    *,
    n_sinks: int,
    n_recent: int,
    buckets: int = 4,
    retention: str = "bucketed",
    drift_norm: str = "relative",
    drift_source: str = "raw",
    layer_agg: str = "mean",
    head_agg: str = "mean",
    eps: float = 1e-6,
    random_seed: int = 0,
    eviction: str = "streaming",
) -> dict:
    """The protocol on one stream ``tokens`` (``P + M + 1`` ids). ``eviction`` (:data:`EVICTIONS`): ``"streaming"``
    evicts whenever the cache exceeds the budget while the prefix is read (:func:`stream_prefix`, the spec's
    pseudo-code); ``"once"`` reads the whole prefix with full KV and cuts it once. The query-aware attention
    reference is always a cut once (it needs the future queries). Returns ``{"nll": rows, "overlap": rows,
    "chunks": frame, "heads": frame}``: continuation NLL per (budget, policy) plus one row per :data:`REFERENCES`
    cut (budget_frac NaN); per budget and policy the share of the attention reference's kept middle positions that
    the policy also keeps; drift, decay share (mean over heads) and attention mass per chunk of the full-KV read."""
    if tokens.numel() < prefix_tokens + 2:
        raise ValueError(
            f"a stream needs at least prefix_tokens + 2 = {prefix_tokens + 2} tokens, got {tokens.numel()}"
        )
    if eviction not in EVICTIONS:
        raise ValueError(f"eviction must be one of {EVICTIONS}, got {eviction!r}")
    drift_kw = {
        "drift_norm": drift_norm,
        "eps": eps,
        "drift_source": drift_source,
        "layer_agg": layer_agg,
        "head_agg": head_agg,
    }
    record = read_prefix(model, tokens[:prefix_tokens], chunk_tokens, **drift_kw)
    continuation = tokens[prefix_tokens:]
    full_nll = continuation_nll(model, record.state, continuation)
    _, mass = continuation_nll(model, record.state, continuation, record_attention=True)
    entries = CacheEntries(
        record.entries.positions,
        record.entries.chunk_ids,
        record.entries.drift,
        record.entries.key_norm,
        attention=mass,
    )
    protected = protected_mask(len(entries), n_sinks, n_recent)  # what every policy keeps
    reference_keeps = {"sinks_recent": torch.nonzero(protected).flatten(), "no_kv": torch.zeros(0, dtype=torch.long)}
    nll_rows = [{"budget_frac": float("nan"), "policy": "full", "kept": len(entries), "nll": float(full_nll.mean())}]
    for name, keep in reference_keeps.items():
        nll = continuation_nll(model, record.state.keep(keep), continuation)
        nll_rows.append(
            {"budget_frac": float("nan"), "policy": name, "kept": int(keep.numel()), "nll": float(nll.mean())}
        )
    overlap_rows = []
    middle = ~protected
    for frac in budget_fractions:
        budget = budget_tokens(frac, prefix_tokens)
        kept = {}
        for name in policies:
            kw = {"n_sinks": n_sinks, "n_recent": n_recent}
            if name == "drift":
                kw.update(buckets=buckets, retention=retention)
            if name == "random":
                kw.update(seed=random_seed)
            policy = make_policy(name, **kw)
            if eviction == "streaming" and not policy.query_aware:
                state, left = stream_prefix(model, tokens[:prefix_tokens], chunk_tokens, policy, budget, **drift_kw)
                kept[name] = left.positions
            else:
                keep = policy.keep(entries, budget)
                state, kept[name] = record.state.keep(keep), entries.positions[keep]
            nll = continuation_nll(model, state, continuation)
            nll_rows.append(
                {"budget_frac": frac, "policy": name, "kept": int(kept[name].numel()), "nll": float(nll.mean())}
            )
        if "attention" in kept:  # positions: the full read's cache index of an entry is its position
            ref = set(kept["attention"][middle[kept["attention"]]].tolist())
            for name, keep in kept.items():
                if name != "attention" and ref:
                    mine = set(keep[middle[keep]].tolist())
                    overlap_rows.append({"budget_frac": frac, "policy": name, "overlap": len(mine & ref) / len(ref)})
    n_chunks = record.chunk_drift.numel()
    chunk_mass = torch.zeros(n_chunks).index_add_(0, record.entries.chunk_ids, mass)
    chunks = pd.DataFrame(
        {
            "chunk": np.arange(n_chunks),
            "drift": record.chunk_drift.numpy(),
            "decay_share": record.decay_share.mean(dim=(1, 2)).numpy(),
            "attention_mass": chunk_mass.numpy(),
        }
    )
    heads = pd.DataFrame(
        [
            {"chunk": c, "layer": l, "head": h, "decay_share": float(record.decay_share[c, l, h])}
            for c in range(n_chunks)
            for l in range(record.decay_share.shape[1])
            for h in range(record.decay_share.shape[2])
        ]
    )
    return {"nll": nll_rows, "overlap": overlap_rows, "chunks": chunks, "heads": heads}


def repeat_span(tokens: torch.Tensor, src: int, dst: int, length: int) -> torch.Tensor:
    """A copy of the 1-D ``tokens`` whose ``[dst, dst + length)`` repeats ``[src, src + length)`` verbatim."""
    if not (0 <= src and src + length <= dst and dst + length <= tokens.numel() and length >= 1):
        raise ValueError(
            f"need 0 <= src, src + length <= dst, dst + length <= {tokens.numel()} tokens; got src {src}, "
            f"dst {dst}, length {length}"
        )
    out = tokens.clone()
    out[dst : dst + length] = tokens[src : src + length]
    return out


def repeat_streams(
    windows: list[torch.Tensor],
    prefix_tokens: int,
    n_sinks: int,
    n_recent: int,
    seed: int,
    pool: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Each window's continuation (its tokens from ``prefix_tokens`` on) replaced by a verbatim repeat of the prefix
    span of the same length starting at ``s ~ U[n_sinks, prefix_tokens - n_recent - length]`` (seeded): the span
    lies wholly in the middle of the cache, which eviction decides about. With ``pool`` (token ids) the span is first
    overwritten by tokens drawn uniformly from it (a synthetic span inside the real text: without the span's KV
    entries its repeat is predictable only at the pool's entropy, ``log len(pool)`` nats a token); the starts are
    drawn first, so a seed keeps its spans' places with or without ``pool``."""
    length = windows[0].numel() - prefix_tokens
    hi = prefix_tokens - n_recent - length
    if hi < n_sinks:
        raise ValueError(
            f"a repeated continuation of {length} tokens does not fit between {n_sinks} sinks and "
            f"{n_recent} recent tokens of a {prefix_tokens}-token prefix"
        )
    if pool is not None and pool.numel() == 0:
        raise ValueError("repeat_streams: the pool of synthetic-span tokens is empty")
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(n_sinks, hi + 1, (len(windows),), generator=gen).tolist()
    if pool is not None:
        windows = [w.clone() for w in windows]
        for w, s in zip(windows, starts):
            w[s : s + length] = pool[torch.randint(0, pool.numel(), (length,), generator=gen)]
    return [repeat_span(w, s, prefix_tokens, length) for w, s in zip(windows, starts)]


def sample_streams(ids: torch.Tensor, n: int, length: int, seed: int) -> list[torch.Tensor]:
    """``n`` windows of ``length`` tokens at uniform random starts of the token stream ``ids`` (seeded)."""
    if ids.numel() <= length:
        raise ValueError(f"the split has {ids.numel()} tokens, fewer than one stream of {length}")
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, ids.numel() - length, (n,), generator=gen)
    return [ids[s : s + length] for s in starts.tolist()]


def budget_grid(
    model: HybridForCausalLM,
    ids: torch.Tensor,
    seed: int,
    *,
    n_streams: int,
    prefix_tokens: int,
    continuation_tokens: int,
    chunk_tokens: int,
    budget_fractions,
    policies,
    n_sinks: int,
    n_recent: int,
    buckets: int = 4,
    retention: str = "bucketed",
    drift_norm: str = "relative",
    drift_source: str = "raw",
    layer_agg: str = "mean",
    head_agg: str = "mean",
    eps: float = 1e-6,
    task: str = "text",
    eviction: str = "streaming",
    synthetic_pool: torch.Tensor | None = None,
    progress: bool = True,
) -> dict:
    """:func:`stream_budget_rows` over ``n_streams`` streams drawn with generator seed ``seed`` (one run = one
    seed; stream ``i``'s random policy uses seed ``1000 * seed + i``). ``task`` is one of :data:`TASKS`: ``"text"``
    scores the text that follows the prefix; ``"repeat"`` makes the continuation a verbatim repeat of a prefix span
    beyond the sinks and the recent window (:func:`repeat_streams`), so the continuation needs the middle of the
    cache; ``"repeat_synthetic"`` does the same after overwriting that span with tokens drawn uniformly from
    ``synthetic_pool`` (SYNTHETIC span, real text around it), so only a copy from the span's entries predicts the
    continuation. ``eviction``: see :func:`stream_budget_rows`. Returns frames ``nll`` and ``overlap`` (column stream, ...), ``chunks`` (stream, chunk, drift,
    decay_share, attention_mass) and ``heads`` (stream, chunk, layer, head, decay_share). Every budget must leave
    room beyond the sinks and the recent window."""
    check_budgets(budget_fractions, prefix_tokens, n_sinks, n_recent)
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if eviction not in EVICTIONS:
        raise ValueError(f"eviction must be one of {EVICTIONS}, got {eviction!r}")
    if task == "repeat_synthetic" and synthetic_pool is None:
        raise ValueError('task "repeat_synthetic" needs synthetic_pool, the token ids its spans are drawn from')
    out = {"nll": [], "overlap": [], "chunks": [], "heads": []}
    windows = sample_streams(ids, n_streams, prefix_tokens + continuation_tokens + 1, seed)
    if task != "text":  # not the starts' draws
        windows = repeat_streams(
            windows,
            prefix_tokens,
            n_sinks,
            n_recent,
            seed + 2**31,
            synthetic_pool if task == "repeat_synthetic" else None,
        )
    for i, window in enumerate(tqdm(windows, desc="LM streams", disable=not progress)):
        res = stream_budget_rows(
            model,
            window,
            prefix_tokens,
            chunk_tokens,
            budget_fractions,
            policies,
            n_sinks=n_sinks,
            n_recent=n_recent,
            buckets=buckets,
            retention=retention,
            drift_norm=drift_norm,
            drift_source=drift_source,
            layer_agg=layer_agg,
            head_agg=head_agg,
            eps=eps,
            random_seed=1000 * seed + i,
            eviction=eviction,
        )
        out["nll"] += [{"stream": i, **r} for r in res["nll"]]
        out["overlap"] += [{"stream": i, **r} for r in res["overlap"]]
        out["chunks"].append(res["chunks"].assign(stream=i))
        out["heads"].append(res["heads"].assign(stream=i))
    return {
        "nll": pd.DataFrame(out["nll"]),
        "overlap": pd.DataFrame(out["overlap"]),
        "chunks": pd.concat(out["chunks"], ignore_index=True),
        "heads": pd.concat(out["heads"], ignore_index=True),
        "windows": windows,
    }
