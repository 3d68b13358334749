"""Train the project's tool LM (ActKV scores its KV cache, Code-Based Skills drives it): WikiText-2 pretraining,
then fine-tuning on tool traces, evaluation, receipt.

The traces are a **synthetic trace format over real StableToolBench API docs** (:mod:`agentpost.data.tool_traces`);
the model definition and the generic training pieces are :mod:`agentpost.models.lm` and
:mod:`agentpost.models.trainer`.
Phases (all on CPU, deterministic for a seed and thread count):

1. pretrain on random 512-token windows of WikiText-2 train (next-token loss on every token);
2. fine-tune on packed train-split traces, a curriculum from short to long copy distances, loss on the assistant turns
   (reasoning + action: completion-only SFT), each step also taking a WikiText-2 window to keep language;
3. evaluate WikiText-2 validation/test perplexity (non-overlapping 1024-token windows; per BPE token and per
   WikiText word) and, on held-out query groups, action-token NLL/accuracy, API-name-token accuracy and
   name exact match (every name token is the argmax under teacher forcing);
4. save ``model.safetensors`` + config + the shared tokenizer's files + ``receipt.json`` into the output folder.

Limitation of the committed run (``assets/tool-lm/receipt.json``, ~18 min on one contended CPU thread): the model
learns the trace format (action-token accuracy ~0.64 on held-out groups) but **not** the long-range copy of API
names (name-token accuracy ~0.17, name exact match 0). A synthetic copy warm-up (repeated random segments) was
tried and made every metric worse at this budget; it is not part of the script.

Run::

    python -m agentpost.models.train_tool_lm       # ~20 min on 2 CPU cores; writes agentpost/models/assets/tool-lm/
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from agentpost.data.tool_traces import SPLIT_GROUPS, TRACE_LABEL, build_traces, tokenize_trace
from agentpost.data import files_read
from agentpost.data.wikitext2 import read_split, words
from agentpost.record.hashing import sha256_file
from agentpost.models.lm import DEFAULT_DIR, TRAIN_COMMAND, tool_lm_config
from agentpost.models.receipt import weights_entry, write_model_receipt
from agentpost.models.schedules import warmup_cosine
from agentpost.models.tokenizer import ASSET_DIR as TOKENIZER_DIR
from agentpost.models.tokenizer import load_tokenizer
from agentpost.models.trainer import lm_loss, optimizer_step, perplexity, random_windows

#: Fine-tuning curriculum: equal-length stages of trace shapes (rounds, distractors, max_doc_chars), short copy
#: distances first; traces are packed into sequences of at least ``pack_len`` tokens.
FINETUNE_STAGES = (
    ((2, 1, 60), (3, 1, 60), (3, 2, 80)),
    ((4, 1, 100), (4, 2, 120), (5, 1, 150)),
    ((4, 2, 200), (6, 2, 150), (4, 2, 300)),
)
#: Held-out evaluation shapes: the build_traces defaults, and a short one (copy distance of a few hundred tokens).
EVAL_SHAPES = {
    "default": dict(rounds=4, distractors=2, max_doc_chars=300),
    "short": dict(rounds=3, distractors=1, max_doc_chars=100),
}


@dataclass
class Hyper:
    seed: int = 0
    threads: int = 1
    pretrain_steps: int = 300
    pretrain_batch: int = 2
    pretrain_len: int = 512
    pretrain_lr: float = 3e-3
    finetune_steps: int = 600
    finetune_lr: float = 2e-3
    finetune_max_len: int = 2400
    pack_len: int = 1024
    wiki_mix_len: int = 128
    wiki_mix_weight: float = 0.5
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_len: int = 1024
    eval_max_tokens: int = 32768  # per WikiText-2 split: the first this-many tokens (CPU budget)
    eval_traces: int = 24  # held-out traces per split, in split order
    log_every: int = 25


@torch.no_grad()
def trace_metrics(model, tokenized) -> dict:
    """Teacher-forced action-token NLL/accuracy, name-token accuracy and per-action name exact match."""
    model.eval()
    nll = correct = n = name_correct = name_n = exact = actions = 0
    for tt in tokenized:
        ids = torch.tensor(tt.input_ids, dtype=torch.long)[None]
        logits = model(input_ids=ids).logits[0, :-1]
        target = ids[0, 1:]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, target[:, None])[:, 0]
        hit = logits.argmax(-1) == target
        act = torch.tensor(tt.action_mask[1:])
        name = torch.tensor(tt.name_mask[1:])
        nll -= lp[act].sum().item()
        correct += hit[act].sum().item()
        n += act.sum().item()
        name_correct += hit[name].sum().item()
        name_n += name.sum().item()
        for start, end in tt.round_spans:
            sl = slice(start - 1, end - 1)
            actions += 1
            exact += bool(hit[sl][name[sl]].all())
    return {
        "traces": len(tokenized),
        "actions": actions,
        "action_tokens": n,
        "action_token_nll": nll / n,
        "action_token_accuracy": correct / n,
        "name_token_accuracy": name_correct / name_n,
        "name_exact_match": exact / actions,
    }


def train(out_dir: Path = DEFAULT_DIR, hp: Hyper = Hyper()) -> dict:
    torch.set_num_threads(hp.threads)
    torch.manual_seed(hp.seed)
    rng = np.random.default_rng(hp.seed)
    t0 = time.time()
    tok = load_tokenizer()

    def log(msg):
        print(f"[{time.time() - t0:7.1f}s] {msg}", flush=True)

    wiki = {
        s: np.array(tok(read_split(s), add_special_tokens=False).input_ids, dtype=np.int64)
        for s in ("train", "validation", "test")
    }
    log(f"WikiText-2 tokens: { {s: len(v) for s, v in wiki.items()} }")

    config = tool_lm_config()
    config._attn_implementation = "sdpa"
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params:,} parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=hp.pretrain_lr, weight_decay=hp.weight_decay, betas=(0.9, 0.95))

    # 1. pretraining
    model.train()
    t_pre = time.time()
    for step in range(hp.pretrain_steps):
        for g in opt.param_groups:
            g["lr"] = warmup_cosine(step, hp.pretrain_steps, hp.pretrain_lr, hp.warmup_steps)
        loss = lm_loss(model, random_windows(wiki["train"], rng, hp.pretrain_batch, hp.pretrain_len))
        optimizer_step(model, opt, loss, hp.grad_clip)
        if step % hp.log_every == 0 or step == hp.pretrain_steps - 1:
            log(f"pretrain {step + 1}/{hp.pretrain_steps} loss {loss.item():.3f}")
    pretrain_s = time.time() - t_pre

    # 2. fine-tuning on train-split traces
    def stream(stage: int):
        """Tokenized train traces of one curriculum stage, its shapes interleaved, in chunks of 64 per shape."""
        for chunk in range(10**9):
            items = []
            for j, (r, d, c) in enumerate(FINETUNE_STAGES[stage]):
                seed = hp.seed + 1000 * stage + 100 * chunk + j
                for tr in build_traces("train", n_traces=64, rounds=r, distractors=d, max_doc_chars=c, seed=seed):
                    tt = tokenize_trace(tr, tok)
                    if len(tt.input_ids) <= hp.finetune_max_len:
                        items.append((tt.input_ids, tt.generated_mask))  # completion-only: the assistant turns
            yield from (items[k] for k in rng.permutation(len(items)))

    opt = torch.optim.AdamW(model.parameters(), lr=hp.finetune_lr, weight_decay=hp.weight_decay, betas=(0.9, 0.95))
    model.train()
    t_ft = time.time()
    ft_tokens = n_traces = 0
    n_stages = len(FINETUNE_STAGES)
    streams = [stream(i) for i in range(n_stages)]
    for step in range(hp.finetune_steps):
        for g in opt.param_groups:
            g["lr"] = warmup_cosine(step, hp.finetune_steps, hp.finetune_lr, hp.warmup_steps)
        ids, mask = [], []
        while len(ids) < hp.pack_len:
            a, m = next(streams[min(n_stages - 1, step * n_stages // hp.finetune_steps)])
            ids, mask, n_traces = ids + a, mask + m, n_traces + 1
        x = torch.tensor(ids, dtype=torch.long)[None]
        trace_loss = lm_loss(model, x, torch.tensor(mask, dtype=torch.float32)[None])
        wiki_loss = lm_loss(model, random_windows(wiki["train"], rng, 1, hp.wiki_mix_len))
        optimizer_step(model, opt, trace_loss + hp.wiki_mix_weight * wiki_loss, hp.grad_clip)
        ft_tokens += len(ids) + hp.wiki_mix_len
        if step % hp.log_every == 0 or step == hp.finetune_steps - 1:
            log(
                f"finetune {step + 1}/{hp.finetune_steps} ({len(ids)} tokens) trace loss {trace_loss.item():.3f} wiki loss {wiki_loss.item():.3f}"
            )
    finetune_s = time.time() - t_ft

    # 3. save (before evaluation, so an interrupted evaluation keeps the weights)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER_DIR / name, out_dir / name)
    weights = out_dir / "model.safetensors"

    # 4. evaluation
    t_ev = time.time()
    model.eval()
    ppl = {}
    for s in ("validation", "test"):
        ids = wiki[s][: hp.eval_max_tokens + 1]
        n_words = len(words(tok.decode(ids[:-1].tolist())))
        ppl[s] = {**perplexity(model, ids, hp.eval_len, n_words), "of_split_tokens": len(wiki[s])}
    log(f"perplexity {ppl}")
    held_out = {}
    for name, shape in EVAL_SHAPES.items():
        held_out[name] = {"shape": shape}
        for split in ("validation", "test"):
            traces = build_traces(split, n_traces=hp.eval_traces, seed=hp.seed, **shape)
            held_out[name][split] = trace_metrics(model, [tokenize_trace(t, tok) for t in traces])
            log(f"{name} {split} traces {held_out[name][split]}")
    eval_s = time.time() - t_ev
    receipt = write_model_receipt(
        out_dir,
        artifact="tool-lm: Qwen3-architecture causal LM with GQA, WikiText-2 pretrained, tool-trace fine-tuned",
        script="agentpost/models/train_tool_lm.py",
        command=" ".join(
            [TRAIN_COMMAND] + [f"--{k.replace('_', '-')} {v}" for k, v in asdict(hp).items() if v != getattr(Hyper, k)]
        ),
        trace_format=TRACE_LABEL,
        data=files_read(),
        config=config,
        tokenizer_json_sha256=sha256_file(TOKENIZER_DIR / "tokenizer.json"),
        hyperparameters=asdict(hp),
        parameters=n_params,
        finetune_stages=[[dict(rounds=r, distractors=d, max_doc_chars=c) for r, d, c in st] for st in FINETUNE_STAGES],
        finetune_traces=n_traces,
        steps={"pretrain": hp.pretrain_steps, "finetune": hp.finetune_steps},
        tokens_seen={"pretrain": hp.pretrain_steps * hp.pretrain_batch * hp.pretrain_len, "finetune": ft_tokens},
        wall_s={
            "pretrain": round(pretrain_s, 1),
            "finetune": round(finetune_s, 1),
            "eval": round(eval_s, 1),
            "total": round(time.time() - t0, 1),
        },
        device=f"cpu ({hp.threads} threads)",
        wikitext2_perplexity=ppl,
        held_out_traces={"seed": hp.seed, "splits": SPLIT_GROUPS, **held_out},
        checkpoint=weights_entry(weights),
    )
    log(f"saved {weights.stat().st_size / 1e6:.1f} MB to {out_dir.name}/")
    return receipt


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR)
    for name, default in asdict(Hyper()).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    args = vars(parser.parse_args(argv))
    out = args.pop("out")
    receipt = train(out, Hyper(**args))
    print(json.dumps({k: receipt[k] for k in ("wikitext2_perplexity", "held_out_traces", "wall_s")}, indent=2))
    return receipt


if __name__ == "__main__":
    main()
