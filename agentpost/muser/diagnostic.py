"""The chapter's ablation arms on MovieTweetings and their runs (one home for what the notebook executes).

Arms are cumulative (each adds one mechanism to the previous one), all with the same embedding size, encoder,
epochs, optimiser and negatives:

``recent_single`` recent window only, one interest, ID items -> ``multi`` M interests -> ``compression`` the
long history compressed -> ``semantic`` MiniLM text fused into items -> ``ortho`` orthogonality penalty ->
``full`` + ID-semantic alignment loss and the serving form (cacheable long / short split with a learned gate).
References: ``sasrec`` (SASRec-style, raw window, ID only), ``comirec`` (ComiRec-SA-style multi-interest extractor,
raw window, ID only, M interests, best-interest score) and ``popularity`` (training counts);
``uncompressed`` (= ``compression`` with strides 1/1/1) is available for the compressed-vs-raw question, and
``semantic_year`` (= ``semantic`` with the release year as the only item text) controls for recency.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from agentpost.muser.model import MuSeRConfig
from agentpost.muser.train import TrainConfig, evaluate, popularity_metrics, train_model

ARMS = (
    "recent_single",
    "multi",
    "compression",
    "semantic",
    "ortho",
    "full",
    "sasrec",
    "comirec",
    "popularity",
    "uncompressed",
    "semantic_year",
)
#: Item text each text-fused arm embeds (:func:`item_texts`). ``semantic_year`` is the ``semantic`` arm with the
#: release year as its only text: a recency control (does the text help beyond telling the model how new a movie is?).
TEXT_MODE = {"semantic": "full", "ortho": "full", "full": "full", "semantic_year": "year"}
TEXT_MODES = ("full", "year")
_YEAR = re.compile(r"\((\d{4})\)\s*$")


def arm_config(
    arm: str, base: MuSeRConfig, *, num_interests: int, ortho_lambda: float, align_weight: float
) -> MuSeRConfig | None:
    """The config of one arm from the shared ``base`` (``popularity`` has none)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")
    if arm == "popularity":
        return None
    if arm == "sasrec":
        return replace(
            base,
            kind="sasrec",
            num_interests=1,
            use_long=True,
            semantic=False,
            ortho_lambda=0.0,
            align_weight=0.0,
            split_serving=False,
        )
    if arm == "comirec":
        return replace(
            base,
            kind="comirec_sa",
            num_interests=num_interests,
            use_long=True,
            semantic=False,
            ortho_lambda=0.0,
            align_weight=0.0,
            split_serving=False,
        )
    if arm == "uncompressed":
        return replace(base, use_long=True, num_interests=num_interests, strides=(1, 1, 1))
    steps = ARMS.index("semantic" if arm == "semantic_year" else arm)
    return replace(
        base,
        use_long=steps >= 2,
        num_interests=1 if steps == 0 else num_interests,
        semantic=steps >= 3,
        ortho_lambda=ortho_lambda if steps >= 4 else 0.0,
        align_weight=align_weight if steps >= 5 else 0.0,
        split_serving=steps >= 5,
    )


def history_lengths(split) -> np.ndarray:
    """Length of every evaluated user's test history (all of the user's ratings before the test target), in the
    order of ``split.test`` (the order of the per-user outcomes of :func:`run_arms`)."""
    return np.array([len(h) for h in split.test.history], dtype=np.int64)


def history_length_table(splits: dict, thresholds: dict) -> pd.DataFrame:
    """How long the evaluated users' histories are, one row per split (``splits``: label -> leave-last-out split):
    the number of evaluated users, median, 90th percentile and max history length, and for every threshold
    (``thresholds``: column label -> length) the number and share of users whose history is longer than it."""
    rows = []
    for label, split in splits.items():
        lens = history_lengths(split)
        row = {
            "data": label,
            "evaluated users": len(lens),
            "median": float(np.median(lens)),
            "p90": float(np.percentile(lens, 90)),
            "max": int(lens.max()),
        }
        for name, length in thresholds.items():
            row[f"users > {name}"] = int((lens > length).sum())
            row[f"share > {name}"] = round(float((lens > length).mean()), 4)
        rows.append(row)
    return pd.DataFrame(rows)


def item_texts(movies, mode: str = "full") -> list[str]:
    """Each movie's text in item order: ``full`` = "Title (Year). Genres: ..." (:meth:`Movie.text`), ``year`` =
    "Released in YYYY." (no title, no genres; "Release year unknown." when the title has no year)."""
    if mode not in TEXT_MODES:
        raise ValueError(f"unknown item text mode {mode!r}; known: {', '.join(TEXT_MODES)}")
    if mode == "full":
        return [m.text() for m in movies]
    years = [_YEAR.search(m.title) for m in movies]
    return [f"Released in {y.group(1)}." if y else "Release year unknown." for y in years]


def semantic_matrix(data, mode: str = "full") -> np.ndarray:
    """MiniLM embeddings (N, 384) of every movie's text (:func:`item_texts`), item order."""
    from agentpost.models.minilm import embed_texts

    return embed_texts(item_texts(data.movies, mode))


def semantic_fingerprint(data, mode: str = "full") -> str:
    """Fingerprint of :func:`semantic_matrix`'s inputs (MiniLM's weights, token cap and every item text), the same on
    every machine where the embeddings themselves differ in their last bits."""
    from agentpost.models.minilm import embedding_key

    return embedding_key(item_texts(data.movies, mode))[:16]


def run_arms(
    arms,
    base: MuSeRConfig,
    tc: TrainConfig,
    split,
    seed: int,
    *,
    num_interests: int,
    ortho_lambda: float,
    align_weight: float,
    semantic: dict | None = None,
    ks=(10, 50),
    progress: bool = True,
    device="cpu",
) -> dict:
    """Train every arm once at ``seed`` and evaluate it: {arm: {"validation", "test": per-user metrics,
    "history", "wall_s", "updates", "checkpoint"}}. ``semantic`` maps a text mode (:data:`TEXT_MODE`) to its
    embedding matrix. ``popularity`` (training counts) makes no updates and starts from no weights. Learned arms
    train and are evaluated on ``device`` (:func:`agentpost.muser.train.train_model`); popularity stays on the CPU;
    the per-user metrics come back as numpy arrays either way."""
    out: dict = {}
    for arm in tqdm(arms, desc="arms", disable=not progress, mininterval=5.0):
        cfg = arm_config(arm, base, num_interests=num_interests, ortho_lambda=ortho_lambda, align_weight=align_weight)
        if cfg is None:
            res = {
                k: popularity_metrics(split.train, base.n_items, case.history, case.target, ks)
                for k, case in (("validation", split.validation), ("test", split.test))
            }
            out[arm] = {**res, "history": [], "wall_s": 0.0, "updates": 0, "checkpoint": "none (training counts)"}
            continue
        sem = None
        if cfg.semantic:
            sem = (semantic or {}).get(TEXT_MODE[arm])
            if sem is None:
                raise ValueError(f"arm {arm!r} needs the semantic matrix of text mode {TEXT_MODE[arm]!r}")
        trained = train_model(cfg, tc, split.train, seed, sem, progress=False, device=device)
        out[arm] = {
            "validation": evaluate(trained.model, split.validation.history, split.validation.target, ks=ks),
            "test": evaluate(trained.model, split.test.history, split.test.target, ks=ks),
            "history": trained.history,
            "wall_s": trained.wall_s,
            "updates": trained.updates,
            "checkpoint": trained.checkpoint,
        }
    return out
