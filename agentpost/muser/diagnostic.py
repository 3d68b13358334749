"""The chapter's ablation arms on MovieTweetings and their runs (one home for what the notebook executes).

Arms are cumulative (each adds one mechanism to the previous one), all with the same embedding size, encoder,
epochs, optimiser and negatives:

``recent_single`` recent window only, one interest, ID items -> ``multi`` M interests -> ``compression`` the
long history compressed -> ``semantic`` MiniLM text fused into items -> ``ortho`` orthogonality penalty ->
``full`` + ID-semantic alignment loss and the serving form (cacheable long / short split with a learned gate).
References: ``sasrec`` (SASRec-style, raw window, ID only) and ``popularity`` (training counts);
``uncompressed`` (= ``compression`` with strides 1/1/1) is available for the compressed-vs-raw question.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from tqdm.auto import tqdm

from agentpost.muser.model import MuSeRConfig
from agentpost.muser.train import TrainConfig, evaluate, popularity_metrics, train_model

ARMS = ("recent_single", "multi", "compression", "semantic", "ortho", "full", "sasrec", "popularity", "uncompressed")
NEEDS_SEMANTIC = ("semantic", "ortho", "full")


def arm_config(arm: str, base: MuSeRConfig, *, num_interests: int, ortho_lambda: float,
               align_weight: float) -> MuSeRConfig | None:
    """The config of one arm from the shared ``base`` (``popularity`` has none)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")
    if arm == "popularity":
        return None
    if arm == "sasrec":
        return replace(base, kind="sasrec", num_interests=1, use_long=True, semantic=False, ortho_lambda=0.0,
                       align_weight=0.0, split_serving=False)
    if arm == "uncompressed":
        return replace(base, use_long=True, num_interests=num_interests, strides=(1, 1, 1))
    steps = ARMS.index(arm)
    return replace(base, use_long=steps >= 2, num_interests=1 if steps == 0 else num_interests,
                   semantic=steps >= 3, ortho_lambda=ortho_lambda if steps >= 4 else 0.0,
                   align_weight=align_weight if steps >= 5 else 0.0, split_serving=steps >= 5)


def semantic_matrix(data) -> np.ndarray:
    """MiniLM embeddings (N, 384) of every movie's "Title (Year). Genres: ..." text, item order."""
    from agentpost.models.minilm import embed_texts

    return embed_texts(data.texts())


def run_arms(arms, base: MuSeRConfig, tc: TrainConfig, split, seeds, *, num_interests: int, ortho_lambda: float,
             align_weight: float, semantic=None, ks=(10, 50), progress: bool = True) -> dict:
    """Train and evaluate every arm on every seed: {arm: {seed: {"validation", "test": per-user metrics,
    "history", "wall_s"}}}; popularity is trained once and repeated per seed (it has no randomness)."""
    out: dict = {}
    bar = tqdm(total=len(arms) * len(seeds), desc="arms x seeds", disable=not progress, mininterval=5.0)
    for arm in arms:
        cfg = arm_config(arm, base, num_interests=num_interests, ortho_lambda=ortho_lambda, align_weight=align_weight)
        if cfg is not None and cfg.semantic and semantic is None:
            raise ValueError(f"arm {arm!r} needs the semantic matrix")
        out[arm] = {}
        for seed in seeds:
            if cfg is None:
                res = {k: popularity_metrics(split.train, base.n_items, case.history, case.target, ks)
                       for k, case in (("validation", split.validation), ("test", split.test))}
                out[arm][seed] = {**res, "history": [], "wall_s": 0.0}
                bar.update(1)
                continue
            model, hist, wall = train_model(cfg, tc, split.train, seed, semantic, progress=False)
            out[arm][seed] = {"validation": evaluate(model, split.validation.history, split.validation.target, ks=ks),
                              "test": evaluate(model, split.test.history, split.test.target, ks=ks),
                              "history": hist, "wall_s": wall, "model": model}
            bar.update(1)
    bar.close()
    return out
