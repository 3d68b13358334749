"""Generic pieces for training the project's small causal LMs on CPU: the (weighted) next-token loss, random
windows of a token stream, one clipped AdamW step, and perplexity over non-overlapping windows. Chapter-specific
training scripts (e.g. :mod:`agentpost.models.train_tool_lm`) compose them."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F


def lm_loss(model, ids: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Next-token cross-entropy of ``ids`` ``(B, T)``; with ``weights`` ``(B, T)`` the weighted mean over target
    positions (weight of token t applies to predicting token t), e.g. completion-only SFT."""
    logits = model(input_ids=ids).logits[:, :-1]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    if weights is None:
        return nll.mean()
    w = weights[:, 1:].reshape(-1)
    return (nll * w).sum() / w.sum()


def random_windows(ids: np.ndarray, rng: np.random.Generator, batch: int, length: int) -> torch.Tensor:
    """``batch`` windows of ``length`` tokens at uniform random starts of the stream ``ids``."""
    starts = rng.integers(0, len(ids) - length, size=batch)
    return torch.tensor(np.stack([ids[s : s + length] for s in starts]), dtype=torch.long)


def optimizer_step(model, opt, loss: torch.Tensor, clip: float) -> None:
    """Backward, clip the global gradient norm to ``clip``, step."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()


@torch.no_grad()
def perplexity(model, ids: np.ndarray, length: int, n_words: int) -> dict:
    """Perplexity over non-overlapping windows: per token and per word (same total NLL over ``n_words``)."""
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for s in range(0, len(ids) - 1, length):
        chunk = torch.tensor(ids[s : s + length + 1], dtype=torch.long, device=device)[None]
        if chunk.shape[1] < 2:
            break
        logits = model(input_ids=chunk[:, :-1]).logits
        total += F.cross_entropy(logits[0], chunk[0, 1:], reduction="sum").item()
        count += chunk.shape[1] - 1
    return {
        "token_ppl": math.exp(total / count),
        "word_ppl": math.exp(total / n_words),
        "tokens": count,
        "words": n_words,
    }


def save_checkpoint(model, tokenizer, out_dir) -> dict:
    """Write a Hugging Face causal LM (weights, config, generation config) and its tokenizer to ``out_dir``;
    returns the receipt's ``checkpoint`` entry (file name, bytes, sha256 of the weights)."""
    from pathlib import Path

    from agentpost.record.hashing import sha256_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    model.generation_config.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    weights = out_dir / "model.safetensors"
    return {"file": weights.name, "bytes": weights.stat().st_size, "sha256": sha256_file(weights)}
