"""KV eviction policies behind one interface: ActKV and the baselines FullKV, StreamingLLM, H2O, SnapKV, R-KV, key norm.

Each policy is a scorer of the one KV-retention core (:class:`agentpost.kv_retention.Scorer`, context ``"actkv"``),
a dataclass of its parameters registered in :data:`agentpost.kv_retention.SCORERS`; :data:`POLICIES` is this
chapter's part of that registry and :func:`make_policy` looks a name up through it.

One budget semantics for all (actkv.md, "Defaults"; kv-baselines.md section 6): the protected prefix is never
evicted and not counted; ``B`` is the number of *evictable* entries each layer keeps after a compression. A
policy only scores the evictable entries of one layer; the engine (:mod:`agentpost.actkv.engine`) decides *when*
to compress (``compress_at``), calls :meth:`KVPolicy.score` once per layer, keeps entries with the one selector
(:meth:`agentpost.kv_retention.Scorer.select`: StreamingLLM's sinks and H2O's recent window protected as the policy's
:meth:`~agentpost.kv_retention.Scorer.protect` says, then the top-``B`` scores, ``+inf`` = always kept, ties keep
recent entries) and tells the policy which entries survived (:meth:`KVPolicy.on_compact`).

Scores are ``(G, N)`` with ``G = 1`` (one keep set shared by all KV heads) or ``G = n_kv_heads`` (per KV head).
A policy with ``expand_kv_heads`` (SnapKV ``head_mode="query_head"``) has the engine store the cache expanded to
one copy per query head, as the official SnapKV does, so ``n_kv_heads`` is then the number of query heads.

Once a prefix is protected, the published baselines see the whole sequence: StreamingLLM's sinks are the first
tokens of the *sequence* (inside the prefix, so no evictable entry is a sink), R-KV's softmax and redundancy run
over the whole cache and SnapKV's pooling over the whole sequence; each policy keeps the reading that restricts
them to the evictable entries selectable (``sinks``, ``score_over``, ``pool_over`` = ``"evictable"``).
The pure score functions (``*_scores``) carry the formulas of kv-baselines.md and are unit-tested on hand-built
attention matrices; SnapKV's and R-KV's force their observation window with ``+inf``, as the published code keeps
it. Policy state (accumulators, keep scores) lives on the CPU in float64; attention arrives on the model's device
and is reduced there before it is copied.
"""

from __future__ import annotations

import math
from fractions import Fraction
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from agentpost.actkv.budget import round_half_up
from agentpost.actkv.lrfu import ActionAccumulator, lrfu_update, nucleus_hits, reduce_heads
from agentpost.kv_retention import Scorer, knorm_scores, make_scorer, register, scorers

COMPRESS_AT = ("never", "round_boundary", "overflow")


# ---------------------------------------------------------------------------------------------- pure scores
def streaming_scores(n: int, n_sink: int = 4) -> torch.Tensor:
    """StreamingLLM over ``n`` entries: the first ``n_sink`` forced, then recency (kvpress ``StreamingLLMPress``)."""
    s = torch.arange(n, dtype=torch.float64)
    s[: min(n_sink, n)] = math.inf
    return s.unsqueeze(0)


def h2o_scores(hh: torch.Tensor, seen: torch.Tensor | None = None) -> torch.Tensor:
    """H2O's heavy-hitter score: the accumulated attention ``hh`` ``(G, N)`` (FMInference/H2O
    ``utils_real_drop/modify_llama.py``); its recent window is protected by the selector (:meth:`H2O.protect`).

    ``seen`` ``(G, N)``: the number of queries that attended to each entry; given, the score is ``hh / seen``
    (open in H2O's paper, ``h2o_normalise``: kvpress ``ObservedAttentionPress``,
    :math:`s_i = \\frac{1}{T-i}\\sum_{t\\ge i} A_{t,i}` for a prefill of ``T`` queries)."""
    s = hh.to(torch.float64)
    return s / seen.to(torch.float64).clamp_min(1.0) if seen is not None else s.clone()


