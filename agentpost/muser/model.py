"""The MuSeR user model (compression -> light Transformer -> multi-query interests) and item encoder, plus two
references written here: SASRec-style (Kang & McAuley 2018: causal self-attention over the raw sequence,
last-position readout, dot-product score) and ComiRec-SA-style (Cen et al., KDD 2020, the self-attentive
multi-interest extractor, :class:`ComiRecSA`).

Items (muser.md section 4; fusion and alignment are unknown in the paper): e_i = normalize(E_id[i] + W_sem s_i),
where s_i is the all-MiniLM-L6-v2 embedding of the movie's title, year and genres (frozen). This is **not** the
paper's ERNIE summaries -> distilled model -> BGE pipeline. The spec's W_id is absorbed into the learned table.

Serving form (``split_serving``; the paper's Eq. 14 per digest-B, form unknown): the long part
(far + mid tokens) and the short part (recent tokens) are encoded separately by the same encoder, each gives M
interests, and u = g u_long + (1 - g) u_short with a learned scalar gate g = sigmoid(w) (g = 0 for a user with no
long history). The long part can then be computed asynchronously and cached (:mod:`agentpost.muser.serving`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from agentpost.muser.compression import POOLS, RECENT, compress, segment_ids
from agentpost.muser.interests import (
    INTEREST_AGGREGATIONS,
    ORTHO_FORMS,
    adaptive_score,
    interest_cosines,
    masked_softmax,
    multi_query_interests,
)

KINDS = ("muser", "sasrec", "comirec_sa")


@dataclass(frozen=True)
class MuSeRConfig:
    """One arm of the ablation. Defaults follow the spec where it gives one (M = 6, strides 1/16/64, tau = 0.07)."""

    n_items: int
    dim: int = 32  # embedding size d
    max_len: int = 200  # history window L (positions, newest kept)
    recent_len: int = 20  # L_r raw recent positions
    mid_len: int = 60  # L_m mid positions
    strides: tuple = (1, 16, 64)  # pooling strides recent / mid / far
    use_long: bool = True  # False: the recent segment only (no mid/far history)
    pool: str = "mean"  # mean or attentive
    num_interests: int = 6  # M
    layers: int = 1
    heads: int = 2
    dropout: float = 0.1
    tau: float = 0.07
    interest_agg: str = "softmax"
    ortho_lambda: float = 0.0
    ortho_form: str = "normalized"
    semantic: bool = False  # fuse MiniLM text semantics into item vectors
    align_weight: float = 0.0  # weight of the ID-semantic InfoNCE alignment loss
    split_serving: bool = False  # long / short encoded separately and fused by a gate (cacheable)
    kind: str = "muser"  # muser, sasrec or comirec_sa

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if (
            self.pool not in POOLS
            or self.interest_agg not in INTEREST_AGGREGATIONS
            or self.ortho_form not in ORTHO_FORMS
        ):
            raise ValueError(
                f"bad pool / interest_agg / ortho_form: {self.pool!r}, {self.interest_agg!r}, {self.ortho_form!r}"
            )
        if self.dim % self.heads or self.num_interests < 1 or self.recent_len < 1 or self.max_len < self.recent_len:
            raise ValueError("need dim divisible by heads, num_interests >= 1, 1 <= recent_len <= max_len")
        if self.align_weight > 0 and not self.semantic:
            raise ValueError("align_weight > 0 needs semantic=True (the alignment loss ties ID and text views)")
        if self.split_serving and not self.use_long:
            raise ValueError("split_serving needs use_long=True (there is no long part to cache otherwise)")

    def as_dict(self) -> dict:
        return asdict(self)


class ItemEncoder(nn.Module):
    """e_i = normalize(E_id[i] (+ W_sem s_i)); item 0 is padding (zero vector)."""

    def __init__(self, n_items: int, dim: int, semantic: torch.Tensor | None = None, normalize: bool = True):
        super().__init__()
        self.id_emb = nn.Embedding(n_items + 1, dim, padding_idx=0)
        nn.init.normal_(self.id_emb.weight, std=0.1)
        with torch.no_grad():
            self.id_emb.weight[0].zero_()
        self.normalize = normalize
        if semantic is not None:
            sem = torch.cat([torch.zeros(1, semantic.shape[1]), torch.as_tensor(semantic, dtype=torch.float32)])
            self.register_buffer("sem", sem, persistent=False)
            self.w_sem = nn.Linear(sem.shape[1], dim, bias=False)
        else:
            self.sem, self.w_sem = None, None

    def views(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(ID view E_id[i], semantic view W_sem s_i or None)."""
        return self.id_emb(ids), (self.w_sem(self.sem[ids]) if self.sem is not None else None)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.sem is None:
            e = self.id_emb(ids)
            return F.normalize(e, dim=-1) * (ids > 0).unsqueeze(-1) if self.normalize else e
        # fuse the whole catalogue once and gather (cheaper than projecting every history position)
        table = F.normalize(self.id_emb.weight + self.w_sem(self.sem), dim=-1)
        return table[ids] * (ids > 0).unsqueeze(-1)

    def all_items(self) -> torch.Tensor:
        """Vectors of items 1..N, (N, d)."""
        return self(torch.arange(1, self.id_emb.num_embeddings, device=self.id_emb.weight.device))


