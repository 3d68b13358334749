"""The synthetic key-value recall stream (SYNTHETIC, mechanism level; spec "Public small-model diagnostic", CPU).

A stream of chunks of ``chunk_size`` tokens. Each token is a random embedding ``x``; fixed random projections give
its key ``k = W_k x`` and value ``v = W_v x``. **Fact** chunks carry novel tokens; **distractor** chunks repeat one of
a few fixed chunks over and over. One gated-delta layer (:func:`agentpost.deltas.rule.chunk_gated_delta`, unit-norm
keys, constant ``alpha`` and ``beta``) reads the stream and gives each chunk its drift; a full-attention cache holds
every token's ``(k, v)`` and is cut to the budget by a retention policy before any question is asked. Then every fact
is queried with the key of one of its tokens (drawn uniformly, seeded, so that no tie-breaking rule of a policy
favours the queried token): attention over the kept entries (inverse temperature ``sharpness`` on the
cosine of the keys) returns a vector, and the query is recalled when the value closest to that vector (cosine, among
all distinct values of the stream) is the fact's. A repeated distractor writes what the state already stores, so its
drift is near zero and drift-based retention spends the budget on facts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentpost.deltas.retention import CacheEntries, make_policy
from agentpost.deltas.rule import chunk_gated_delta


@dataclass(frozen=True)
class RecallStreamSpec:
    n_facts: int = 12  # fact chunks (novel tokens)
    n_distractor_chunks: int = 36  # distractor chunks, each a repeat of one of n_distractor_kinds
    n_distractor_kinds: int = 3  # distinct distractor chunks
    chunk_size: int = 8  # tokens per chunk
    d_model: int = 128  # embedding size of a token
    d_key: int = 128  # key/value size of the gated-delta layer and the attention cache (> stored pairs)
    alpha: float = 1.0  # gate of the gated-delta layer (1 = no decay)
    beta: float = 0.9  # write strength of the gated-delta layer
    sharpness: float = 16.0  # inverse temperature of the recall attention (on key cosines)
    n_sinks: int = 4  # attention-sink tokens every policy keeps
    n_recent: int = 8  # recent-window tokens every policy keeps
    drift_norm: str = "relative"  # open in the paper: relative (with eps 1e-6) or absolute

    def __post_init__(self):
        for name in ("n_facts", "n_distractor_chunks", "n_distractor_kinds", "chunk_size", "d_model", "d_key"):
            if getattr(self, name) < 1:
                raise ValueError(f"RecallStreamSpec.{name} must be >= 1, got {getattr(self, name)}")
        if not (0.0 < self.alpha <= 1.0 and 0.0 < self.beta <= 1.0):
            raise ValueError(f"alpha and beta must be in (0, 1], got {self.alpha}, {self.beta}")


@dataclass
class RecallStream:
    keys: torch.Tensor  # [N, d_key] raw keys of the cached tokens
    values: torch.Tensor  # [N, d_key]
    chunk_ids: torch.Tensor  # [N]
    is_fact: torch.Tensor  # [n_chunks] bool
    drift: torch.Tensor  # [n_chunks] drift of each chunk in the gated-delta layer
    fact_query_token: torch.Tensor  # [n_facts] index of the token each fact is queried by


def make_stream(spec: RecallStreamSpec, seed: int) -> RecallStream:
    """One seeded stream: chunks shuffled so facts and distractors interleave; drift from the delta layer."""
    gen = torch.Generator().manual_seed(seed)
    W_k = torch.randn(spec.d_model, spec.d_key, generator=gen) / spec.d_model**0.5
    W_v = torch.randn(spec.d_model, spec.d_key, generator=gen) / spec.d_model**0.5
    kinds = torch.randn(spec.n_distractor_kinds, spec.chunk_size, spec.d_model, generator=gen)
    facts = torch.randn(spec.n_facts, spec.chunk_size, spec.d_model, generator=gen)
    order = torch.randperm(spec.n_facts + spec.n_distractor_chunks, generator=gen)
    distractor_kind = torch.randint(0, spec.n_distractor_kinds, (spec.n_distractor_chunks,), generator=gen)
    chunks, is_fact, fact_chunk = [], [], {}
    for slot in order.tolist():
        if slot < spec.n_facts:
            fact_chunk[slot] = len(chunks)
            chunks.append(facts[slot])
            is_fact.append(True)
        else:
            chunks.append(kinds[distractor_kind[slot - spec.n_facts]])
            is_fact.append(False)
    x = torch.cat(chunks)  # [N, d_model]
    keys, values = x @ W_k, x @ W_v
    unit = torch.nn.functional.normalize(keys, dim=-1)
    T = x.shape[0]
    g = torch.full((1, T, 1), float(torch.log(torch.tensor(spec.alpha))))
    beta = torch.full((1, T, 1), spec.beta)
    _, _, drift = chunk_gated_delta(
        unit[None, :, None],
        unit[None, :, None],
        values[None, :, None],
        g,
        beta,
        chunk_size=spec.chunk_size,
        drift_norm=spec.drift_norm,
    )
    offset = torch.randint(0, spec.chunk_size, (spec.n_facts,), generator=gen)
    query = torch.tensor([fact_chunk[f] * spec.chunk_size for f in range(spec.n_facts)]) + offset
    return RecallStream(keys, values, torch.arange(T) // spec.chunk_size, torch.tensor(is_fact), drift[0, 0], query)


def recall_after_retention(
    stream: RecallStream, spec: RecallStreamSpec, policy: str, budget: int, seed: int, **policy_kwargs
) -> torch.Tensor:
    """Per fact 1.0 if it is recalled from the cache kept by ``policy`` at ``budget`` tokens, else 0.0."""
    keys_unit = torch.nn.functional.normalize(stream.keys, dim=-1)
    queries = keys_unit[stream.fact_query_token]  # [n_facts, d]
    attention = None
    if policy == "attention":  # query-aware reference: total attention mass from all the questions
        attention = torch.softmax(spec.sharpness * queries @ keys_unit.T, dim=-1).sum(0)
    entries = CacheEntries(
        positions=torch.arange(len(stream.keys)),
        chunk_ids=stream.chunk_ids,
        drift=stream.drift[stream.chunk_ids],
        key_norm=stream.keys.norm(dim=-1),
        attention=attention,
    )
    extra = {"seed": seed} if policy == "random" else {}
    keep = make_policy(policy, n_sinks=spec.n_sinks, n_recent=spec.n_recent, **extra, **policy_kwargs).keep(
        entries, budget
    )
    weights = torch.softmax(spec.sharpness * queries @ keys_unit[keep].T, dim=-1)
    answer = weights @ stream.values[keep]  # [n_facts, d]
    distinct = torch.unique(stream.values, dim=0)
    nearest = torch.nn.functional.cosine_similarity(answer[:, None], distinct[None], dim=-1).argmax(-1)
    truth = stream.values[stream.fact_query_token]
    return (distinct[nearest] == truth).all(-1).float()