def snapkv_scores(
    window_attn: torch.Tensor,
    window: int,
    kernel: int = 5,
    pool: str = "avg",
    *,
    protected: int = 0,
    pool_over: str = "sequence",
) -> torch.Tensor:
    """SnapKV (FasterDecoding/SnapKV ``snapkv_utils.py``; kvpress ``SnapKVPress``).

    ``window_attn``: ``(G, w, T)`` attention of the last ``w`` queries over ``T`` entries (the window being the
    last ``w`` entries). Mean over window queries, then ``avg``/``max`` pooling with stride 1 and padding
    ``kernel // 2`` (zeros counted in the average, as ``avg_pool1d``'s default); window entries forced.
    Returns the scores of entries ``protected..T-1``: pooled over the whole sequence (``pool_over="sequence"``,
    published) or over those entries only (``"evictable"``, zero padding at the prefix boundary).
    """
    if pool not in ("avg", "max"):
        raise ValueError(f"SnapKV pool must be 'avg' or 'max', got {pool!r}")
    if pool_over not in ("sequence", "evictable"):
        raise ValueError(f"SnapKV pool_over must be 'sequence' or 'evictable', got {pool_over!r}")
    if pool_over == "evictable":
        window_attn = window_attn[:, :, protected:]
    g, w, t = window_attn.shape
    if w != window:
        raise ValueError(f"window attention has {w} rows, window is {window}")
    v = window_attn[:, :, : t - window].to(torch.float64).mean(dim=1, keepdim=True)  # (G, 1, T-w)
    pad = kernel // 2
    if v.shape[-1] == 0:
        s = v.squeeze(1)
    elif pool == "avg":
        s = F.avg_pool1d(v, kernel, stride=1, padding=pad, count_include_pad=True).squeeze(1)
    else:
        s = F.max_pool1d(v, kernel, stride=1, padding=pad).squeeze(1)
    s = torch.cat([s[:, : t - window], torch.full((g, window), math.inf, dtype=torch.float64, device=s.device)], dim=1)
    return s if pool_over == "evictable" else s[:, protected:]


