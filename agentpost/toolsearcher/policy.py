"""A compact stochastic policy the CPU can train, with the token layout a language model would produce.

Every decision is one "token": a categorical choice over options whose logits are ``F @ theta`` (log-linear,
``theta`` shared across requests, 17 numbers). An assistant turn is a run of action tokens (turn decision:
answer or search clause c; category for a search; include/exclude for each candidate in the answer); each tool
response is a run of masked positions (one per retrieved document, scored by the same parameters as a language
model would score retrieved text) that the loss must ignore. The loss itself is :mod:`agentpost.toolsearcher.loss`
over the [rollouts, positions] log-probabilities, exactly as for a transformer's per-token log-probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from agentpost.toolsearcher.env import Rollout, SearchEnv, answer_text, parse_turn, search_call

# feature slices of theta
ANSWER, SEARCH, CATEGORY, INCLUDE = slice(0, 4), slice(4, 9), slice(9, 11), slice(11, 17)
DIM = 17
FEATURE_NAMES = (
    "answer:bias",
    "answer:unused_clause_frac",
    "answer:turn_frac",
    "answer:n_candidates",
    "search:bias",
    "search:used_before",
    "search:is_full_request",
    "search:novelty",
    "search:turn_frac",
    "category:is_all",
    "category:cos_clause_centroid",
    "include:bias",
    "include:cos_request",
    "include:cos_best_clause",
    "include:inv_rank",
    "include:hit_frac",
    "include:same_tool_as_best",
)
#: Cosine similarities enter the features multiplied by this factor (so that unit weights are decisive).
COS_SCALE = 10.0
#: The untrained policy and the KL reference: a hand-set prior standing in for an instruct model's habits
#: (search the request's unused sentences before answering, avoid repeats, prefer global search, include a
#: retrieved API when its cosine to the request exceeds 0.5). RL starts here.
PRIOR_THETA = np.array(
    [
        0.0,
        -3.0,
        0.0,
        0.0,  # answer
        0.0,
        -2.0,
        0.0,
        0.0,
        0.0,  # search
        6.0,
        1.0,  # category
        -1.5,
        0.3,
        0.0,
        0.0,
        0.0,
        0.0,  # include
    ]
)


@dataclass
class Position:
    """One token: option features [n_opts, DIM], which options are allowed, the chosen option, loss-mask bit."""

    F: np.ndarray
    valid: np.ndarray
    chosen: int
    assistant: bool


@dataclass
class Episode:
    rollout: Rollout
    positions: list[Position] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Task:
    """A request with its clause texts and their MiniLM embeddings (row 0 = the whole request)."""

    uid: str
    targets: tuple[str, ...]
    clauses: tuple[str, ...]
    clause_emb: np.ndarray


def _choose(logits: np.ndarray, valid: np.ndarray, rng: np.random.Generator | None) -> tuple[int, float]:
    z = np.where(valid, logits, -np.inf)
    z = z - z.max()
    p = np.exp(z)
    p /= p.sum()
    k = int(np.argmax(p)) if rng is None else int(rng.choice(len(p), p=p))
    return k, float(np.log(p[k]))


class LogLinearPolicy:
    """pi(option | state) proportional to exp(theta . phi(state, option)); ``rng=None`` decodes greedily."""

    def __init__(
        self,
        env: SearchEnv,
        doc_emb: np.ndarray,
        centroids: np.ndarray,
        theta: np.ndarray | None = None,
        *,
        category_options: int = 5,
    ):
        self.env, self.doc_emb, self.centroids = env, doc_emb, centroids
        self.category_options = category_options
        self.cats = list(env.categories)
        self.theta = PRIOR_THETA.copy() if theta is None else np.asarray(theta, dtype=np.float64).copy()
        if self.theta.shape != (DIM,):
            raise ValueError(f"theta must have shape ({DIM},)")

    def _token(self, ep: Episode, F, valid, assistant: bool, rng) -> int:
        k, lp = _choose(F @ self.theta, valid, rng)
        ep.positions.append(Position(F, valid, k, assistant))
        ep.logp.append(lp)
        return k

    def _include_features(self, task: Task, cand: dict, issued: list[int]) -> tuple[list[int], np.ndarray]:
        idx = list(cand)
        E = self.doc_emb[idx]
        cos_req = E @ task.clause_emb[0]
        cos_cl = (E @ task.clause_emb[issued].T).max(1) if issued else cos_req
        best_tool = self.env.retriever.names[idx[int(np.argmax(cos_req))]].rsplit(".", 1)[0]
        F = np.zeros((len(idx), DIM))
        for r, i in enumerate(idx):
            F[r, INCLUDE] = [
                1.0,
                COS_SCALE * cos_req[r],
                COS_SCALE * cos_cl[r],
                1.0 / (1 + cand[i][0]),
                cand[i][1] / max(len(issued), 1),
                float(self.env.retriever.names[i].rsplit(".", 1)[0] == best_tool),
            ]
        return idx, F

    def run(self, task: Task, rng: np.random.Generator | None, *, constrain: str = "off") -> Episode:
        """One episode. A search's category token chooses between "all" and the ``category_options`` categories
        whose centroids are closest to the searched clause. ``constrain`` (CCTD, whose form the paper leaves open):
        ``off``; ``model_category`` (every search must name one category: the "all" option is disallowed);
        ``gold_category`` (the search is forced to the category of the first target not yet found; no category
        token)."""
        env, ep = self.env, Episode(Rollout())
        n_cl = len(task.clauses)
        issued: list[int] = []
        cand: dict[int, list] = {}  # doc index -> [best rank, times retrieved]
        found: set[str] = set()
        for turn in range(env.max_turns):
            F = np.zeros((1 + n_cl, DIM))
            F[0, ANSWER] = [1.0, 1 - len(set(issued)) / n_cl, turn / env.max_turns, min(len(cand), 20) / 20]
            for c in range(n_cl):
                prev = task.clause_emb[issued] @ task.clause_emb[c] if issued else np.zeros(1)
                F[1 + c, SEARCH] = [
                    1.0,
                    float(c in issued),
                    float(c == 0),
                    1 - max(0.0, prev.max()),
                    turn / env.max_turns,
                ]
            k = self._token(ep, F, np.ones(1 + n_cl, bool), True, rng)
            if k == 0:
                idx, Fi = self._include_features(task, cand, issued) if cand else ([], np.zeros((0, DIM)))
                chosen = []
                for r, i in enumerate(idx):
                    G = np.zeros((2, DIM))
                    G[1] = Fi[r]
                    if self._token(ep, G, np.ones(2, bool), True, rng) == 1:
                        chosen.append(env.retriever.names[i])
                ep.rollout.answer = answer_text(chosen)
                ep.rollout.messages.append({"role": "assistant", "content": ep.rollout.answer})
                return ep
            c = k - 1
            category = None
            if constrain == "gold_category":
                missing = [t for t in task.targets if t not in found]
                category = (missing or task.targets)[0].split(".", 1)[0]
            else:
                # options: "all" and the category_options categories closest to the clause (centroid cosine)
                sims = self.centroids @ task.clause_emb[c]
                top = np.argsort(-sims, kind="stable")[: self.category_options]
                Fc = np.zeros((1 + len(top), DIM))
                Fc[0, CATEGORY] = [1.0, 0.0]
                Fc[1:, CATEGORY.stop - 1] = COS_SCALE * sims[top]
                valid = np.ones(1 + len(top), bool)
                valid[0] = constrain != "model_category"
                j = self._token(ep, Fc, valid, True, rng)
                category = None if j == 0 else self.cats[top[j - 1]]
            text = search_call(task.clauses[c], category)
            ep.rollout.messages.append({"role": "assistant", "content": text})
            idx, response = env.respond(parse_turn(text, self.cats))
            ep.rollout.messages.append({"role": "tool", "content": response})
            issued.append(c)
            for rank, i in enumerate(idx):
                cand.setdefault(i, [rank, 0])
                cand[i][0] = min(cand[i][0], rank)
                cand[i][1] += 1
            names = [env.retriever.names[i] for i in idx]
            found |= set(names)
            ep.rollout.results.append(names)
            if idx:  # the tool response: masked positions scored like retrieved text
                _, Fd = self._include_features(task, {i: cand[i] for i in idx}, issued)
                for r in range(len(idx)):
                    ep.positions.append(Position(Fd, np.ones(len(idx), bool), r, False))
                    ep.logp.append(float(Fd[r] @ self.theta - np.logaddexp.reduce(Fd @ self.theta)))
        return ep


@dataclass
class Layout:
    """Padded batch: features [R, T, O, DIM], valid [R, T, O], chosen [R, T], loss mask [R, T], old log-probs."""

    F: torch.Tensor
    valid: torch.Tensor
    chosen: torch.Tensor
    mask: torch.Tensor
    logp_old: torch.Tensor


def layout(episodes: list[Episode]) -> Layout:
    R = len(episodes)
    T = max(len(e.positions) for e in episodes)
    O = max(p.F.shape[0] for e in episodes for p in e.positions)
    F = np.zeros((R, T, O, DIM))
    valid = np.zeros((R, T, O), bool)
    valid[:, :, 0] = True
    chosen = np.zeros((R, T), np.int64)
    mask = np.zeros((R, T), np.int64)
    old = np.zeros((R, T))
    for r, e in enumerate(episodes):
        for t, p in enumerate(e.positions):
            n = p.F.shape[0]
            F[r, t, :n], valid[r, t, :n], chosen[r, t] = p.F, p.valid, p.chosen
            mask[r, t] = int(p.assistant)
            old[r, t] = e.logp[t]
    return Layout(
        torch.from_numpy(F),
        torch.from_numpy(valid),
        torch.from_numpy(chosen),
        torch.from_numpy(mask),
        torch.from_numpy(old),
    )


def token_logits(lay: Layout, theta: torch.Tensor) -> torch.Tensor:
    """Option logits [R, T, O] (invalid options at -inf)."""
    z = torch.einsum("rtod,d->rto", lay.F, theta)
    return z.masked_fill(~lay.valid, float("-inf"))


def token_logp(logits: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """Log-probability [R, T] of the chosen option at every position (a language model's per-token log-prob)."""
    return torch.log_softmax(logits, dim=-1).gather(-1, chosen[..., None])[..., 0]
