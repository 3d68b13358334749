"""The KITE diagnostic on WikiText-2: SST vs dense at matched training FLOPs and at matched KV size.

Per arm, the learning rate is chosen on validation articles only (``select_on_validation`` at the first seed);
then every seed is trained at that rate and scored on test articles (mean NLL per article = the paired item).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agentpost.kite.train import ARMS, TrainSpec, article_chunks, per_article_nll, token_stream, train_arm
from agentpost.stats import ArmMeta, PairedResult, Split, compare, select_on_validation


@dataclass
class DiagnosticResult:
    selected_lr: dict[str, float]
    validation_nll: dict[str, dict[float, float]]
    test_nll: dict[str, dict[int, np.ndarray]]
    runs: list[dict] = field(default_factory=list)

    def seed_table(self):
        """One row per (arm, seed): mean test NLL over articles."""
        import pandas as pd

        return pd.DataFrame([{"arm": a, "seed": s, "test_nll_nats": float(v.mean())}
                             for a, per in self.test_nll.items() for s, v in per.items()])

    def summary_table(self):
        """Mean and sample sd over seeds of the per-seed test NLL, per arm."""
        t = self.seed_table().groupby("arm", sort=False)["test_nll_nats"]
        return t.agg(mean="mean", sd="std", seeds="count").reset_index()


def run_diagnostic(*, seeds: list[int], lr_grid: list[float], spec: TrainSpec, model_kwargs: dict,
                   train_chars: int | None, eval_chunks: int, arms: tuple[str, ...] = ARMS) -> DiagnosticResult:
    """Train ``arms`` x ``seeds`` (LR picked per arm on validation at ``seeds[0]``); per-article test NLL."""
    if not seeds or not lr_grid:
        raise ValueError("run_diagnostic needs at least one seed and one learning rate")
    stream = token_stream("train", train_chars)
    validation = Split("validation", article_chunks("validation", spec.seq_len, eval_chunks))
    test = article_chunks("test", spec.seq_len, eval_chunks)
    models, runs = {}, []

    def trained(arm: str, lr: float, seed: int):
        if (arm, lr, seed) not in models:
            model, info = train_arm(arm, stream, spec, lr, seed, **model_kwargs)
            models[(arm, lr, seed)] = model
            runs.append(info)
        return models[(arm, lr, seed)]

    selected, val_scores, test_nll = {}, {}, {}
    for arm in arms:
        best, scores = select_on_validation(
            lr_grid, lambda lr, split: float(per_article_nll(trained(arm, lr, seeds[0]), *split.data).mean()),
            validation, higher_is_better=False)
        selected[arm], val_scores[arm] = best, scores
        test_nll[arm] = {seed: per_article_nll(trained(arm, best, seed), *test) for seed in seeds}
        for key in [k for k in models if k[0] == arm]:
            del models[key]
    return DiagnosticResult(selected, val_scores, test_nll, runs)


def arm_meta(result: DiagnosticResult, arm: str, *, data_version: str) -> ArmMeta:
    """The :class:`~agentpost.stats.ArmMeta` of one arm, from that arm's own training runs at its selected rate
    (every arm trains from scratch; ``updates`` is what its runs did, the same for all its seeds)."""
    updates = {r["updates"] for r in result.runs if r["arm"] == arm and r["lr"] == result.selected_lr[arm]}
    if len(updates) != 1:
        raise ValueError(f"arm {arm!r}: its runs at the selected rate report update counts {sorted(updates)}")
    return ArmMeta(checkpoint="from scratch", data_version=data_version, updates=updates.pop(), max_new_tokens=None)


def paired(result: DiagnosticResult, baseline: str, method: str = "sst", *, data_version: str,
           min_effect: float) -> PairedResult:
    """``method - baseline`` per-article test NLL through the paired protocol (lower is better). Every seed scores
    the same test articles, so the items are crossed with the seeds (``shared_items=True``)."""
    return compare(result.test_nll[baseline], result.test_nll[method],
                   meta_a=arm_meta(result, baseline, data_version=data_version),
                   meta_b=arm_meta(result, method, data_version=data_version),
                   higher_is_better=False, name_a=baseline, name_b=method, min_effect=min_effect, shared_items=True)
