"""Train the DeltaS chapter's hybrid LM (:mod:`agentpost.deltas.hybrid`) on WikiText-2 with the shared BPE tokenizer.

Random windows of ``seq_len`` tokens of WikiText-2 train (next-token loss on every token; the gated-DeltaNet layers
run the project's chunked gated delta rule), AdamW with linear warmup and cosine decay
(:mod:`agentpost.models.schedules`, :mod:`agentpost.models.trainer`). Evaluation: validation and test perplexity over
non-overlapping ``eval_len`` windows (per BPE token and per WikiText word) and, as the floor it must clear, the
add-one unigram model of the train tokens on the same validation tokens. Saves ``save_pretrained`` output
(``config.json`` + ``model.safetensors``) and ``receipt.json``.

Run::

    python -m agentpost.deltas.train_hybrid          # ~25 min on one contended CPU thread; writes agentpost/deltas/assets/wikitext2-hybrid/

(``assets/wikitext2-hybrid-copy``, the model that copies, was trained by the command in its receipt, with ``--out``.)

(The committed model was trained so before :func:`param_groups` existed, with weight decay on every parameter.)

The retrieval task (``repeat_prob`` > 0, :func:`repeat_spans`) repeats a span verbatim ``repeat_min_gap`` or more
tokens after its source; ``eval_every`` logs, and the receipt records, the model's NLL on repeats against their
sources (:func:`repeat_nll`). A model that copies predicts a repeat far better than its source. None trained on this
CPU does: fine-tuning the committed model for 320 + 300 updates (repeats in 75-100% of the windows) left repeat and
source NLL equal (4.358 vs 4.358 nats); from scratch with 2 attention heads of 64 and undecayed norm gains
(:func:`param_groups`), every window carrying a 64-192-token repeat, 700 updates of 4 x 512 tokens (1.4M tokens,
2026-12-05) gave 4.703 vs 4.712. Synthetic spans (``repeat_random_prob``) give a signal only copying can use. In
exploratory trials on 2 threads (2026-12-05; their scripts are not kept, so these figures are not receipts): on pure
repeated random sequences (16 x 2 x 64 tokens) a 4096-token model copies after ~300 updates when the tokens come from
512 ids and not in 1000 updates when they are uniform over all 4096; inside WikiText windows (half the repeats
synthetic, 8 x 512 tokens) 450 updates from scratch and 500 fine-tuning the committed model still left the real-text
repeat at its source's NLL (4.799 vs 4.782; 4.340 vs 4.323). Trials on 2026-12-06 (also exploratory, 2 threads,
fine-tuning the committed model at lr 3e-3 unless said) read the ~300-update copy above as positional: those blocks
always repeat exactly 64 tokens back, which a RoPE head can learn without matching content. After 400 such updates
the model copied them (loss 3.1 = log(512) / 2), and 400 more updates on WikiText windows with half the spans
synthetic lost it (synthetic repeat 6.45 vs source 6.43 nats). A content copy, spans of 32-96 pool tokens repeated
16 or more tokens later at a random place in 16 x 256 random pool tokens, did not appear in 350-600 updates with
any of: the committed layout; partial RoPE (``--partial-rotary-factor 0.25``, Qwen3-Next's, so 24 of 32 dims match
content at any distance); partial RoPE with smeared keys (``--key-shift``, Olsson et al. 2022's one-layer induction
architecture); a 128-id pool. Even a from-scratch one-attention-layer model with smeared keys, or two attention layers
without, stayed at log(32) on 32-id sequences of 64 tokens after 400 updates of 32 sequences at lr 1e-2. A likely
reading, not tested: the query-key and the value-output halves of a copy each get little gradient until the other
exists, and these budgets do not leave that plateau. The copy curriculum (``copy_steps``, :func:`copy_curriculum`)
tests that reading. Exploratory trials first (2 threads, 2026-12-06; a scratch script and a run whose folder was not
kept, so not receipts): on periodic sequences of pool tokens with a random period (every token one period in is a copy,
no fixed offset predicts it) a from-scratch model with partial RoPE and smeared keys sat at ``log 512 = 6.24`` nats
for ~400 updates of 64 x 64 tokens, then left the plateau (held-out copy NLL 5.67 at 600, 3.59 at 1200; 2 threads,
14 min; 2026-12-06); without smeared keys it had not left it at 600. 600 WikiText updates after it (every window a
repeat, half of them synthetic) erased the copy: synthetic repeat 6.52 vs its source 6.57 nats. ``copy_every``
interleaves periodic updates with the text ones, and with it the copy carries over to real text: the committed
``assets/wikitext2-hybrid-copy`` (its receipt has the command: 1000 curriculum updates, then 600 WikiText updates with
a periodic one after every second; 18 min on 2 threads) predicts a validation repeat at 4.24 nats against its source's
4.85, a synthetic one at 2.57 against 6.58 (validation perplexity 133, unigram 664). The GPU item ``train-deltas-hybrid`` in ``benchmarks/gpu_predictions.yaml`` trains a larger one by the same recipe
(20M text tokens), logging the curriculum's copy NLL and the real and synthetic repeat NLL.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from agentpost.deltas.hybrid import HybridConfig, HybridForCausalLM
from agentpost.record.environment import package_versions
from agentpost.models.schedules import warmup_cosine
from agentpost.models.trainer import lm_loss, optimizer_step, perplexity, random_windows

ASSET_DIR = Path(__file__).parent / "assets" / "wikitext2-hybrid"
SPLITS = ("train", "validation", "test")


@dataclass
class Hyper:
    seed: int = 0
    threads: int = 1
    steps: int = 600
    batch: int = 4
    seq_len: int = 512
    lr: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_len: int = 512
    eval_max_tokens: int = 65536  # per split: the first this-many tokens (CPU budget); 0 = whole split
    log_every: int = 25
    device: str = "cpu"
    #: share of training windows in which a random span is repeated verbatim further on (the retrieval task)
    repeat_prob: float = 0.0
    repeat_min_len: int = 16
    repeat_max_len: int = 64
    #: fewest tokens between the end of the source span and its repeat (beyond a recent window)
    repeat_min_gap: int = 64
    #: share of repeated spans whose source tokens are first replaced by tokens drawn uniformly from the
    #: ``repeat_random_vocab`` most frequent train tokens (synthetic spans inside real text: unpredictable except by
    #: copying)
    repeat_random_prob: float = 0.0
    repeat_random_vocab: int = 512
    #: a save_pretrained folder to start from (fine-tuning), relative to the repository root (the receipt records
    #: it); "" = from scratch
    init_from: str = ""
    #: log the validation repeat NLL (:func:`repeat_nll`) every this many updates (0 = only at the end)
    eval_every: int = 0
    #: updates on synthetic periodic sequences (:func:`periodic_sequences`, tokens from the ``repeat_random_vocab``
    #: most frequent train ids) before the WikiText updates: a copy curriculum (0 = none)
    copy_steps: int = 0
    copy_batch: int = 64
    copy_seq_len: int = 64
    copy_period_min: int = 8
    copy_period_max: int = 24
    #: during the WikiText updates, one more periodic-sequence update after every this many (0 = none): keeps the
    #: curriculum's copy from being overwritten while the model learns text
    copy_every: int = 0

    def __post_init__(self):
        for name in (
            "threads",
            "steps",
            "batch",
            "seq_len",
            "eval_len",
            "log_every",
            "repeat_min_len",
            "repeat_random_vocab",
            "copy_batch",
            "copy_period_min",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"Hyper.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("repeat_prob", "repeat_random_prob"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"Hyper.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.repeat_prob and (
            self.repeat_max_len < self.repeat_min_len or 2 * self.repeat_max_len + self.repeat_min_gap > self.seq_len
        ):
            raise ValueError(
                "Hyper.repeat_*: need repeat_min_len <= repeat_max_len and 2 * repeat_max_len + "
                f"repeat_min_gap <= seq_len, got {self.repeat_min_len}, {self.repeat_max_len}, "
                f"{self.repeat_min_gap}, {self.seq_len}"
            )
        if self.copy_steps and not self.copy_period_min <= self.copy_period_max <= self.copy_seq_len // 2:
            raise ValueError(
                "Hyper.copy_*: need copy_period_min <= copy_period_max <= copy_seq_len / 2 (two periods "
                f"or more), got {self.copy_period_min}, {self.copy_period_max}, {self.copy_seq_len}"
            )


def repeat_spans(
    windows: torch.Tensor,
    rng: np.random.Generator,
    prob: float,
    min_len: int,
    max_len: int,
    min_gap: int,
    random_prob: float = 0.0,
    random_pool: np.ndarray | None = None,
) -> tuple[torch.Tensor, list[tuple[int, int, int, int]]]:
    """With probability ``prob`` per window, a span of ``L ~ U[min_len, max_len]`` tokens at a random start ``s`` is
    written again at ``d >= s + L + min_gap`` (:func:`agentpost.deltas.stream.repeat_span`): predicting the repeat
    needs the source, ``min_gap`` or more tokens back. With probability ``random_prob`` per repeat the source span is
    first overwritten by tokens drawn uniformly from ``random_pool`` (a synthetic span). Returns the windows and
    ``(window, s, d, L)`` per repeat."""
    from agentpost.deltas.stream import repeat_span

    if random_prob and (random_pool is None or len(random_pool) == 0):
        raise ValueError("repeat_spans: random_prob > 0 needs a non-empty random_pool of token ids")
    out, spans = windows.clone(), []
    T = windows.shape[1]
    for i in range(windows.shape[0]):
        if rng.random() < prob:
            L = int(rng.integers(min_len, max_len + 1))
            s = int(rng.integers(0, T - 2 * L - min_gap + 1))
            d = int(rng.integers(s + L + min_gap, T - L + 1))
            if random_prob and rng.random() < random_prob:  # no draw when off: earlier seeds give the same windows
                out[i, s : s + L] = torch.as_tensor(rng.choice(random_pool, L))
            out[i] = repeat_span(out[i], s, d, L)
            spans.append((i, s, d, L))
    return out, spans


def periodic_sequences(
    rng: np.random.Generator, pool: np.ndarray, batch: int, length: int, period_min: int, period_max: int
) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """``batch`` sequences of ``length`` tokens drawn uniformly from ``pool``, each periodic after a random lead of 0-8
    tokens with its own period ``P ~ U[period_min, period_max]`` (repeated random tokens, the setting in which
    Olsson et al. 2022, *In-context Learning and Induction Heads*, measure copying). A token one period or more into
    the sequence is predictable only by finding where its predecessor occurred: the period varies, so a fixed
    relative offset (a RoPE shortcut) does not predict it. Returns the sequences and ``(lead, P)`` per sequence."""
    x = torch.as_tensor(rng.choice(pool, (batch, length)))
    shapes = []
    for i in range(batch):
        period, lead = int(rng.integers(period_min, period_max + 1)), int(rng.integers(0, 9))
        for j in range(lead + period, length):
            x[i, j] = x[i, j - period]
        shapes.append((lead, period))
    return x, shapes


@torch.no_grad()
def periodic_copy_nll(model: HybridForCausalLM, x: torch.Tensor, shapes: list[tuple[int, int]]) -> float:
    """Mean next-token NLL (nats) of the tokens of :func:`periodic_sequences` that repeat their predecessor's context
    (targets one period and a token or more in): ``log len(pool)`` without a copy, toward 0 with one."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    nll = torch.nn.functional.cross_entropy(
        model(input_ids=x.to(device)).logits[:, :-1].float().cpu().transpose(1, 2), x[:, 1:], reduction="none"
    )
    model.train(was_training)
    # target j + 1 is predicted at j; it repeats a known continuation once j >= lead + period
    return float(torch.cat([nll[i, lead + period :] for i, (lead, period) in enumerate(shapes)]).mean())