def _encoder(dim: int, heads: int, layers: int, dropout: float) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(
        dim, heads, dim_feedforward=2 * dim, dropout=dropout, batch_first=True, norm_first=True
    )
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class MuSeR(nn.Module):
    """User tower: window -> Z (compression) -> H = Encoder(Z + P) -> u_1..M (multi-query interests)."""

    def __init__(self, cfg: MuSeRConfig, semantic: torch.Tensor | None = None):
        super().__init__()
        if cfg.kind != "muser":
            raise ValueError("MuSeR needs kind='muser'")
        self.cfg = cfg
        self.items = ItemEncoder(cfg.n_items, cfg.dim, semantic if cfg.semantic else None)
        window = cfg.max_len if cfg.use_long else cfg.recent_len
        self.window = window
        seg = segment_ids(window, cfg.recent_len, cfg.mid_len, cfg.strides)
        self.register_buffer("seg", seg, persistent=False)
        self.n_long = int((seg != RECENT).sum())
        self.pos = nn.Parameter(torch.randn(len(seg), cfg.dim) * 0.02)  # P: one learned vector per token slot
        self.seg_emb = nn.Embedding(3, cfg.dim)
        nn.init.normal_(self.seg_emb.weight, std=0.02)
        self.pool_w = nn.Parameter(torch.zeros(cfg.dim)) if cfg.pool == "attentive" else None
        self.encoder = _encoder(cfg.dim, cfg.heads, cfg.layers, cfg.dropout)
        self.queries = nn.Parameter(torch.randn(cfg.num_interests, cfg.dim) / cfg.dim**0.5)
        self.gate = nn.Parameter(torch.zeros(())) if cfg.split_serving else None

    def tokens(self, hist: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Z + P and the token mask for item ids ``hist`` (B, window), left-padded with 0."""
        if hist.shape[1] != self.window:
            raise ValueError(f"history window must have {self.window} positions, got {hist.shape[1]}")
        c = self.cfg
        z, zmask = compress(
            self.items(hist), hist > 0, c.recent_len, c.mid_len, c.strides, pool=c.pool, attn=self.pool_w
        )
        return z + self.pos + self.seg_emb(self.seg), zmask

    def encode(self, z: torch.Tensor, zmask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Interests of a token set; rows with no real token get zeros and ``has`` False."""
        has = zmask.any(1)
        safe = zmask.clone()
        safe[~has, -1] = True  # keeps attention finite; the row is zeroed below
        h = self.encoder(z, src_key_padding_mask=~safe)
        u = multi_query_interests(self.queries, h, safe)
        return u * has[:, None, None], has

    def long_short(self, hist: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(u_long, has_long, u_short) of the serving form."""
        z, zmask = self.tokens(hist)
        n = self.n_long
        u_long, has_long = self.encode(z[:, :n], zmask[:, :n])
        u_short, _ = self.encode(z[:, n:], zmask[:, n:])
        return u_long, has_long, u_short

    def fuse(self, u_long: torch.Tensor, has_long: torch.Tensor, u_short: torch.Tensor) -> torch.Tensor:
        """u = g u_long + (1 - g) u_short, g = sigmoid(w) for users with a long history, else 0."""
        g = torch.sigmoid(self.gate) * has_long.to(u_short.dtype)[:, None, None]
        return g * u_long + (1 - g) * u_short

    def forward(self, hist: torch.Tensor) -> torch.Tensor:
        """Interests U (B, M, d) of histories ``hist`` (B, window)."""
        if self.cfg.split_serving:
            return self.fuse(*self.long_short(hist))
        return self.encode(*self.tokens(hist))[0]

    def score(self, u: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Candidate-adaptive score s(u, i) against item vectors (N, d) or (B, N, d) -> (B, N)."""
        return adaptive_score(interest_cosines(u, items), self.cfg.tau, self.cfg.interest_agg)


class SASRec(nn.Module):
    """SASRec-style reference: raw window, learned positions, causal pre-norm blocks, u = last position's output,
    s(u, i) = u^T E[i] with the shared item table (ID only)."""

    def __init__(self, cfg: MuSeRConfig, semantic=None):
        super().__init__()
        if cfg.kind != "sasrec":
            raise ValueError("SASRec needs kind='sasrec'")
        self.cfg = cfg
        self.window = cfg.max_len
        self.items = ItemEncoder(cfg.n_items, cfg.dim, None, normalize=False)
        self.pos = nn.Parameter(torch.randn(cfg.max_len, cfg.dim) * 0.02)
        self.encoder = _encoder(cfg.dim, cfg.heads, cfg.layers, cfg.dropout)
        self.norm = nn.LayerNorm(cfg.dim)

    def forward(self, hist: torch.Tensor) -> torch.Tensor:
        b, n = hist.shape
        valid = hist > 0
        i = torch.arange(n, device=hist.device)
        allowed = (i[None, :] <= i[:, None])[None] & (
            valid[:, None, :] | torch.eye(n, dtype=torch.bool, device=hist.device)[None]
        )
        mask = torch.zeros(b, n, n, device=hist.device).masked_fill(~allowed, float("-inf"))
        mask = mask.repeat_interleave(self.cfg.heads, dim=0)
        h = self.encoder(self.items(hist) * self.cfg.dim**0.5 + self.pos, mask=mask)
        return self.norm(h[:, -1:])

    def score(self, u: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        if items.dim() == 2:
            return torch.einsum("bmd,nd->bn", u, items)
        return torch.einsum("bmd,bnd->bn", u, items)


class ComiRecSA(nn.Module):
    """ComiRec-SA-style multi-interest reference (Cen et al., KDD 2020, section 3.3, self-attentive method; the
    authors' ``Model_ComiRec_SA`` in THUDM/ComiRec ``src/model.py``, read for reference): over the raw window,
    ``A = softmax_positions(W_2 tanh(W_1 (E + P)))`` with ``W_1`` d -> 4d and ``W_2`` 4d -> M (padding masked),
    interests ``U = A^T E`` (the item embeddings without positions). No encoder, no compression.

    Scoring: an item's score is its best interest's, ``max_m cos(u_m, e_i) / tau`` -- how ComiRec ranks at serving
    (each interest retrieves, the aggregation module merges by score; its diversity term is off here). Training uses
    this chapter's next-K objective on that score (for the positive, the max picks ComiRec's "hard readout" interest;
    ComiRec scores negatives with the positive's interest and a sampled softmax), with the same ID item table,
    embedding size, epochs and negatives as every other arm."""

    def __init__(self, cfg: MuSeRConfig, semantic=None):
        super().__init__()
        if cfg.kind != "comirec_sa":
            raise ValueError("ComiRecSA needs kind='comirec_sa'")
        self.cfg = cfg
        self.window = cfg.max_len
        self.items = ItemEncoder(cfg.n_items, cfg.dim, None)
        self.pos = nn.Parameter(torch.randn(cfg.max_len, cfg.dim) * 0.02)
        self.w1 = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.w2 = nn.Linear(4 * cfg.dim, cfg.num_interests)

    def attention(self, hist: torch.Tensor) -> torch.Tensor:
        """A (B, M, window): each interest's weights over the window's positions (0 on padding)."""
        e = self.items(hist)
        logits = self.w2(torch.tanh(self.w1(e + self.pos))).transpose(1, 2)
        valid = hist > 0
        safe = valid.clone()
        safe[~valid.any(1), -1] = True  # an empty window keeps one entry (its item vector is zero)
        return masked_softmax(logits, safe[:, None, :].expand_as(logits))

    def forward(self, hist: torch.Tensor) -> torch.Tensor:
        """Interests U (B, M, d) of histories ``hist`` (B, window)."""
        if hist.shape[1] != self.window:
            raise ValueError(f"history window must have {self.window} positions, got {hist.shape[1]}")
        return self.attention(hist) @ self.items(hist)

    def score(self, u: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return adaptive_score(interest_cosines(u, items), self.cfg.tau, "max")


def build_model(cfg: MuSeRConfig, semantic=None) -> nn.Module:
    """The user tower of ``cfg.kind`` (text semantics only for MuSeR arms)."""
    if cfg.kind == "sasrec":
        return SASRec(cfg)
    if cfg.kind == "comirec_sa":
        return ComiRecSA(cfg)
    return MuSeR(cfg, semantic)
