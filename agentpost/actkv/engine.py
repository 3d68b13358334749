"""A real Hugging Face generation loop with a compressed KV cache (dense and paged backends).

- **Attention rows.** :func:`recording_attention` registers an eager attention function with transformers'
  ``AttentionInterface`` (plus the eager mask) and routes every layer's post-RoPE queries, cached keys and
  softmax probabilities to the active policy. ActKV and H2O read the probabilities as they are produced (the
  cost of eager attention: an ``(H_q, q, N)`` probability tensor per layer and step); SnapKV and R-KV keep
  their last ``w`` post-RoPE queries and *recompute* window scores against the cached keys at compression time
  (``O(H_q w N d)`` per layer and compression), as their official code does.
- **Compaction.** :func:`compact_cache` gathers the survivors of every layer into new ``cache.layers[i].keys``
  / ``.values`` tensors (the torch reference of Algorithm 4's in-place copy). Original positions are kept: keys
  keep their RoPE rotation and new tokens get explicit ``position_ids`` equal to their position in the full trace.
  With ``rerotate_keys`` (StreamingLLM's position shift) keys are rotated to in-cache positions and new tokens
  continue from the cache length.
- **Paged backend.** ``kv_backend="paged"`` (ActKV with ``head_reduce="mean_of_max"``) is where the Triton
  kernels plug in: a :class:`~agentpost.actkv.paged.PagedMirror` mirrors the evictable entries into a paged cache,
  and at each round boundary the action attention comes from the decode kernel's log-sum-exp and Algorithm 3
  instead of the eager probabilities, and compaction is Algorithm 4 on the paged cache, written back into the
  DynamicCache. Algorithm 1 (``ActKV.keep_scores`` + the one selector,
  :func:`agentpost.kv_retention.select`) is the same code on both backends.
- **Loops.** :func:`score_trace` feeds a given trace (teacher forcing) chunk by chunk and records each token's
  log-probability, top-1 prediction and, for the budget rule, the confidence of every *generated* token (reasoning
  and action: Algorithm 2 step 1, "for every decoded token"; never the prefix or tool-returned observation text);
  :func:`generate` decodes greedily token by token with the streaming action-region detector and records the
  confidence of each token it decodes. Both compress through the same :class:`CompressedSession`.
- **Per-query-head caches.** A policy with ``expand_kv_heads`` (SnapKV ``head_mode="query_head"``) gets a
  :class:`PerQueryHeadCache`: every KV head is stored once per query head of its group, as official SnapKV does,
  so each query head keeps its own entries (and the cache takes ``H_q / H_kv`` times the memory per entry).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from agentpost.actkv.budget import ConfidenceBudget, TokenConfidence, confidence_from_logits
from agentpost.actkv.paged import PagedMirror
from agentpost.actkv.policies import ActKV, KVPolicy
from agentpost.actkv.regions import ActionRegionDetector, RoundLayout

KV_BACKENDS = ("dense", "paged")
ATTN_NAME = "actkv_recorder"
_SINK: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("actkv_attention_sink", default=None)


def _recording_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Eager attention (as ``modeling_llama.eager_attention_forward``) that also reports its probabilities."""
    n_rep = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(n_rep, dim=1) if n_rep > 1 else key
    v = value.repeat_interleave(n_rep, dim=1) if n_rep > 1 else value
    logits = torch.matmul(query, k.transpose(2, 3)) * scaling
    if attention_mask is not None:
        mask = attention_mask[..., : k.shape[-2]]
        logits = logits.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else logits + mask
    elif query.shape[2] > 1:
        raise RuntimeError("actkv recorder: a multi-token step arrived without a causal mask")
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs, v).transpose(1, 2).contiguous()
    sink = _SINK.get()
    if sink is not None:
        sink(module.layer_idx, query[0], key[0], probs[0], scaling)
    return out, probs


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTN_NAME, _recording_attention)
    AttentionMaskInterface.register(ATTN_NAME, eager_mask)


