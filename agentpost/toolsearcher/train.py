"""Training and evaluation of the compact policy with ToolSearcher credit or outcome-only GRPO (same budget).

Both arms share everything (environment, CCTD schedule, rollouts per prompt, prompts per step, updates, loss
code); they differ only in how credit reaches the tokens: ``toolsearcher`` uses the event factors of
:func:`agentpost.toolsearcher.credit.group_credit` on the assistant segments, ``grpo`` the group-normalised
outcome reward on every assistant token (rl-primitives.md, section 1).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from agentpost.data.stabletoolbench import load_apis, load_queries
from agentpost.record.outcomes import fingerprint
from agentpost.rl import broadcast_sequence_values, group_advantage
from agentpost.toolsearcher.credit import group_credit, parse_tool_list, selection_reward, set_f1
from agentpost.toolsearcher.env import SearchEnv, category_centroids, clauses
from agentpost.toolsearcher.loss import LossConfig, event_level_loss, token_advantages
from agentpost.toolsearcher.policy import PRIOR_THETA, LogLinearPolicy, Task, layout, token_logits, token_logp
from agentpost.models.minilm import embedding_key
from agentpost.registry import Registry
from agentpost.toolsearcher.retrieval import MiniLMRetriever, build_retriever, embed_texts

ARMS = ("toolsearcher", "grpo")


@dataclass(frozen=True)
class TrainConfig:
    arm: str = "toolsearcher"
    steps: int = 40
    prompts_per_step: int = 8
    rollouts_per_prompt: int = 5
    lr: float = 0.05
    ppo_epochs: int = 1
    gate: str = "after_norm"
    nondiscovery: str = "zero"
    reward_mode: str = "gt_selection"
    cctd_mode: str = "model_category"
    cctd_fraction: float = 0.3
    on_segment_mismatch: str = "drop"
    loss: LossConfig = LossConfig()

    def __post_init__(self):
        if self.arm not in ARMS:
            raise ValueError(f"arm must be one of {ARMS}, got {self.arm!r}")
        if self.cctd_mode not in ("model_category", "gold_category", "off"):
            raise ValueError(f"cctd_mode must be model_category, gold_category or off, got {self.cctd_mode!r}")
        if not 0.0 <= self.cctd_fraction <= 1.0:
            raise ValueError(f"cctd_fraction must be in [0, 1], got {self.cctd_fraction}")
        if self.rollouts_per_prompt < 2:
            raise ValueError("group normalisation needs rollouts_per_prompt >= 2")


class World:
    """The real environment: StableToolBench docs, the MiniLM retriever, the search tool and task embeddings."""

    def __init__(self, *, topk: int = 5, max_turns: int = 8, max_response_tokens: int = 768, category_options: int = 5):
        apis = load_apis()
        self.category_options = category_options
        self.retriever: MiniLMRetriever = build_retriever("minilm", apis)
        self.env = SearchEnv(
            self.retriever,
            [a.doc() for a in apis],
            topk=topk,
            max_turns=max_turns,
            max_response_tokens=max_response_tokens,
        )
        self.centroids = category_centroids(self.retriever.doc_emb, self.retriever.categories, self.env.categories)

        # every clause of every request, embedded in one cached batch (the same file for all splits and runs)
        self._clauses = {q.uid: clauses(q.text) for q in load_queries()}
        flat = [c for cs in self._clauses.values() for c in cs]
        emb = embed_texts(flat)
        self.retriever.remember(flat, emb)
        self._clause_emb, pos = {}, 0
        for uid, cs in self._clauses.items():
            self._clause_emb[uid] = emb[pos : pos + len(cs)].astype(np.float64)
            pos += len(cs)

    def tasks(self, queries) -> list[Task]:
        """Tasks (request clauses and their embeddings; row 0 is the whole request) for ``queries``."""
        return [Task(q.uid, q.targets, self._clauses[q.uid], self._clause_emb[q.uid]) for q in queries]

    def policy(self, theta=None) -> LogLinearPolicy:
        return LogLinearPolicy(
            self.env,
            self.retriever.doc_emb.astype(np.float64),
            self.centroids,
            theta,
            category_options=self.category_options,
        )


def episode_metrics(ep, targets) -> dict[str, float]:
    """Selection F1, exact match, search recall (SRecall) and number of searches of one episode."""
    pred = parse_tool_list(ep.rollout.answer)[0] if ep.rollout.has_answer else frozenset()
    found = set().union(*map(set, ep.rollout.results)) if ep.rollout.results else set()
    g = set(targets)
    return {
        "f1": set_f1(pred, g),
        "exact": float(pred == g),
        "srecall": len(found & g) / len(g),
        "searches": float(len(ep.rollout.results)),
        "answered": float(ep.rollout.has_answer),
    }


def evaluate(world: World, theta, tasks) -> dict[str, np.ndarray]:
    """Greedy decoding on every task (no constraint); per-task metric arrays."""
    pol = world.policy(theta)
    rows = [episode_metrics(pol.run(t, None), t.targets) for t in tasks]
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def _credit(cfg: TrainConfig, episodes, task, lay_mask):
    """Token advantages [N, T] and the (possibly reduced) loss mask for one prompt group."""
    results = [e.rollout.results for e in episodes]
    answers = [e.rollout.answer for e in episodes]
    if cfg.arm == "toolsearcher":
        gc = group_credit(
            results, answers, task.targets, gate=cfg.gate, nondiscovery=cfg.nondiscovery, reward_mode=cfg.reward_mode
        )
        adv, keep, dropped = token_advantages(
            lay_mask, gc.factors([e.rollout.has_answer for e in episodes]), cfg.on_segment_mismatch
        )
        return adv, keep, dropped, gc.rewards
    rewards = np.array([selection_reward(a, task.targets, mode="gt_selection") for a in answers])
    a = group_advantage(rewards, np.zeros(len(rewards), dtype=np.int64))
    return broadcast_sequence_values(lay_mask, a), lay_mask, 0, rewards


def train(world: World, train_tasks, cfg: TrainConfig, seed: int) -> dict:
    """REINFORCE-style clipped updates of the log-linear policy; returns theta, per-step history, wall time and
    ``updates`` (optimizer steps actually made).

    One update per step over all prompts x rollouts (mini-batch = batch); the reference policy is the initial
    policy (``PRIOR_THETA``); CCTD applies to the first ``cctd_fraction`` of the steps.
    """
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    theta = torch.tensor(PRIOR_THETA, dtype=torch.float64, requires_grad=True)
    theta_ref = torch.tensor(PRIOR_THETA, dtype=torch.float64)
    opt = torch.optim.Adam([theta], lr=cfg.lr)
    n_cctd = int(round(cfg.cctd_fraction * cfg.steps)) if cfg.cctd_mode != "off" else 0
    history, updates = [], 0
    start = time.perf_counter()
    for step in range(cfg.steps):
        constrain = cfg.cctd_mode if step < n_cctd else "off"
        pol = world.policy(theta.detach().numpy())
        batch = [train_tasks[i] for i in rng.choice(len(train_tasks), cfg.prompts_per_step, replace=False)]
        groups = [(t, [pol.run(t, rng, constrain=constrain) for _ in range(cfg.rollouts_per_prompt)]) for t in batch]
        episodes = [e for _, g in groups for e in g]
        lay = layout(episodes)
        advs, masks, dropped, rewards, n = [], [], 0, [], cfg.rollouts_per_prompt
        for gi, (task, g) in enumerate(groups):
            a, m, d, r = _credit(cfg, g, task, lay.mask[gi * n : (gi + 1) * n])
            advs.append(a), masks.append(m), rewards.extend(r)
            dropped += d
        adv, mask = torch.cat(advs), torch.cat(masks)
        with torch.no_grad():
            logp_ref = token_logp(token_logits(lay, theta_ref), lay.chosen)
        for _ in range(cfg.ppo_epochs):
            logp = token_logp(token_logits(lay, theta), lay.chosen)
            loss, parts = event_level_loss(logp, lay.logp_old, logp_ref, adv, mask, cfg.loss)
            opt.zero_grad()
            loss.backward()
            opt.step()
            updates += 1
        ms = [episode_metrics(e, t.targets) for t, g in groups for e in g]
        history.append(
            {
                "step": step,
                "cctd": constrain != "off",
                "reward": float(np.mean(rewards)),
                "srecall": float(np.mean([m["srecall"] for m in ms])),
                "searches": float(np.mean([m["searches"] for m in ms])),
                "f1": float(np.mean([m["f1"] for m in ms])),
                "dropped": dropped,
                "kl": float(parts["kl"]),
                "loss": float(loss.detach()),
            }
        )
    return {
        "theta": theta.detach().numpy().copy(),
        "history": history,
        "wall_s": time.perf_counter() - start,
        "config": asdict(cfg),
        "seed": seed,
        "updates": updates,
    }


#: The readings of the two choices the paper leaves open, which rollouts get a selection credit (selection_gate) and
#: what a search that found nothing earns (nondiscovery_credit), by name, as (arm, selection_gate,
#: nondiscovery_credit); the outcome-GRPO arm ignores both.
VARIANTS: Registry = Registry(
    "ToolSearcher reading",
    {
        "grpo": ("grpo", "none", "zero"),
        "toolsearcher": ("toolsearcher", "after_norm", "zero"),
        "toolsearcher_min_credit": ("toolsearcher", "after_norm", "min"),
        "toolsearcher_gate_before_norm": ("toolsearcher", "before_norm", "zero"),
        "toolsearcher_no_gate": ("toolsearcher", "none", "zero"),
    },
)


def data_version(*task_lists) -> str:
    """Fingerprint of the tasks read (ids, targets and clause texts of every split, in order, with the embedding
    model's key: what determines the clause embeddings, whose floats differ between CPU kernel paths)."""
    tasks = [t for ts in task_lists for t in ts]
    return fingerprint(
        [[t.uid, list(t.targets), list(t.clauses)] for t in tasks], embedding_key([c for t in tasks for c in t.clauses])
    )


def run_seed(world: World, train_tasks, val_tasks, test_tasks, base: TrainConfig, seed: int, variants=None) -> dict:
    """One replication: train every reading in ``variants`` (default: those of :data:`VARIANTS`, in its order) plus
    ``base``'s own once at ``seed``, score each greedily on validation and test, and choose the ToolSearcher reading
    with the best validation F1 (``select_on_validation``: validation only).

    Returns ``{"variants": [row per reading: arm, gate, nondiscovery, updates, wall_s, val (means), test (per-item
    arrays)], "default": index of base's reading, "grpo": index of the outcome arm, "selected": index of the chosen
    reading, "val_f1": {reading: validation F1}}``.
    """
    from dataclasses import replace

    from agentpost.stats import Split, select_on_validation

    if base.arm != "toolsearcher":
        raise ValueError(f"run_seed: base must be the toolsearcher arm's config, got arm {base.arm!r}")
    readings = list(VARIANTS.values() if variants is None else variants)
    own = ("toolsearcher", base.gate, base.nondiscovery)
    if own not in readings:
        readings.append(own)
    if not any(r[0] == "grpo" for r in readings):
        raise ValueError("run_seed: variants must include the outcome-GRPO arm ('grpo', ...)")
    rows = []
    for arm, gate, nondisc in readings:
        res = train(world, train_tasks, replace(base, arm=arm, gate=gate, nondiscovery=nondisc), seed)
        val = evaluate(world, res["theta"], val_tasks)
        rows.append(
            {
                "arm": arm,
                "gate": gate,
                "nondiscovery": nondisc,
                "updates": res["updates"],
                "wall_s": res["wall_s"],
                "history": res["history"],
                "val": {k: float(v.mean()) for k, v in val.items()},
                "test": evaluate(world, res["theta"], test_tasks),
            }
        )
    ts = {i: r for i, r in enumerate(rows) if r["arm"] == "toolsearcher"}
    chosen, val_f1 = select_on_validation(
        list(ts), lambda i, split: ts[i]["val"]["f1"], Split("validation", val_tasks), higher_is_better=True
    )
    return {
        "variants": rows,
        "default": readings.index(own),
        "selected": chosen,
        "grpo": next(i for i, r in enumerate(rows) if r["arm"] == "grpo"),
        "val_f1": {f"{rows[i]['gate']}/{rows[i]['nondiscovery']}": f for i, f in val_f1.items()},
    }