def rkv_redundancy(keys: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """R-KV key redundancy per KV head (Zefan-Cai/R-KV ``rkv/utils.py::cal_similarity``, ``retain_direction="last"``).

    ``keys``: ``(G, N, d)``. Cosine similarity with a zero diagonal; in each row the most recent entry whose
    similarity exceeds ``threshold`` is zeroed (index 0 when the row has none, as the official ``max`` over a
    zero-filled index tensor does); then the column mean over rows, softmax over entries -> ``(G, N)``.
    """
    k = keys.to(torch.float64)
    kn = k / (k.norm(dim=-1, keepdim=True) + 1e-8)
    sim = kn @ kn.transpose(-1, -2)
    n = sim.shape[-1]
    sim.diagonal(dim1=-2, dim2=-1).zero_()
    idx = torch.where(
        sim > threshold,
        torch.arange(n, device=sim.device).view(1, 1, n),
        torch.zeros((), dtype=torch.long, device=sim.device),
    )
    retain = idx.max(dim=-1).values  # (G, N): most recent similar entry per row
    sim.scatter_(-1, retain.unsqueeze(-1), 0.0)
    return sim.mean(dim=-2).softmax(dim=-1)


def rkv_scores(
    window_logits: torch.Tensor,
    keys: torch.Tensor,
    window: int,
    kernel: int = 7,
    mix_lambda: float = 0.07,
    threshold: float = 0.5,
    *,
    protected: int = 0,
    score_over: str = "cache",
) -> torch.Tensor:
    """R-KV (``rkv/compression/r1_kv.py::R1KV._compute_scores``): :math:`\\lambda\\,\\mathrm{attn}-(1-\\lambda)\\,\\mathrm{red}`.

    ``window_logits``: ``(G, w, N)`` pre-softmax scores of the last ``w`` queries, already max-pooled over each
    GQA group; softmax over the non-window entries, mean over queries, max-pool (kernel, stride 1, padding
    kernel // 2); redundancy over all ``N`` keys ``(G, N, d)`` sliced to the non-window part; window forced.
    Returns the scores of entries ``protected..N-1``, computed over the whole cache (``score_over="cache"``,
    published) or over those entries only (``"evictable"``: softmax and redundancy ignore the prefix).
    """
    if score_over not in ("cache", "evictable"):
        raise ValueError(f"R-KV score_over must be 'cache' or 'evictable', got {score_over!r}")
    if score_over == "evictable":
        window_logits, keys = window_logits[:, :, protected:], keys[:, protected:]
    g, w, n = window_logits.shape
    if w != window:
        raise ValueError(f"window logits have {w} rows, window is {window}")
    attn = torch.softmax(window_logits[:, :, : n - window].to(torch.float64), dim=-1).mean(dim=1, keepdim=True)
    if attn.shape[-1]:
        attn = F.max_pool1d(attn, kernel, stride=1, padding=kernel // 2)
    attn = attn.squeeze(1)[:, : n - window]
    red = rkv_redundancy(keys, threshold)[:, : n - window]
    s = mix_lambda * attn - (1 - mix_lambda) * red
    s = torch.cat([s, torch.full((g, window), math.inf, dtype=torch.float64, device=s.device)], dim=1)
    return s if score_over == "evictable" else s[:, protected:]


def group_pool(x: torch.Tensor, n_kv_heads: int, how: str) -> torch.Tensor:
    """Pool a query-head tensor ``(H_q, ...)`` over each GQA group -> ``(n_kv_heads, ...)`` (``mean`` or ``max``)."""
    grouped = x.reshape(n_kv_heads, x.shape[0] // n_kv_heads, *x.shape[1:])
    if how == "mean":
        return grouped.mean(dim=1)
    if how == "max":
        return grouped.amax(dim=1)
    raise ValueError(f"group pooling must be 'mean' or 'max', got {how!r}")


# ---------------------------------------------------------------------------------------------- interface
class KVPolicy(Scorer):
    """Base of this chapter's scorers (context ``"actkv"``). Subclasses are dataclasses that set ``name`` and
    ``compress_at`` and implement :meth:`score`; stateful ones also :meth:`reset`, :meth:`observe`, :meth:`on_compact`."""

    context: ClassVar[str] = "actkv"
    compress_at: ClassVar[str] = "overflow"
    #: how many recent query states the engine must pass back at scoring time (SnapKV, R-KV)
    query_window: ClassVar[int] = 0
    #: re-rotate keys to in-cache positions after compaction (StreamingLLM's position shift)
    rerotate_keys: ClassVar[bool] = False
    #: store the cache with one copy of every KV head per query head (per-query-head selection)
    expand_kv_heads: ClassVar[bool] = False

    def reset(self, n_layers: int, n_kv_heads: int, prefix_len: int) -> None:
        self.n_layers, self.n_kv_heads, self.prefix_len = n_layers, n_kv_heads, prefix_len
        self._queries: list[torch.Tensor | None] = [None] * n_layers
        self.scaling = 1.0

    def observe(
        self,
        layer: int,
        attn: torch.Tensor,
        queries: torch.Tensor,
        action_rows: torch.Tensor,
        region_open: bool,
        scaling: float,
    ) -> None:
        """See one chunk's attention ``(H_q, q, N)`` (over the whole cache incl. prefix), queries ``(H_q, q, d)``,
        which rows are action tokens, and whether an action region opened at the chunk's first token."""
        self.scaling = scaling
        if self.query_window:
            prev = self._queries[layer]
            q = queries if prev is None else torch.cat([prev, queries], dim=1)
            self._queries[layer] = q[:, -self.query_window :]

    def score(self, layer: int, keys: torch.Tensor) -> torch.Tensor:
        """Scores ``(G, N - prefix)`` of this layer's evictable entries given all its keys ``(H_kv, N, d)``.
        Called exactly once per layer per compression."""
        raise NotImplementedError

    def on_compact(self, layer: int, keep: torch.Tensor) -> None:
        """``keep``: ``(H_kv, n)`` indices into the evictable entries that survived (ascending)."""

    def window_queries(self, layer: int) -> torch.Tensor:
        q = self._queries[layer]
        if q is None:
            raise RuntimeError(f"{self.name}: no queries observed on layer {layer}")
        return q


@register
@dataclass(eq=False)
class FullKV(KVPolicy):
    name: ClassVar[str] = "fullkv"
    compress_at: ClassVar[str] = "never"

    def score(self, layer, keys):  # pragma: no cover - never called
        raise RuntimeError("FullKV never compresses")


@register
@dataclass(eq=False)
class StreamingLLM(KVPolicy):
    """Attention sinks + recent window (mit-han-lab/streaming-llm ``StartRecentKVCache``): recency scores, the
    sinks protected by the selector.

    ``sinks="sequence"`` (published): the sinks are the first ``n_sink`` tokens of the sequence, so a protected
    prefix of at least ``n_sink`` tokens already holds them and the evictable part is a pure recent window;
    ``"evictable"``: the first ``n_sink`` *evictable* entries are sinks as well."""

    name: ClassVar[str] = "streamingllm"
    n_sink: int = 4
    rerotate_keys: bool = False
    sinks: str = "sequence"

    def __post_init__(self) -> None:
        if self.sinks not in ("sequence", "evictable"):
            raise ValueError(f"StreamingLLM sinks must be 'sequence' or 'evictable', got {self.sinks!r}")

    def score(self, layer, keys):
        return streaming_scores(keys.shape[1] - self.prefix_len, 0)

    def protect(self, n, budget):
        return (self.n_sink if self.sinks == "evictable" else max(0, self.n_sink - self.prefix_len)), 0


@register
@dataclass(eq=False)
class H2O(KVPolicy):
    """Heavy hitters (accumulated attention of every query since the entry arrived) + a recent window of
    ``recent_fraction``·B entries (rounded half up), protected by the selector.

    ``normalise`` (``h2o_normalise``): divide each entry's accumulated attention by the number of queries that
    saw it (kvpress ``ObservedAttentionPress``); the default raw sum is the official decoding-time H2O."""

    name: ClassVar[str] = "h2o"
    recent_fraction: float = 0.5
    group: str = "mean"
    normalise: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.recent_fraction <= 1.0:
            raise ValueError(f"recent_fraction must be in [0, 1], got {self.recent_fraction}")

    def reset(self, n_layers, n_kv_heads, prefix_len):
        super().reset(n_layers, n_kv_heads, prefix_len)
        self._hh = [torch.zeros(n_kv_heads, 0, dtype=torch.float64) for _ in range(n_layers)]
        self._seen = [torch.zeros(n_kv_heads, 0, dtype=torch.float64) for _ in range(n_layers)]

    @staticmethod
    def _grow_add(acc: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        if col.shape[1] > acc.shape[1]:
            acc = torch.cat([acc, torch.zeros(acc.shape[0], col.shape[1] - acc.shape[1], dtype=acc.dtype)], dim=1)
        acc[:, : col.shape[1]] += col
        return acc

    def observe(self, layer, attn, queries, action_rows, region_open, scaling):
        super().observe(layer, attn, queries, action_rows, region_open, scaling)
        col = group_pool(attn[:, :, self.prefix_len :].sum(dim=1).to(torch.float64), self.n_kv_heads, self.group).cpu()
        self._hh[layer] = self._grow_add(self._hh[layer], col)
        # the chunk's q queries sit at the last q cache positions; entry i (of N) is seen by min(q, N - i) of them
        q, n = attn.shape[1], attn.shape[2]
        seen = torch.arange(n, 0, -1, dtype=torch.float64).clamp_max(q)[self.prefix_len :]
        self._seen[layer] = self._grow_add(self._seen[layer], seen.expand(self.n_kv_heads, -1))

    def score(self, layer, keys):
        n = keys.shape[1] - self.prefix_len
        return h2o_scores(self._hh[layer][:, :n], self._seen[layer][:, :n] if self.normalise else None)

    def protect(self, n, budget):
        return 0, round_half_up(Fraction(str(self.recent_fraction)) * budget)  # halves up, not to even

    def on_compact(self, layer, keep):
        self._hh[layer] = torch.gather(self._hh[layer], 1, keep)
        self._seen[layer] = torch.gather(self._seen[layer], 1, keep)


@register
@dataclass(eq=False)
class SnapKV(KVPolicy):
    """Observation window of the last ``window`` queries, pooled attention, window kept (``+inf`` from
    :func:`snapkv_scores`).

    ``head_mode`` (open in the baselines' papers): ``kv_group_mean`` / ``kv_group_max`` pool the window attention
    over each GQA group and select per KV head (kvpress); ``query_head`` selects per query head on a cache stored
    expanded per query head (official SnapKV, which moves ``repeat_kv`` before the cache update).
    ``pool_over``: ``sequence`` (published) pools over the whole sequence, prefix included, and then takes the
    evictable part; ``evictable`` pools over the evictable entries only (zero padding at the prefix boundary)."""

    name: ClassVar[str] = "snapkv"
    HEAD_MODES: ClassVar[tuple[str, ...]] = ("kv_group_mean", "kv_group_max", "query_head")
    window: int = 64
    kernel: int = 5
    pool: str = "avg"
    head_mode: str = "kv_group_mean"
    pool_over: str = "sequence"

    def __post_init__(self) -> None:
        if self.head_mode not in self.HEAD_MODES:
            raise ValueError(f"snap head_mode must be one of {self.HEAD_MODES}, got {self.head_mode!r}")
        if self.pool_over not in ("sequence", "evictable"):
            raise ValueError(f"SnapKV pool_over must be 'sequence' or 'evictable', got {self.pool_over!r}")

    @property
    def query_window(self) -> int:
        return self.window

    @property
    def expand_kv_heads(self) -> bool:
        return self.head_mode == "query_head"

    def score(self, layer, keys):
        q = self.window_queries(layer)  # (H_q, w', d), w' <= window
        w = q.shape[1]
        n = keys.shape[1]
        k = keys.repeat_interleave(q.shape[0] // keys.shape[0], dim=0)
        logits = (q @ k.transpose(-1, -2)).to(torch.float64) * self.scaling  # (H_q, w, N)
        qpos = torch.arange(n - w, n, device=logits.device).view(w, 1)
        logits = logits.masked_fill(
            torch.arange(n, device=logits.device).view(1, n) > qpos, -math.inf
        )  # causal inside the window
        how = "mean" if self.head_mode == "query_head" else self.head_mode.removeprefix("kv_group_")
        attn = group_pool(torch.softmax(logits, dim=-1), self.n_kv_heads, how)  # query_head: groups of one
        return snapkv_scores(attn, w, self.kernel, self.pool, protected=self.prefix_len, pool_over=self.pool_over)


@register
@dataclass(eq=False)
class RKV(KVPolicy):
    """Attention importance minus key redundancy, lambda = 0.07, window of recent queries kept (``+inf`` from
    :func:`rkv_scores`).

    ``score_over``: ``cache`` (published) takes the softmax, the pooling and the redundancy over the whole cache,
    prefix included, then the evictable part; ``evictable`` computes them over the evictable keys only."""

    name: ClassVar[str] = "rkv"
    window: int = 8
    kernel: int = 7
    mix_lambda: float = 0.07
    threshold: float = 0.5
    score_over: str = "cache"

    def __post_init__(self) -> None:
        if self.score_over not in ("cache", "evictable"):
            raise ValueError(f"R-KV score_over must be 'cache' or 'evictable', got {self.score_over!r}")

    @property
    def query_window(self) -> int:
        return self.window

    def score(self, layer, keys):
        q = self.window_queries(layer)
        k = keys.repeat_interleave(q.shape[0] // keys.shape[0], dim=0)
        logits = group_pool((q @ k.transpose(-1, -2)).to(torch.float64) * self.scaling, self.n_kv_heads, "max")
        return rkv_scores(
            logits,
            keys,
            q.shape[1],
            self.kernel,
            self.mix_lambda,
            self.threshold,
            protected=self.prefix_len,
            score_over=self.score_over,
        )


@register
@dataclass(eq=False)
class KNorm(KVPolicy):
    """Key norm (kvpress ``KnormPress``, :func:`agentpost.kv_retention.knorm_scores`): each KV head keeps the
    evictable entries with the lowest key norms; query-agnostic, so it needs no attention (DeltaS's ``key_norm``)."""

    name: ClassVar[str] = "knorm"

    def score(self, layer, keys):
        return knorm_scores(keys[:, self.prefix_len :])


@register
@dataclass(eq=False)
class ActKV(KVPolicy):
    """Algorithm 1: action-attention LRFU, compression only at round boundaries."""

    name: ClassVar[str] = "actkv"
    compress_at: ClassVar[str] = "round_boundary"
    p: float = 0.9
    decay: float = 0.5
    head_reduce: str = "mean_of_max"

    def reset(self, n_layers, n_kv_heads, prefix_len):
        super().reset(n_layers, n_kv_heads, prefix_len)
        g = n_kv_heads if self.head_reduce == "per_head" else 1
        self._acc = [ActionAccumulator(g) for _ in range(n_layers)]
        self._ks = [torch.zeros(g, 0, dtype=torch.float64) for _ in range(n_layers)]

    def observe(self, layer, attn, queries, action_rows, region_open, scaling):
        super().observe(layer, attn, queries, action_rows, region_open, scaling)
        if region_open:
            self._acc[layer].reset()
        if action_rows.any():
            rows = attn[:, action_rows.to(attn.device), self.prefix_len :]
            self._acc[layer].add(reduce_heads(rows, self.n_kv_heads, self.head_reduce).cpu())

    def score(self, layer, keys):
        n = keys.shape[1] - self.prefix_len
        acc = self._acc[layer]
        acc.grow(n)
        a = acc.mean()[:, :n]
        acc.reset()  # this round's action attention is consumed by the update
        return self.keep_scores(layer, a)

    def keep_scores(self, layer, a):
        """LRFU update of the keep scores from the round's mean action attention ``a`` ``(G, N)`` — eager
        probabilities (:meth:`score`) or Algorithm 3's recovery (``kv_backend="paged"``); returns ``(G, N)``."""
        self._ks[layer] = lrfu_update(self._ks[layer], a, nucleus_hits(a, self.p), self.decay)
        return self._ks[layer]

    def on_compact(self, layer, keep):
        g = self._ks[layer].shape[0]
        self._ks[layer] = torch.gather(self._ks[layer], 1, keep[:g])
        self._acc[layer].permute(keep[:g])


#: this chapter's scorers: its part of the one registry :data:`agentpost.kv_retention.SCORERS`
POLICIES = scorers("actkv")


def make_policy(name: str, **kwargs) -> KVPolicy:
    """A policy by registry name (``fullkv``, ``streamingllm``, ``h2o``, ``snapkv``, ``rkv``, ``knorm``, ``actkv``)."""
    return make_scorer(name, "actkv", **kwargs)