@contextlib.contextmanager
def recording_attention(model, sink: Callable):
    """Run ``model`` with the recording eager attention; ``sink(layer, q, k, probs, scaling)`` sees every layer."""
    _register()
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = ATTN_NAME
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)
        config._attn_implementation = previous


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rerotate(model, keys: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """Rotate RoPE keys ``(H, n, d)`` by ``delta`` positions ``(H, n)`` (RoPE rotations compose additively)."""
    h, n, d = keys.shape
    cos, sin = model.model.rotary_emb(keys, delta.reshape(1, -1))
    cos, sin = cos.reshape(h, n, d).to(keys.dtype), sin.reshape(h, n, d).to(keys.dtype)
    return keys * cos + _rotate_half(keys) * sin


def per_query_head_cache(config):
    """A DynamicCache that stores each KV head once per query head of its GQA group (``repeat_kv`` before the
    cache update, as official SnapKV); the recording attention then sees one KV head per query head."""
    from transformers import DynamicCache

    n_rep = config.num_attention_heads // config.num_key_value_heads

    class PerQueryHeadCache(DynamicCache):
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return super().update(
                key_states.repeat_interleave(n_rep, dim=1),
                value_states.repeat_interleave(n_rep, dim=1),
                layer_idx,
                *args,
                **kwargs,
            )

    return PerQueryHeadCache(config=config)


def compact_cache(cache, keep: Sequence[torch.Tensor], prefix_len: int) -> None:
    """Keep, on every layer ``l``, the prefix and the evictable entries ``keep[l]`` (``(H_kv, n)`` indices into the
    evictable part, ascending), replacing ``cache.layers[l].keys/.values`` (dense reference of Algorithm 4)."""
    for layer, idx in zip(cache.layers, keep):
        b, h, _, d = layer.keys.shape
        full = torch.cat([torch.arange(prefix_len).expand(h, prefix_len), idx + prefix_len], dim=1)
        gidx = full.view(1, h, -1, 1).expand(b, h, -1, d).to(layer.keys.device)
        layer.keys = torch.gather(layer.keys, 2, gidx)
        layer.values = torch.gather(layer.values, 2, gidx)


@dataclass
class SessionStats:
    """Per-round measurements of a session (round index -> value). Round ``r`` is the stretch between the
    ``r``-th and ``(r+1)``-th compression boundary (round 0 starts after the prefix); the prefix prefill is
    recorded as round ``-1`` and left out of per-token decode figures."""

    peak_entries: dict[int, int] = field(default_factory=dict)  # max cache length per layer (incl. prefix)
    decode_s: dict[int, float] = field(default_factory=dict)  # forward time minus the policy's observe time
    overhead_s: dict[int, float] = field(default_factory=dict)  # observe + score + select + compact
    tokens: dict[int, int] = field(default_factory=dict)
    budgets: list[int] = field(default_factory=list)  # budget in force at each compression
    compressions: int = 0
    kv_backend: str = "dense"
    kernel_s: dict[int, float] = field(default_factory=dict)  # paged backend: time in the Triton ops (in overhead_s)

    def add(self, table: dict, r: int, v) -> None:
        table[r] = table.get(r, 0) + v


class CompressedSession:
    """One sequence, one DynamicCache, one policy: ``feed`` tokens, ``compress`` to the budget.

    ``budget`` is ``B`` (evictable entries kept per layer, prefix excluded); ``budget_rule`` (Algorithm 2)
    updates it right before each compression from the confidence recorded so far.
    """

    def __init__(
        self,
        model,
        policy: KVPolicy,
        budget: int | None,
        *,
        prefix_len: int,
        budget_rule: ConfidenceBudget | None = None,
        kv_backend: str = "dense",
        confidence_k: int = 20,
        confidence_form: str = "deepconf_topk",
    ) -> None:
        from transformers import DynamicCache

        if kv_backend not in KV_BACKENDS:
            raise ValueError(f"kv_backend must be one of {KV_BACKENDS}, got {kv_backend!r}")
        if kv_backend == "paged" and not (isinstance(policy, ActKV) and policy.head_reduce == "mean_of_max"):
            # per_head keeps differ across KV heads while a paged slot holds all of them; "max" over all query
            # heads does not commute with Alg. 3's per-KV-head mean over action tokens
            raise ValueError(
                f"kv_backend='paged' implements ActKV with head_reduce='mean_of_max' only, got policy "
                f"{policy.name!r} (head_reduce={getattr(policy, 'head_reduce', None)!r})"
            )
        if policy.compress_at != "never" and (budget is None or budget < 0):
            raise ValueError(f"policy {policy.name} needs a budget >= 0, got {budget}")
        cfg = model.config
        self.model, self.policy, self.budget, self.prefix_len = model, policy, budget, prefix_len
        self.budget_rule = budget_rule
        if budget_rule is not None:
            budget_rule.budget = budget
        self.n_layers = cfg.num_hidden_layers
        if policy.expand_kv_heads:
            if kv_backend == "paged":
                raise ValueError(f"policy {policy.name!r} stores a per-query-head cache; use kv_backend='dense'")
            self.n_kv = cfg.num_attention_heads
            self.cache = per_query_head_cache(cfg)
        else:
            self.n_kv = cfg.num_key_value_heads
            self.cache = DynamicCache(config=cfg)
        self.policy.reset(self.n_layers, self.n_kv, prefix_len)
        self.n_seen = 0  # tokens of the full trace fed so far
        # position (as rotated into the key) of each cache entry, per layer: (H_kv, N)
        self.positions = [torch.zeros(self.n_kv, 0, dtype=torch.long) for _ in range(self.n_layers)]
        self.confidence: TokenConfidence | None = None
        self.confidence_k, self.confidence_form = confidence_k, confidence_form
        self.stats = SessionStats(kv_backend=kv_backend)
        self.paged = PagedMirror(self.n_layers, prefix_len) if kv_backend == "paged" else None
        self.round = -1  # prefix prefill; the loops advance it at each round boundary
        self._observe_s = 0.0

    @property
    def cache_len(self) -> int:
        return self.cache.get_seq_length()

    @property
    def n_evictable(self) -> int:
        return self.cache_len - self.prefix_len

    def _sink(self, action_rows: torch.Tensor, region_open: bool):
        def sink(layer, q, k, probs, scaling):
            t0 = time.perf_counter()
            if self.paged is None:
                self.policy.observe(layer, probs.detach(), q.detach(), action_rows, region_open, scaling)
            else:
                self.paged.observe(layer, q.detach(), k.shape[1], action_rows, region_open, scaling)
            self._observe_s += time.perf_counter() - t0

        return sink

    @torch.no_grad()
    def feed(
        self, ids: torch.Tensor, action_rows: torch.Tensor | None = None, region_open: bool = False
    ) -> torch.Tensor:
        """Run ``ids`` (1-D) through the model on the cache; returns logits ``(len, V)``."""
        q = ids.numel()
        action_rows = torch.zeros(q, dtype=torch.bool) if action_rows is None else action_rows
        start = self.cache_len if self.policy.rerotate_keys else self.n_seen
        pos = torch.arange(start, start + q).unsqueeze(0)
        self._observe_s = 0.0
        t0 = time.perf_counter()
        with recording_attention(self.model, self._sink(action_rows, region_open)):
            out = self.model(input_ids=ids.view(1, -1), position_ids=pos, cache=self.cache, use_cache=True)
        wall = time.perf_counter() - t0
        if self.paged is not None:
            t1 = time.perf_counter()
            self._paged_call(self.paged.mirror, self.cache)
            self.stats.add(self.stats.overhead_s, self.round, time.perf_counter() - t1)
        self.positions = [torch.cat([p, pos.expand(self.n_kv, -1)], dim=1) for p in self.positions]
        self.n_seen += q
        r = self.round
        self.stats.add(self.stats.decode_s, r, wall - self._observe_s)
        self.stats.add(self.stats.overhead_s, r, self._observe_s)
        self.stats.add(self.stats.tokens, r, q)
        self.stats.peak_entries[r] = max(self.stats.peak_entries.get(r, 0), self.cache_len)
        return out.logits[0].float()

    def record_confidence(self, logits: torch.Tensor, tokens: torch.Tensor) -> np.ndarray:
        """Algorithm 2 step 1 for decoded ``tokens`` ``(m,)``, each predicted by the row of ``logits`` ``(m, V)``
        that produced it; appended to the confidence the budget rule reads. Returns the values (empty without a
        budget rule: nothing else reads them)."""
        if self.budget_rule is None or tokens.numel() == 0:
            return np.zeros(0)
        conf = confidence_from_logits(logits, tokens, k=self.confidence_k, form=self.confidence_form)
        self.confidence = conf if self.confidence is None else self.confidence.concat(conf)
        return conf.values

    def should_compress_mid_round(self, mean_round_len: float) -> bool:
        """Baselines' trigger: the evictable part exceeds ``B + L_bar`` (kv-baselines.md section 6)."""
        return self.policy.compress_at == "overflow" and self.n_evictable > self.budget + mean_round_len

    def _paged_call(self, fn, *args):
        """Run a :class:`PagedMirror` op, booking its kernel time on the current round."""
        before = self.paged.kernel_s
        out = fn(*args)
        self.stats.add(self.stats.kernel_s, self.round, self.paged.kernel_s - before)
        return out

    @torch.no_grad()
    def compress(self) -> None:
        """Score every layer, keep the prefix and the ``B`` evictable entries the one selector picks under the policy's
        protection (:meth:`agentpost.kv_retention.Scorer.select`), compact the cache."""
        if self.policy.compress_at == "never":
            return
        t0 = time.perf_counter()
        if self.budget_rule is not None and self.confidence is not None:
            self.budget = self.budget_rule.update(self.confidence)
        keep = []
        for layer_idx, layer in enumerate(self.cache.layers):
            if self.paged is None:
                scores = self.policy.score(layer_idx, layer.keys[0])
            else:
                scores = self.policy.keep_scores(layer_idx, self._paged_call(self.paged.action_attention, layer_idx))
            idx = self.policy.select(scores, self.budget)
            if idx.shape[0] == 1:
                idx = idx.expand(self.n_kv, -1)
            keep.append(idx)
        self.stats.budgets.append(self.budget)
        if keep[0].shape[1] < self.n_evictable:
            if self.paged is None:
                compact_cache(self.cache, keep, self.prefix_len)
            else:
                self._paged_call(self.paged.compact, self.cache, keep)
            for layer_idx, idx in enumerate(keep):
                self.policy.on_compact(layer_idx, idx)
            for layer_idx, (layer, idx) in enumerate(zip(self.cache.layers, keep)):
                pos = self.positions[layer_idx]
                kept_pos = torch.gather(pos[:, self.prefix_len :], 1, idx)
                if self.policy.rerotate_keys:
                    new_pos = torch.arange(self.prefix_len, self.prefix_len + idx.shape[1]).expand(self.n_kv, -1)
                    ev_keys = layer.keys[0, :, self.prefix_len :]
                    layer.keys[0, :, self.prefix_len :] = rerotate(self.model, ev_keys, new_pos - kept_pos)
                    kept_pos = new_pos.clone()
                self.positions[layer_idx] = torch.cat([pos[:, : self.prefix_len], kept_pos], dim=1)
            self.stats.compressions += 1
        self.stats.add(self.stats.overhead_s, self.round, time.perf_counter() - t0)


@dataclass
class TraceResult:
    """Teacher-forced outcome: per-token log-prob of the given next token, top-1 and action mask (index t scores
    token t; token 0 is unscored), plus the session's per-round stats."""

    logprob: np.ndarray
    top1: np.ndarray
    action_mask: np.ndarray
    target_ids: np.ndarray
    stats: SessionStats
    policy: str
    budget: int | None
    confidence: np.ndarray  # index t: the budget rule's confidence of generated token t; NaN where none recorded

    @property
    def action_nll(self) -> np.ndarray:
        return -self.logprob[self.action_mask]

    @property
    def peak_entries(self) -> int:
        return max(self.stats.peak_entries.values())

    def decode_ms_per_token(self) -> float:
        """Forward time per fed token after the prefix prefill (rounds >= 0)."""
        st = self.stats
        return 1e3 * sum(v for r, v in st.decode_s.items() if r >= 0) / sum(v for r, v in st.tokens.items() if r >= 0)

    def overhead_frac(self) -> float:
        """Policy time (observe + score + select + compact) over forward time, rounds >= 0."""
        st = self.stats
        return sum(v for r, v in st.overhead_s.items() if r >= 0) / sum(v for r, v in st.decode_s.items() if r >= 0)


def _segments(layout: RoundLayout, n: int, chunk: int, boundaries: set[int]) -> list[tuple[int, int]]:
    cuts = {layout.prefix_len, n} | boundaries | set(layout.region_starts)
    cuts |= {s for a, b in layout.round_spans for s in range(a, b, chunk)}
    pts = sorted(c for c in cuts if layout.prefix_len <= c <= n)
    return list(zip(pts[:-1], pts[1:]))


@torch.no_grad()
def score_trace(
    model,
    input_ids: Sequence[int],
    layout: RoundLayout,
    policy: KVPolicy,
    budget: int | None,
    *,
    chunk: int = 32,
    budget_rule: ConfidenceBudget | None = None,
    kv_backend: str = "dense",
    confidence_form: str = "deepconf_topk",
    compress_points: Sequence[int] | None = None,
) -> TraceResult:
    """Teacher-forced scoring of a trace under ``policy`` at budget ``B`` (evictable entries per layer).

    Prefill the protected prefix, then feed each round in chunks of at most ``chunk`` tokens (split at action
    region starts so the accumulator resets at the right token). Round-boundary policies compress before the
    first token of every round after the first (or at ``compress_points``, e.g. right after each round's
    observation); overflow policies compress after any chunk that leaves more than
    ``B + L_bar`` evictable entries. With a ``budget_rule``, confidence is recorded for the tokens of
    ``layout.generated_mask`` (reasoning and action tokens; observations and the prefix are not decoded).
    """
    ids = torch.as_tensor(list(input_ids), dtype=torch.long)
    n = ids.numel()
    if len(layout.action_mask) != n:
        raise ValueError(f"layout covers {len(layout.action_mask)} tokens, trace has {n}")
    if layout.prefix_len < 1:
        raise ValueError("the trace needs a non-empty protected prefix")
    sess = CompressedSession(
        model,
        policy,
        budget,
        prefix_len=layout.prefix_len,
        budget_rule=budget_rule,
        kv_backend=kv_backend,
        confidence_form=confidence_form,
    )
    logprob = np.zeros(n)
    top1 = np.zeros(n, dtype=np.int64)
    amask = torch.tensor(layout.action_mask)
    points = {a for a, _ in layout.round_spans[1:]} if compress_points is None else set(compress_points)
    if not all(layout.prefix_len < p < n for p in points):
        raise ValueError(f"compression points must lie inside the rounds ({layout.prefix_len}, {n}): {sorted(points)}")
    region_starts = set(layout.region_starts)
    generated = torch.tensor(layout.generated)
    confidence = np.full(n, np.nan)

    def record(logits: torch.Tensor, first: int) -> None:
        # logits[j] predicts token first + j + 1
        lo, hi = first + 1, min(n, first + 1 + logits.shape[0])
        tgt = ids[lo:hi]
        lp = torch.log_softmax(logits[: tgt.numel()].double(), dim=-1)
        logprob[lo:hi] = lp.gather(-1, tgt.view(-1, 1)).squeeze(-1).numpy()
        top1[lo:hi] = lp.argmax(-1).numpy()
        dec = generated[lo:hi].nonzero(as_tuple=True)[0]
        confidence[lo + dec.numpy()] = sess.record_confidence(logits[dec], tgt[dec]) if sess.budget_rule else np.nan

    pre = layout.prefix_len
    record(sess.feed(ids[:pre]), 0)
    sess.round = 0
    for a, b in _segments(layout, n, chunk, points):
        if a in points:
            sess.round += 1
            if policy.compress_at == "round_boundary":
                sess.compress()
        record(sess.feed(ids[a:b], amask[a:b], a in region_starts), a)
        if sess.should_compress_mid_round(layout.mean_round_len):
            sess.compress()
    return TraceResult(
        logprob, top1, np.array(layout.action_mask), ids.numpy(), sess.stats, policy.name, budget, confidence
    )


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompt_ids: Sequence[int],
    prefix_len: int,
    policy: KVPolicy,
    budget: int | None,
    *,
    max_new_tokens: int = 64,
    delimiters: str = "qwen",
    budget_rule: ConfidenceBudget | None = None,
    on_action_end: Callable[[list[int]], Sequence[int]] | None = None,
    mean_round_len: float = 64.0,
    kv_backend: str = "dense",
) -> tuple[list[int], SessionStats]:
    """Greedy decoding with compression: the streaming detector marks action tokens; when an action closes, the
    optional ``on_action_end(generated)`` returns observation tokens to append (the environment's reply), then
    round-boundary policies compress before decoding resumes. Overflow policies compress past ``B + L_bar``.
    Returns the generated ids (observations included) and the session stats."""
    ids = torch.as_tensor(list(prompt_ids), dtype=torch.long)
    sess = CompressedSession(
        model, policy, budget, prefix_len=prefix_len, budget_rule=budget_rule, kv_backend=kv_backend
    )
    det = ActionRegionDetector(delimiters)
    for t in ids[prefix_len:].tolist():
        det.push(tokenizer.decode([t], skip_special_tokens=False))
    logits = sess.feed(ids[:prefix_len])
    sess.round = 0
    if ids.numel() > prefix_len:
        logits = sess.feed(ids[prefix_len:])
    out: list[int] = []
    eos = getattr(tokenizer, "eos_token_id", None)
    while len(out) < max_new_tokens:
        nxt = int(logits[-1].argmax())
        sess.record_confidence(logits[-1:], torch.tensor([nxt]))  # the decoded token; never the observations
        ev = det.push(tokenizer.decode([nxt], skip_special_tokens=False))
        out.append(nxt)
        logits = sess.feed(torch.tensor([nxt]), torch.tensor([ev.in_action]), ev.opened)
        if nxt == eos:
            break
        if ev.closed:
            obs = list(on_action_end(out)) if on_action_end is not None else []
            if obs:
                out.extend(obs)
                for t in obs:
                    det.push(tokenizer.decode([t], skip_special_tokens=False))
                logits = sess.feed(torch.tensor(obs))
            sess.round += 1
            if policy.compress_at == "round_boundary":
                sess.compress()
        elif sess.should_compress_mid_round(mean_round_len):
            sess.compress()
    return out, sess.stats
