"""The project's shared byte-level BPE tokenizer, trained on WikiText-2 train.

Shared by every chapter that trains a small language model (a shared artifact: it comes from
``agentpost.models`` with its own receipt, like every model the project trains itself; README, "Chapters"). Tool-trace
delimiters are single special tokens so that a delimiter is never split across tokens in the project's own traces.

Train (writes ``assets/wikitext2-bpe/`` and its receipt)::

    python -m agentpost.models.tokenizer
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ASSET_DIR = Path(__file__).parent / "assets" / "wikitext2-bpe"
VOCAB_SIZE = 4096
SPECIAL_TOKENS = [
    "<pad>",
    "<eos>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<tool_list>",
    "</tool_list>",
]


def load_tokenizer(path: str | Path = ASSET_DIR):
    """The trained tokenizer as a transformers ``PreTrainedTokenizerFast``."""
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"tokenizer not found at {path}; train it with `python -m agentpost.models.tokenizer`")
    return PreTrainedTokenizerFast.from_pretrained(str(path))


def train(out_dir: Path = ASSET_DIR, vocab_size: int = VOCAB_SIZE) -> dict:
    """Train the BPE tokenizer on WikiText-2 train and save it with a receipt."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from agentpost.data import data_file
    from agentpost.record.hashing import sha256_file

    train_path = data_file("wikitext-2", "train.txt")
    start = time.time()
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train([str(train_path)], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    fast.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[2:]})
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    receipt = {
        "artifact": "wikitext2-bpe tokenizer",
        "script": "agentpost/models/tokenizer.py",
        "data": {"wikitext-2/train.txt": sha256_file(train_path)},
        "vocab_size": fast.vocab_size,
        "special_tokens": SPECIAL_TOKENS,
        "wall_s": round(time.time() - start, 2),
        "tokenizer_json_sha256": sha256_file(out_dir / "tokenizer.json"),
    }
    (out_dir / "receipt.json").write_text(json.dumps(receipt, indent=2) + "\n")
    return receipt


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    print(json.dumps(train(vocab_size=parser.parse_args().vocab_size), indent=2))
