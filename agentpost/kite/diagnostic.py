"""The KITE diagnostic on WikiText-2 at one seed: SST vs dense at matched training FLOPs and at matched KV size.

One run is one seed (one replication): per arm, the peak learning rate is chosen on validation articles only
(``select_on_validation``, at this seed); the arm trained at that rate is scored on the test articles (mean NLL
per article = one item, the same articles in every seed). The across-seed comparisons are declared in
``agentpost/catalogue/kite.yaml`` and computed by ``agentpost compare kite``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agentpost.record.outcomes import arm_facts, fingerprint
from agentpost.kite.train import ARMS, TrainSpec, article_chunks, article_ids, per_article_nll, token_stream, train_arm
from agentpost.stats import Split, select_on_validation


@dataclass
class DiagnosticResult:
    seed: int
    selected_lr: dict[str, float]
    validation_nll: dict[str, dict[float, float]]
    test_nll: dict[str, np.ndarray]  # arm -> per-article mean NLL, in the order of ``items``
    items: list[int]  # test article indices (stable across seeds)
    data_version: str  # fingerprint of the training stream and the validation and test windows read
    runs: list[dict] = field(default_factory=list)  # one info dict per training (every grid point)

    def run_of(self, arm: str) -> dict:
        """The training info of ``arm`` at its selected learning rate."""
        return next(r for r in self.runs if r["arm"] == arm and r["lr"] == self.selected_lr[arm])

    def facts(self) -> dict[str, dict]:
        """Each arm's measured facts (:func:`~agentpost.record.outcomes.arm_facts`) at its selected rate:
        the fingerprint of its initial weights, the data fingerprint, the optimizer steps made, the selected rate
        and the training FLOPs spent."""
        out = {}
        for arm in self.test_nll:
            run = self.run_of(arm)
            out[arm] = arm_facts(
                checkpoint=run["init"],
                data_version=self.data_version,
                updates=run["updates"],
                max_new_tokens=None,
                selected_lr=run["lr"],
                train_flops=run["train_flops"],
            )
        return out

    def summary_table(self):
        """Mean test NLL over the test articles per arm at this seed, with the selected rate."""
        import pandas as pd

        return pd.DataFrame(
            [
                {"arm": a, "selected_lr": self.selected_lr[a], "test_nll_nats": float(v.mean())}
                for a, v in self.test_nll.items()
            ]
        )


def run_diagnostic(
    *,
    seed: int,
    lr_grid: list[float],
    spec: TrainSpec,
    model_kwargs: dict,
    train_chars: int | None,
    eval_chunks: int,
    arms: tuple[str, ...] = ARMS,
) -> DiagnosticResult:
    """Train every arm once per rate of ``lr_grid`` at ``seed``, pick each arm's rate on validation NLL, score the
    selected model on the test articles."""
    if not lr_grid:
        raise ValueError("run_diagnostic needs at least one learning rate in lr_grid")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(f"run_diagnostic: unknown arms {unknown}; use some of {ARMS}")
    stream = token_stream("train", train_chars)
    validation = Split("validation", article_chunks("validation", spec.seq_len, eval_chunks))
    test = article_chunks("test", spec.seq_len, eval_chunks)
    models, runs = {}, []

    def trained(arm: str, lr: float):
        if (arm, lr) not in models:
            model, info = train_arm(arm, stream, spec, lr, seed, **model_kwargs)
            models[(arm, lr)] = model
            runs.append(info)
        return models[(arm, lr)]

    selected, val_scores, test_nll = {}, {}, {}
    for arm in arms:
        best, scores = select_on_validation(
            lr_grid,
            lambda lr, split: float(per_article_nll(trained(arm, lr), *split.data).mean()),
            validation,
            higher_is_better=False,
        )
        selected[arm], val_scores[arm] = best, scores
        test_nll[arm] = per_article_nll(trained(arm, best), *test)
        for key in [k for k in models if k[0] == arm]:
            del models[key]
    return DiagnosticResult(
        seed, selected, val_scores, test_nll, article_ids(test[1]), fingerprint(stream, *validation.data, *test), runs
    )
