"""ToolSearcher's event-level credit (toolsearcher.md, eqs. 1-5): first-discovery events (ESM), group-normalised
per-tool credit, event advantages, the selection reward/advantage and the "search fully first, then select" gate
(TCA). Pure functions of parsed rollouts; the token mapping lives in :mod:`agentpost.toolsearcher.loss`.

Reference (semantics only): github.com/zhenlongDai/ToolSearcher ``adv_compute.py::compute_groupwise_apiswise_adv_score``
and ``get_advantage_reward_tensor`` (@1fea78e), ``verl/utils/reward_score/tool_plan_score.py`` (@585eb6a).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from agentpost.rl import group_advantage, group_stats

EPS = 1e-6
GATES = ("after_norm", "before_norm", "none")
NONDISCOVERY = ("zero", "min")
REWARD_MODES = ("gt_selection", "conditional_selection")
FORMAT_BONUS = 0.1
_BLOCK = re.compile(r"<tool_list>(.*?)</tool_list>", re.DOTALL)


def first_discovery(results: Sequence[Sequence[str]], targets: Sequence[str]) -> np.ndarray:
    """Eq. 1: D[k, j] = 1 iff target j is in search k's results and in none of the earlier searches' results.

    ``results[k]`` is the list of API names returned by search event k; returns a {0,1} array [K, m].
    """
    targets = list(targets)
    if len(set(targets)) != len(targets):
        raise ValueError("targets must be distinct")
    found: set[str] = set()
    D = np.zeros((len(results), len(targets)), dtype=np.int64)
    for k, res in enumerate(results):
        hits = set(res) & set(targets)
        for j, g in enumerate(targets):
            if g in hits and g not in found:
                D[k, j] = 1
        found |= hits
    return D


def discovered(D: np.ndarray, m: int) -> np.ndarray:
    """s[j] = max_k D[k, j] (a rollout without searches discovered nothing)."""
    return D.max(axis=0) if D.shape[0] else np.zeros(m, dtype=np.int64)


def normalized_tool_credit(s: np.ndarray, eps: float = EPS) -> np.ndarray:
    """Eq. 2: s_hat[i, j] = (s[i, j] - mean_i) / (unbiased std_i + eps), column-wise over the group's N rollouts.

    A tool every rollout found has std 0 and gets exactly 0. Needs N >= 2.
    """
    s = torch.as_tensor(np.asarray(s), dtype=torch.float64)
    if s.ndim != 2 or s.shape[0] < 2:
        raise ValueError(f"s must be [N >= 2 rollouts, m tools], got shape {tuple(s.shape)}")
    mean, std = group_stats(s, std_ddof=1)
    return ((s - mean) / (std + eps)).numpy()


def event_advantages(D: np.ndarray, s_hat_row: np.ndarray, nondiscovery: str = "zero") -> np.ndarray:
    """Eq. 3: A_search[k] = max_j D[k, j] * s_hat[j] (max over the whole row, zeros included).

    ``nondiscovery="min"``: an event that discovers nothing gets min_j s_hat[j] instead of 0 (the
    ``Negtive_Min`` run of the official scripts; the paper itself leaves it open).
    """
    if nondiscovery not in NONDISCOVERY:
        raise ValueError(f"nondiscovery must be one of {NONDISCOVERY}, got {nondiscovery!r}")
    if D.shape[0] == 0:
        return np.zeros(0)
    adv = (D * s_hat_row[None, :]).max(axis=1)
    if nondiscovery == "min":
        adv = np.where(D.sum(axis=1) == 0, s_hat_row.min(), adv)
    return adv.astype(np.float64)


def _split_names(block: str) -> list[str]:
    """Names in a block, separated by newlines or commas (the spec's ``<tool_list>c.t.a1, c.t.a2</tool_list>``).

    API names may themselves contain commas ("Finance.spacHero.Latest SPAC Deals, IPOs, Closings"): a comma piece
    that is not a ``category.tool.api`` name (fewer than two dots) continues the name before it."""
    names: list[str] = []
    for line in block.split("\n"):
        current: list[str] = []
        for piece in line.split(","):
            if current and piece.strip().count(".") < 2:
                current.append(piece)
                continue
            if current:
                names.append(",".join(current).strip())
            current = [piece]
        if current:
            names.append(",".join(current).strip())
    return [n for n in names if n]


def parse_tool_list(text: str) -> tuple[frozenset[str], bool]:
    """Strict parse of the final answer: (predicted names, whether the answer has exactly one well-formed
    ``<tool_list>...</tool_list>`` block).

    Well-formed means one opening and one closing tag, in that order; otherwise the prediction is empty. Names are
    separated by newlines or commas (:func:`_split_names`); an empty block is well-formed and predicts nothing.
    """
    blocks = _BLOCK.findall(text)
    if len(blocks) != 1 or text.count("<tool_list>") != 1 or text.count("</tool_list>") != 1:
        return frozenset(), False
    return frozenset(_split_names(blocks[0])), True


def set_f1(predicted: set | frozenset, targets: set | frozenset) -> float:
    """Set F1; 0 when either set is empty or they do not intersect."""
    hit = len(set(predicted) & set(targets))
    if hit == 0:
        return 0.0
    p, r = hit / len(predicted), hit / len(targets)
    return 2 * p * r / (p + r)


def selection_reward(
    answer: str | None, targets: Sequence[str], found: set[str] | None = None, mode: str = "gt_selection"
) -> float:
    """Eq. 4: r = F1(P, G) + 0.1 * [exactly one well-formed <tool_list> block]; ``conditional_selection`` scores
    against G intersected with the found set S. No answer (None) scores 0."""
    if mode not in REWARD_MODES:
        raise ValueError(f"reward mode must be one of {REWARD_MODES}, got {mode!r}")
    if answer is None:
        return 0.0
    pred, well_formed = parse_tool_list(answer)
    gold = set(targets) if mode == "gt_selection" else set(targets) & set(found or ())
    return set_f1(pred, gold) + (FORMAT_BONUS if well_formed else 0.0)


@dataclass(frozen=True)
class GroupCredit:
    """Per-rollout credit of one prompt group."""

    D: list[np.ndarray]  # [K_i, m] each
    s: np.ndarray  # [N, m]
    s_hat: np.ndarray  # [N, m]
    search_adv: list[np.ndarray]  # [K_i] each
    rewards: np.ndarray  # [N]
    selection_adv: np.ndarray  # [N], before the gate
    gated_selection_adv: np.ndarray  # [N]
    all_found: np.ndarray  # [N] bool, G subset of S_i

    def factors(self, has_answer: Sequence[bool]) -> list[list[float]]:
        """Step 5: per rollout, [A_search[1..K_i]] followed by the gated A_sel when the rollout answered."""
        return [
            list(map(float, a)) + ([float(g)] if h else [])
            for a, g, h in zip(self.search_adv, self.gated_selection_adv, has_answer)
        ]


def group_credit(
    results: Sequence[Sequence[Sequence[str]]],
    answers: Sequence[str | None],
    targets: Sequence[str],
    *,
    gate: str = "after_norm",
    nondiscovery: str = "zero",
    reward_mode: str = "gt_selection",
    eps: float = EPS,
) -> GroupCredit:
    """Steps 2-4 of the pseudo-code for one prompt group of N rollouts.

    ``gate`` (the paper leaves open which rollouts get a selection credit): ``after_norm`` zeroes A_sel of rollouts
    whose searches missed a target (default); ``before_norm`` zeroes their reward before normalisation; ``none`` applies
    no gate (inspected official code).
    """
    if gate not in GATES:
        raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
    if len(results) != len(answers):
        raise ValueError(f"{len(results)} rollouts' search results but {len(answers)} answers")
    m = len(targets)
    D = [first_discovery(r, targets) for r in results]
    s = np.stack([discovered(d, m) for d in D])
    s_hat = normalized_tool_credit(s, eps)
    search_adv = [event_advantages(d, sh, nondiscovery) for d, sh in zip(D, s_hat)]
    found = [set().union(*map(set, r)) if len(r) else set() for r in results]
    rewards = np.array([selection_reward(a, targets, f, reward_mode) for a, f in zip(answers, found)])
    all_found = s.min(axis=1) == 1
    group = np.zeros(len(rewards), dtype=np.int64)
    sel = group_advantage(rewards, group, eps=eps).numpy()
    if gate == "after_norm":
        gated = np.where(all_found, sel, 0.0)
    elif gate == "before_norm":
        gated = group_advantage(np.where(all_found, rewards, 0.0), group, eps=eps).numpy()
    else:
        gated = sel
    return GroupCredit(D, s, s_hat, search_adv, rewards, sel, gated, all_found)