def wikitext_ids(split: str) -> np.ndarray:
    """A WikiText-2 split as one array of shared-tokenizer ids."""
    from agentpost.data.wikitext2 import read_split
    from agentpost.models.tokenizer import load_tokenizer

    return np.array(load_tokenizer()(read_split(split), add_special_tokens=False).input_ids, dtype=np.int64)


def unigram_ppl(train: np.ndarray, ids: np.ndarray, vocab_size: int) -> float:
    """Per-token perplexity of ``ids`` under the add-one unigram model of ``train`` (the floor to clear)."""
    counts = np.bincount(train, minlength=vocab_size) + 1.0
    logp = np.log(counts / counts.sum())
    return float(math.exp(-logp[ids].mean()))


def frequent_tokens(ids: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most frequent token ids of ``ids`` (ties by id), most frequent first."""
    counts = np.bincount(ids)
    return np.argsort(-counts, kind="stable")[:k]


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices and embeddings only; gains of the RMSNorms (the q/k norms' among them),
    ``A_log`` and ``dt_bias`` undecayed (as nanoGPT's ``configure_optimizers``). Decaying the q/k-norm gains holds
    every attention logit near its initial bound ``sqrt(head_dim)``, too flat to retrieve one token out of hundreds."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def train(
    hp: Hyper = Hyper(), config: HybridConfig | None = None, wiki: dict | None = None, log=print
) -> tuple[HybridForCausalLM, dict]:
    """Train one hybrid LM; returns (model in eval mode, receipt dict). ``wiki`` maps split -> token ids (tests pass
    a small stream); by default the three WikiText-2 splits are tokenised here."""
    torch.set_num_threads(hp.threads)
    torch.manual_seed(hp.seed)
    rng = np.random.default_rng(hp.seed)
    t0 = time.time()
    wiki = wiki if wiki is not None else {s: wikitext_ids(s) for s in SPLITS}
    if hp.init_from:
        from agentpost.deltas.hybrid import load_hybrid

        model = load_hybrid(hp.init_from).to(hp.device)
        config = model.config
    else:
        config = config or HybridConfig()
        model = HybridForCausalLM(config).to(hp.device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"hybrid LM: {n_params:,} parameters, layers {config.layer_types}")
    opt = torch.optim.AdamW(param_groups(model, hp.weight_decay), lr=hp.lr, betas=(0.9, 0.95))
    model.train()
    copy_pool = frequent_tokens(wiki["train"], hp.repeat_random_vocab)  # the synthetic tokens of both tasks
    random_pool = copy_pool if hp.repeat_random_prob else None
    copy_curve = copy_curriculum(model, opt, hp, copy_pool, rng, t0, log) if hp.copy_steps else []
    losses, repeat_curve = [], []
    for step in range(hp.steps):
        for g in opt.param_groups:
            g["lr"] = warmup_cosine(step, hp.steps, hp.lr, hp.warmup_steps)
        windows = random_windows(wiki["train"], rng, hp.batch, hp.seq_len)
        if hp.repeat_prob:
            windows, _ = repeat_spans(
                windows,
                rng,
                hp.repeat_prob,
                hp.repeat_min_len,
                hp.repeat_max_len,
                hp.repeat_min_gap,
                hp.repeat_random_prob,
                random_pool,
            )
        loss = lm_loss(model, windows.to(hp.device))
        optimizer_step(model, opt, loss, hp.grad_clip)
        losses.append(loss.item())
        if hp.copy_every and (step + 1) % hp.copy_every == 0:
            x, _ = periodic_sequences(
                rng, copy_pool, hp.copy_batch, hp.copy_seq_len, hp.copy_period_min, hp.copy_period_max
            )
            optimizer_step(model, opt, lm_loss(model, x.to(hp.device)), hp.grad_clip)
        if step % hp.log_every == 0 or step == hp.steps - 1:
            log(f"[{time.time() - t0:7.1f}s] step {step + 1}/{hp.steps} loss {loss.item():.3f}")
        if hp.repeat_prob and hp.eval_every and (step + 1) % hp.eval_every == 0:
            rep = repeat_nll(
                model, wiki["validation"], hp, np.random.default_rng(hp.seed + 1), synthetic_pool=random_pool
            )
            repeat_curve.append({"step": step + 1, **rep})
            synthetic = (
                f"; synthetic {rep['synthetic_repeat_nll']:.3f} (its source {rep['synthetic_source_nll']:.3f})"
                if random_pool is not None
                else ""
            )
            log(
                f"[{time.time() - t0:7.1f}s] step {step + 1} validation repeat NLL {rep['repeat_nll']:.3f} "
                f"(its source {rep['source_nll']:.3f}){synthetic}"
            )
            model.train()
    train_s = time.time() - t0
    model.eval()
    evaluation = {}
    for split in ("validation", "test"):
        ids = wiki[split][: hp.eval_max_tokens or None]
        ppl = perplexity(model, ids, hp.eval_len, n_words=max(1, len(ids)))
        evaluation[split] = {"token_ppl": ppl["token_ppl"], "tokens": ppl["tokens"]}
    if copy_curve:
        evaluation["periodic_copy_during_curriculum"] = copy_curve
    if repeat_curve:
        evaluation["validation_repeat_during_training"] = repeat_curve
    if hp.repeat_prob:
        evaluation["validation_repeat"] = repeat_nll(
            model, wiki["validation"], hp, np.random.default_rng(hp.seed + 1), synthetic_pool=random_pool
        )
    evaluation["unigram_validation_token_ppl"] = unigram_ppl(
        wiki["train"], wiki["validation"][: hp.eval_max_tokens or None], config.vocab_size
    )
    origin = f"fine-tuned from {hp.init_from}" if hp.init_from else "trained from scratch"
    task = f", a span repeated in {hp.repeat_prob:.0%} of the windows" if hp.repeat_prob else ""
    if hp.copy_steps:
        interleaved = f", one more after every {hp.copy_every} text updates" if hp.copy_every else ""
        task = (
            f" after {hp.copy_steps} updates on SYNTHETIC periodic sequences of frequent train tokens (a copy "
            f"curriculum{interleaved}){task}"
        )
    receipt = {
        "artifact": f"gated-DeltaNet + full-attention hybrid causal LM {origin} on WikiText-2 train{task} "
        "(shared wikitext2-bpe tokenizer)",
        "script": "agentpost/deltas/train_hybrid.py",
        "hyperparameters": asdict(hp),
        "architecture": config.to_diff_dict() | {"layer_types": config.layer_types},
        "params": n_params,
        "train_tokens_seen": hp.steps * hp.batch * hp.seq_len,
        "copy_curriculum_tokens_seen": (hp.copy_steps + (hp.steps // hp.copy_every if hp.copy_every else 0))
        * hp.copy_batch
        * hp.copy_seq_len,
        "train_wall_s": round(train_s, 1),
        "first_loss": round(float(np.mean(losses[:10])), 4),
        "final_loss": round(float(np.mean(losses[-10:])), 4),
        "evaluation": evaluation,
        "versions": package_versions(),
    }
    if hp.init_from and (Path(hp.init_from) / "receipt.json").is_file():  # the starting point's own provenance
        receipt["init_from_receipt"] = json.loads((Path(hp.init_from) / "receipt.json").read_text())
    return model, receipt


def copy_curriculum(
    model: HybridForCausalLM,
    opt: torch.optim.Optimizer,
    hp: Hyper,
    pool: np.ndarray,
    rng: np.random.Generator,
    t0: float,
    log=print,
) -> list[dict]:
    """``hp.copy_steps`` updates on :func:`periodic_sequences` (own warmup and cosine decay at ``hp.lr``), the
    held-out periodic-copy NLL (:func:`periodic_copy_nll`, 64 sequences) logged every ``log_every`` updates and
    returned as a curve. A copy forms here after a plateau at ``log len(pool)`` (the query-key and the value-output
    halves of the circuit each get little gradient until the other exists); on WikiText windows alone it did not
    form within this CPU's budgets (module docstring)."""
    held_out = periodic_sequences(
        np.random.default_rng(hp.seed + 2), pool, 64, hp.copy_seq_len, hp.copy_period_min, hp.copy_period_max
    )
    curve = []
    for step in range(hp.copy_steps):
        for g in opt.param_groups:
            g["lr"] = warmup_cosine(step, hp.copy_steps, hp.lr, hp.warmup_steps)
        x, _ = periodic_sequences(rng, pool, hp.copy_batch, hp.copy_seq_len, hp.copy_period_min, hp.copy_period_max)
        loss = lm_loss(model, x.to(hp.device))
        optimizer_step(model, opt, loss, hp.grad_clip)
        if (step + 1) % hp.log_every == 0 or step == hp.copy_steps - 1:
            curve.append(
                {
                    "step": step + 1,
                    "loss": round(loss.item(), 4),
                    "periodic_copy_nll": round(periodic_copy_nll(model, *held_out), 4),
                }
            )
            log(
                f"[{time.time() - t0:7.1f}s] copy curriculum {step + 1}/{hp.copy_steps} loss {loss.item():.3f} "
                f"held-out copy NLL {curve[-1]['periodic_copy_nll']:.3f} (no copy: {math.log(len(pool)):.3f})"
            )
    return curve


@torch.no_grad()
def repeat_nll(
    model: HybridForCausalLM,
    ids: np.ndarray,
    hp: Hyper,
    rng: np.random.Generator,
    n_windows: int = 16,
    synthetic_pool: np.ndarray | None = None,
) -> dict:
    """Mean next-token NLL (nats) of a span's tokens after its first, at the source and at its verbatim repeat
    (``repeat_max_len`` tokens, ``repeat_min_gap`` or more tokens later), over ``n_windows`` windows of ``ids``. A
    model that retrieves from distant context predicts the repeat far better than the source. With
    ``synthetic_pool`` (token ids) the same windows are read again with every span synthetic (drawn from the pool;
    the pool draws move the later windows' span places, so the two readings share windows, not spans) and ``synthetic_source_nll`` / ``synthetic_repeat_nll`` are added: without a copy a synthetic repeat stays near
    ``log len(synthetic_pool)``."""
    windows = random_windows(ids, rng, n_windows, hp.seq_len)
    span_seed = int(rng.integers(2**63))
    pools = {"": None} if synthetic_pool is None else {"": None, "synthetic_": synthetic_pool}
    out = {}
    for prefix, pool in pools.items():
        tokens, spans = repeat_spans(
            windows,
            np.random.default_rng(span_seed),
            1.0,
            hp.repeat_max_len,
            hp.repeat_max_len,
            hp.repeat_min_gap,
            float(pool is not None),
            pool,
        )
        logits = model(input_ids=tokens.to(hp.device)).logits[:, :-1].float().cpu()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
        # the target at position t + 1 is predicted at t: a span's tokens after its first are targets s+1 .. s+L-1
        out[f"{prefix}source_nll"] = float(torch.stack([nll[i, s : s + L - 1].mean() for i, s, _, L in spans]).mean())
        out[f"{prefix}repeat_nll"] = float(torch.stack([nll[i, d : d + L - 1].mean() for i, _, d, L in spans]).mean())
    return {"windows": len(spans), **out}


def save(model: HybridForCausalLM, receipt: dict, out_dir: Path = ASSET_DIR) -> dict:
    """``save_pretrained`` + receipt (with the data hashes and the weights' size and hash)."""
    from agentpost.data import data_file
    from agentpost.record.hashing import sha256_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    weights = out_dir / "model.safetensors"
    receipt = receipt | {
        "data": {
            f"wikitext-2/{f}": sha256_file(data_file("wikitext-2", f)) for f in ("train.txt", "valid.txt", "test.txt")
        },
        "tokenizer": "agentpost/models/assets/wikitext2-bpe",
        "weights_mb": round(weights.stat().st_size / 2**20, 2),
        "weights_sha256": sha256_file(weights),
    }
    (out_dir / "receipt.json").write_text(json.dumps(receipt, indent=2) + "\n")
    return receipt


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Hyper()
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--hidden-size", type=int, default=HybridConfig().hidden_size)
    parser.add_argument(
        "--layer-types",
        default=",".join(HybridConfig().layer_types),
        help="comma-separated linear_attention / full_attention",
    )
    parser.add_argument("--num-attention-heads", type=int, default=HybridConfig().num_attention_heads)
    parser.add_argument("--head-dim", type=int, default=HybridConfig().head_dim)
    parser.add_argument(
        "--partial-rotary-factor",
        type=float,
        default=HybridConfig().partial_rotary_factor,
        help="share of each attention head's dims RoPE rotates (Qwen3-Next: 0.25)",
    )
    parser.add_argument(
        "--key-shift",
        action="store_true",
        help="mix each attention key with its predecessor's (smeared keys, Olsson et al. 2022)",
    )
    parser.add_argument("--out", type=Path, default=ASSET_DIR)
    args = vars(parser.parse_args(argv))
    out, hidden, layers = args.pop("out"), args.pop("hidden_size"), args.pop("layer_types").split(",")
    heads, head_dim = args.pop("num_attention_heads"), args.pop("head_dim")
    attention = {"partial_rotary_factor": args.pop("partial_rotary_factor"), "key_shift": args.pop("key_shift")}
    model, receipt = train(
        Hyper(**args),
        HybridConfig(hidden_size=hidden, layer_types=layers, num_attention_heads=heads, head_dim=head_dim, **attention),
    )
    argv = list(argv or [])
    if "--out" in argv:  # where it was written is this machine's business, not the artifact's
        del argv[argv.index("--out") : argv.index("--out") + 2]
    receipt["command"] = " ".join(["python -m agentpost.deltas.train_hybrid", *argv])
    print(json.dumps(save(model, receipt, out), indent=2))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
