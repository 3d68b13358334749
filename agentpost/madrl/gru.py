"""A character-level GRU language model for the fastest MaD-RL mechanism run, pretrained by the project.

Pretraining (supervised, next character) on GSM8K train minus the validation split
(:func:`agentpost.madrl.task.split_validation`, which selects the RL learning rates): each example is a question's last ``prompt_chars``
characters, left-padded with ``<pad>`` to that length, a newline, then the first calculator annotation of the
reference solution and ``<eos>``; the loss covers the completion only. Train and write the committed checkpoint
(``assets/gsm8k-char-gru/``: ``config.json``, ``model.safetensors``, ``receipt.json``)::

    python -m agentpost.madrl.gru
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

ASSET_DIR = Path(__file__).parent / "assets" / "gsm8k-char-gru"
TRAIN_COMMAND = "python -m agentpost.madrl.gru"
SPECIALS = ("<pad>", "<eos>", "<unk>")
VOCAB = SPECIALS + ("\n",) + tuple(chr(i) for i in range(32, 127))
PAD, EOS, UNK = 0, 1, 2
_INDEX = {ch: i for i, ch in enumerate(VOCAB)}


def encode(text: str) -> list[int]:
    """Character ids (non-ASCII characters map to ``<unk>``)."""
    return [_INDEX.get(ch, UNK) for ch in text]


def decode(ids) -> str:
    """Text of ids up to the first ``<eos>``; ``<pad>`` is dropped."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i != PAD:
            out.append(VOCAB[i] if i >= len(SPECIALS) else "?")
    return "".join(out)


@dataclass(frozen=True)
class GRUConfig:
    """Architecture and prompt format of the character GRU."""

    embed: int = 32
    hidden: int = 128
    layers: int = 1
    prompt_chars: int = 32
    max_new_chars: int = 24


class CharGRU(nn.Module):
    """Embedding -> GRU -> linear head over :data:`VOCAB`."""

    def __init__(self, config: GRUConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(len(VOCAB), config.embed)
        self.rnn = nn.GRU(config.embed, config.hidden, num_layers=config.layers, batch_first=True)
        self.head = nn.Linear(config.hidden, len(VOCAB))

    def forward(self, ids: torch.Tensor, h: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        out, h = self.rnn(self.embed(ids), h)
        return self.head(out), h

    def save(self, path: Path) -> None:
        from safetensors.torch import save_file

        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(asdict(self.config), indent=2) + "\n")
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(path / "model.safetensors"))


def load_char_gru(path: str | Path = ASSET_DIR) -> CharGRU:
    """The committed checkpoint in eval mode; a clear error naming the training command when it is missing."""
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"no character-GRU checkpoint at {path}; train it with `{TRAIN_COMMAND}`")
    model = CharGRU(GRUConfig(**json.loads((path / "config.json").read_text())))
    model.load_state_dict(load_file(str(path / "model.safetensors")))
    return model.eval()


def prompt_ids(prompts: list[str], prompt_chars: int) -> torch.Tensor:
    """[n, prompt_chars + 1] ids: each prompt (already ending in a newline) left-padded with ``<pad>``."""
    rows = []
    for p in prompts:
        ids = encode(p)[-(prompt_chars + 1) :]
        rows.append([PAD] * (prompt_chars + 1 - len(ids)) + ids)
    return torch.tensor(rows, dtype=torch.int64)


def _batches(problems, config: GRUConfig, batch_size: int, gen: torch.Generator):
    from agentpost.madrl.task import prompt_text

    width = config.max_new_chars + 1
    prompts = prompt_ids([prompt_text(p.question, config.prompt_chars) for p in problems], config.prompt_chars)
    comp = torch.full((len(problems), width), PAD, dtype=torch.int64)
    for i, p in enumerate(problems):
        ids = (encode(p.first_annotation) + [EOS])[:width]
        comp[i, : len(ids)] = torch.tensor(ids)
    while True:
        idx = torch.randperm(len(problems), generator=gen)[:batch_size]
        yield torch.cat([prompts[idx], comp[idx]], 1), prompts.shape[1]


def completion_nll(model: CharGRU, seq: torch.Tensor, n_prompt: int) -> torch.Tensor:
    """Mean next-character NLL over the completion's non-pad characters."""
    logits, _ = model(seq[:, :-1])
    target = seq[:, 1:]
    mask = torch.zeros_like(target, dtype=torch.bool)
    mask[:, n_prompt - 1 :] = target[:, n_prompt - 1 :] != PAD
    nll = nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
    return (nll * mask).sum() / mask.sum()


def pretrain(
    config: GRUConfig,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    out_dir: Path | None,
    command: str = TRAIN_COMMAND,
) -> tuple[CharGRU, dict]:
    """Next-character pretraining on GSM8K train first annotations (AdamW, warmup-cosine, clip 1.0); returns the
    model and its receipt, and writes both to ``out_dir`` unless it is None."""
    from tqdm.auto import tqdm

    from agentpost.data import files_read
    from agentpost.record.hashing import sha256_file
    from agentpost.madrl.task import load_problems, split_validation
    from agentpost.models.schedules import warmup_cosine

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train, _validation = split_validation(load_problems("train"))
    test = load_problems("test")
    model = CharGRU(config)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, steps, 1.0, max(1, steps // 20)))
    start = time.time()
    batches = _batches(train, config, batch_size, gen)
    for _ in tqdm(range(steps), desc="pretrain char GRU", mininterval=5):
        seq, n_prompt = next(batches)
        loss = completion_nll(model, seq, n_prompt)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    with torch.no_grad():
        test_seq, n_prompt = next(_batches(test, config, len(test), torch.Generator().manual_seed(0)))
        test_nll = float(completion_nll(model, test_seq, n_prompt))
    receipt = {
        "artifact": "gsm8k-char-gru",
        "script": "agentpost/madrl/gru.py",
        "command": command,
        "config": asdict(config),
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_examples": len(train),
        "validation_examples_excluded": len(_validation),
        "test_examples": len(test),
        "test_completion_nll_nats_per_char": round(test_nll, 4),
        "data": {k: sha256_file(v) for k, v in files_read().items()},
        "wall_s": round(time.time() - start, 1),
        "torch": torch.__version__,
    }
    if out_dir is not None:
        model.save(out_dir)
        (out_dir / "receipt.json").write_text(json.dumps(receipt, indent=2) + "\n")
    return model, receipt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ASSET_DIR)
    ap.add_argument("--hidden", type=int, default=GRUConfig.hidden)
    ap.add_argument("--layers", type=int, default=GRUConfig.layers)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    _, receipt = pretrain(
        GRUConfig(hidden=args.hidden, layers=args.layers),
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        out_dir=args.out,
        command=" ".join([TRAIN_COMMAND, *sys.argv[1:]]),
    )
    print(json.dumps(receipt, indent=2))


if __name__ == "__main__":
    main()
