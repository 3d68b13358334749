"""The two policies of the MaD-RL diagnostic behind one interface, so that :mod:`agentpost.madrl.train` has one
training loop for both: ``copies`` independent replicas of a base model, one per (arm, target, seed) run.

Interface (tensors ``[A, B, ...]``: copy a, row b): ``encode(problems)`` -> prompt ids and attention mask
``[n, P]``; ``start(ids, mask)`` -> next-token logits ``[A, B, V]`` and a state; ``advance(tok, state)`` -> the
same after appending ``tok [A, B]``; ``stops(tok, prev)`` -> rows that end here; ``logp(ids, mask, comp)`` ->
teacher-forced log pi(completion token | prefix) ``[A, B, T]``; ``decode(ids)``; ``parameters()``;
``pad_id``; ``device``.

* :class:`GRUPolicy`: the character GRU, all copies in one batched :class:`~agentpost.madrl.stacked.StackedGRU`;
  prompts are the fixed-width, ``<pad>``-left-padded format it was pretrained on.
* :class:`HFPolicy`: any Hugging Face causal LM (the chapter's annotation LM, or a hub model in ``a100-hub``), one
  deep copy per run; prompts left-padded with an attention mask and position ids counted over real tokens, a KV
  cache while sampling. Completion tokens after a row stops are ``pad`` and masked out of every loss.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import nn

from agentpost.madrl.gru import EOS, PAD, CharGRU, decode, encode, prompt_ids
from agentpost.madrl.stacked import StackedGRU
from agentpost.madrl.task import Problem, prompt_text


class GRUPolicy:
    """``copies`` replicas of the character GRU (stops after ``<eos>`` or the first ``>>``)."""

    def __init__(self, base: CharGRU, copies: int, device: str | torch.device = "cpu"):
        self.device = torch.device(device)
        self.model = StackedGRU(base, copies).to(self.device)
        self.copies, self.pad_id, self.prompt_chars = copies, PAD, base.config.prompt_chars
        self._gt = encode(">")[0]

    def parameters(self):
        return self.model.parameters()

    def encode(self, problems: list[Problem]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = prompt_ids([prompt_text(p.question, self.prompt_chars) for p in problems], self.prompt_chars)
        return ids, torch.ones_like(ids)

    def start(self, ids: torch.Tensor, mask: torch.Tensor):
        logits, h = self.model(ids.to(self.device))
        return logits[:, :, -1], h

    def advance(self, tok: torch.Tensor, h: torch.Tensor):
        logits, h = self.model(tok[..., None], h)
        return logits[:, :, -1], h

    def stops(self, tok: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        return (tok == EOS) | ((tok == self._gt) & (prev == self._gt))

    def logp(self, ids: torch.Tensor, mask: torch.Tensor, comp: torch.Tensor) -> torch.Tensor:
        full = torch.cat([ids.to(self.device), comp], -1)
        logits, _ = self.model(full[..., :-1])
        logits = logits[..., ids.shape[-1] - 1 :, :]
        return torch.log_softmax(logits.float(), -1).gather(-1, comp[..., None])[..., 0]

    def decode(self, ids) -> str:
        return decode(ids)


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids counted over real (mask 1) tokens of left-padded rows."""
    return (mask.long().cumsum(-1) - 1).clamp_min(0)


class HFPolicy:
    """``copies`` deep copies of a Hugging Face causal LM ``model`` with ``tokenizer``; ``prompt_fn(problem)``
    gives a problem's prompt text. A row stops at any of the model's end-of-sequence ids."""

    def __init__(
        self, model, tokenizer, copies: int, prompt_fn: Callable[[Problem], str], device: str | torch.device = "cpu"
    ):
        self.device = torch.device(device)
        self.models = nn.ModuleList([copy.deepcopy(model) for _ in range(copies)]).to(self.device)
        self.models.eval()  # no dropout in sampling or in the update (gradients flow in eval mode too)
        self.copies, self.tokenizer, self.prompt_fn = copies, tokenizer, prompt_fn
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        self.eos_ids = torch.tensor(sorted(set(eos) | {tokenizer.eos_token_id} - {None}), device=self.device)
        if self.eos_ids.numel() == 0:
            raise ValueError("the tokenizer and generation config name no end-of-sequence token")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else int(self.eos_ids[0])

    def parameters(self):
        return self.models.parameters()

    def encode(self, problems: list[Problem]) -> tuple[torch.Tensor, torch.Tensor]:
        self.tokenizer.padding_side = "left"
        enc = self.tokenizer(
            [self.prompt_fn(p) for p in problems], return_tensors="pt", padding=True, add_special_tokens=False
        )
        return enc.input_ids, enc.attention_mask

    def start(self, ids: torch.Tensor, mask: torch.Tensor):
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = _positions(mask)
        logits, caches = [], []
        for a, m in enumerate(self.models):
            out = m(input_ids=ids[a], attention_mask=mask[a], position_ids=pos[a], use_cache=True, logits_to_keep=1)
            logits.append(out.logits[:, -1])
            caches.append(out.cache)
        return torch.stack(logits), (caches, mask, pos[..., -1])

    def advance(self, tok: torch.Tensor, state):
        caches, mask, last = state
        mask = torch.cat([mask, torch.ones_like(mask[..., :1])], -1)
        last = last + 1
        logits = []
        for a, m in enumerate(self.models):
            out = m(
                input_ids=tok[a, :, None],
                attention_mask=mask[a],
                position_ids=last[a, :, None],
                cache=caches[a],
                use_cache=True,
                logits_to_keep=1,
            )
            logits.append(out.logits[:, -1])
            caches[a] = out.cache
        return torch.stack(logits), (caches, mask, last)

    def stops(self, tok: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        return torch.isin(tok, self.eos_ids)

    def logp(self, ids: torch.Tensor, mask: torch.Tensor, comp: torch.Tensor) -> torch.Tensor:
        ids, mask = ids.to(self.device), mask.to(self.device)
        full = torch.cat([ids, comp], -1)
        full_mask = torch.cat([mask, torch.ones_like(comp)], -1)
        pos = _positions(full_mask)
        out = []
        for a, m in enumerate(self.models):
            logits = m(
                input_ids=full[a, :, :-1], attention_mask=full_mask[a, :, :-1], position_ids=pos[a, :, :-1]
            ).logits
            logits = logits[:, ids.shape[-1] - 1 :]
            out.append(torch.log_softmax(logits.float(), -1).gather(-1, comp[a, ..., None])[..., 0])
        return torch.stack(out)

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids]
        eos = set(self.eos_ids.tolist())
        cut = next((k for k, i in enumerate(ids) if i in eos), len(ids))
        return self.tokenizer.decode([i for i in ids[:cut] if i != self.pad_id], skip_special_tokens=True)


#: The instruction of the hub-model prompt (a100-hub): the same task, asked in words.
HUB_INSTRUCTION = (
    "Write only the first calculation of the solution to this problem, as a calculator annotation "
    "<<expression=result>>, for example <<48/2=24>>."
)


def chat_prompt_fn(tokenizer) -> Callable[[Problem], str]:
    """Prompt of an instruction-tuned hub model: :data:`HUB_INSTRUCTION` and the whole question as one user turn
    through the tokenizer's chat template (Qwen3: thinking off); a tokenizer without a template gets the same text
    and a newline."""

    def prompt(p: Problem) -> str:
        text = f"{HUB_INSTRUCTION}\n\n{' '.join(p.question.split())}"
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True, enable_thinking=False
            )
        return text + "\n"

    return prompt
