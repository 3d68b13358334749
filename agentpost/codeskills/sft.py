"""Supervised fine-tuning of the project's small LM on scripted-controller traces (the ``a100`` profile's policy).

The paper fine-tunes on 1,024 zero-shot teacher trajectories (spec, "Defaults"); offline, the teacher here is the
scripted heuristic (:class:`~agentpost.codeskills.controllers.ScriptedController`). Each decision becomes one example:
the prompt exactly as :class:`~agentpost.codeskills.controllers.LMController` renders it (same history lines; over
``max_prompt_tokens`` the oldest history lines are dropped, never the instruction, action list or observation, by
the same :func:`~agentpost.codeskills.controllers.fit_prompt_ids` the controller uses), and
the target ``" <action>\\n"`` followed by end-of-sequence, which the strict grammar parses. The loss is the mean
token cross-entropy over the target tokens only. Trace seeds must be disjoint from the evaluation seeds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from agentpost.codeskills.controllers import ScriptedController, fit_prompt_ids, history_line, prompt_parts
from agentpost.codeskills.env import make_env
from agentpost.codeskills.runtime import Budgets, Choice, action_space, run_episode


class TraceRecorder:
    """Wraps a controller and records (prompt, action) per decision, with the LM controller's history format."""

    def __init__(self, inner, *, task: str, max_history: int = 16):
        self.inner, self.task, self.max_history = inner, task, max_history
        self.name = f"recorded_{getattr(inner, 'name', 'controller')}"
        self.history: list[str] = []
        self.examples: list[dict] = []

    def reset(self, rng) -> None:
        self.history = []
        self.inner.reset(rng)

    def act(self, bot, space) -> Choice:
        head, tail = prompt_parts(bot, space, task=self.task)
        history = self.history[-self.max_history:] if self.max_history else []
        choice = self.inner.act(bot, space)
        self.examples.append({"head": head, "history": list(history), "tail": tail, "action": choice.action})
        return choice

    def observe(self, choice, outcome, bot) -> None:
        self.history.append(history_line(choice, outcome))
        self.inner.observe(choice, outcome, bot)


def collect_traces(tasks, episodes: int, seeds, interfaces=("primitive", "skill", "mixed"),
                   budgets: Budgets = Budgets(), *, max_history: int = 16, successful_only: bool = True) -> list[dict]:
    """Scripted-controller decisions on ``episodes`` instances per trace seed, task and interface."""
    out = []
    for task in tasks:
        env = make_env(task)
        for interface in interfaces:
            for seed in seeds:
                for ep in range(episodes):
                    rec = TraceRecorder(ScriptedController(), task=task.removeprefix("MiniHack-"),
                                        max_history=max_history)
                    res = run_episode(env, rec, action_space(interface), budgets, env_seed=int(seed) * 10_000 + ep,
                                      rng=np.random.default_rng([int(seed), ep]), task=task, interface=interface)
                    if res.success or not successful_only:
                        out += [{**e, "task": task, "interface": interface} for e in rec.examples]
        env.close()
    return out


def encode(example: dict, tokenizer, max_prompt_tokens: int | None) -> tuple[list[int], list[int], int]:
    """(input ids, target mask, history lines dropped): the prompt encoded as the LM controller encodes it
    (oldest history lines dropped to fit ``max_prompt_tokens``), then `` <action>\\n`` and EOS; the mask marks the
    target."""
    prompt, dropped = fit_prompt_ids(tokenizer, example["head"], example["history"], example["tail"], max_prompt_tokens)
    target = tokenizer(f" {example['action']}\n")["input_ids"] + [tokenizer.eos_token_id]
    return prompt + target, [0] * len(prompt) + [1] * len(target), dropped


def target_loss(model, ids: torch.Tensor, mask: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over target positions (mask = 1 on the tokens to predict)."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    labels, m = ids[:, 1:], mask[:, 1:].float()
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                            reduction="none").view_as(m)
    return (nll * m).sum() / m.sum().clamp(min=1)


def finetune(model, tokenizer, examples: list[dict], *, updates: int, lr: float, batch_size: int,
             max_prompt_tokens: int = 1024, device: str = "cpu", seed: int = 0, progress: bool = True) -> dict:
    """AdamW on the target loss; returns the training log (losses per update, examples whose history was shortened
    to fit ``max_prompt_tokens``)."""
    if not examples:
        raise ValueError("finetune: no trace examples (did the scripted controller succeed on the trace seeds?)")
    if updates < 1 or batch_size < 1 or not lr > 0:
        raise ValueError("finetune needs updates >= 1, batch_size >= 1 and lr > 0")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    encoded = [encode(e, tokenizer, max_prompt_tokens) for e in examples]
    data = [(ids, mask) for ids, mask, _ in encoded]
    shortened = sum(dropped > 0 for _, _, dropped in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    t0 = time.time()
    for _ in tqdm(range(updates), desc="sft updates", disable=not progress, mininterval=10):
        batch = [data[i] for i in rng.integers(0, len(data), size=batch_size)]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((batch_size, width), pad, dtype=torch.long)
        mask = torch.zeros((batch_size, width), dtype=torch.long)
        attn = torch.zeros((batch_size, width), dtype=torch.long)
        for row, (x, m) in enumerate(batch):  # right padding; padded positions are neither attended nor scored
            ids[row, :len(x)], mask[row, :len(m)], attn[row, :len(x)] = torch.tensor(x), torch.tensor(m), 1
        loss = target_loss(model, ids.to(device), mask.to(device), attn.to(device))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return {"updates": updates, "examples": len(examples), "history_shortened": shortened,
            "first_loss": losses[0], "final_loss": losses[-1],
            "losses": losses, "seconds": time.time() - t0}


def save(model, tokenizer, out_dir: str | Path, log: dict) -> Path:
    """Save the fine-tuned checkpoint (loads with ``lm_policy = "sft:<out_dir>"``) and its training log."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "sft_log.json").write_text(json.dumps({k: v for k, v in log.items() if k != "losses"}, indent=2))
    return out
