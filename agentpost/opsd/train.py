"""One Recursive OPSD training run (the pseudo-code of the spec, one optimizer step per minibatch):

1. draw the minibatch from the seed's fixed data order; 2. sample one response per problem from the current
student (temperature ``train_temperature``, at most ``max_new_tokens``); 3. L_G: forward the student context and,
under no-grad, the teacher context through the teacher-sync policy's model; per-position divergence over the full
vocabulary on the retained response positions (:mod:`agentpost.opsd.loss`); 4. SRCL (optional): greedy rewrite
from the refinement prompt, accept gates (:mod:`agentpost.opsd.srcl`), NLL of accepted rewrites after the student
prompt (eq. 6); 5. AdamW on lambda_G L_G + lambda_S L_S (eq. 7) with gradient clipping; 6. teacher sync
(:mod:`agentpost.opsd.teacher`). The probe (:mod:`agentpost.opsd.probe`) runs before step 1 and every
``probe_every`` steps.

One loop for every profile: the task (:mod:`agentpost.opsd.tasks`) supplies prompts, references and the answer
check; the model is the project's small LM (every tensor trained) or a LoRA-wrapped hub model (only the adapters
trained, :func:`agentpost.models.hub.with_lora`). The optimizer, gradient clipping and the teacher policies act on
the trainable tensors only, and the teacher forward runs on the same module with the teacher's tensors swapped in
(:meth:`agentpost.opsd.teacher.TeacherSync.as_teacher`), before the student forward so that the swap never touches
tensors an autograd graph has saved.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from agentpost.models import arith_lm as A
from agentpost.opsd.loss import KL_SUPPORTS, distill_loss, response_logits, response_mask
from agentpost.opsd.probe import probe
from agentpost.opsd.srcl import Gates, gate_results, srcl_loss
from agentpost.opsd.tasks import ARITHMETIC
from agentpost.opsd.teacher import TEACHER_SYNCS, make_sync, trainable
from agentpost.opsd.divergence import DIVERGENCES


@dataclass(frozen=True)
class ArmConfig:
    """One arm: teacher sync, SRCL on/off and everything that must be equal across arms."""

    teacher_mode: str = "live"
    ema_decay: float = 0.3
    sync_every: int = 5
    srcl: bool = False
    teacher_layout: str = "assistant"
    divergence: str = "forward_kl"
    dce_positions: str = "all"
    dce_agg: str = "seq_mean_token_mean"
    kl_support: str = "full"
    topk: int = 0
    lambda_g: float = 1.0
    lambda_s: float = 5e-4  # the paper's ratio lambda_S / lambda_G = 25 / 5e4 (eq. 7, Table 24)
    lr: float = 3e-4
    grad_clip: float = 1.0
    batch: int = 16
    updates: int = 10
    max_new_tokens: int = 96
    train_temperature: float = 1.0
    gates: Gates = field(default_factory=Gates)

    def __post_init__(self):
        if self.teacher_mode not in TEACHER_SYNCS:
            raise ValueError(f"unknown teacher_mode {self.teacher_mode!r}; known: {sorted(TEACHER_SYNCS)}")
        if self.divergence not in DIVERGENCES:
            raise ValueError(f"unknown divergence {self.divergence!r}; known: {sorted(DIVERGENCES)}")
        if self.teacher_layout not in A.LAYOUTS:
            raise ValueError(f"unknown teacher_layout {self.teacher_layout!r}; use one of {A.LAYOUTS}")
        if self.kl_support not in KL_SUPPORTS or (self.kl_support == "topk" and self.topk < 1):
            raise ValueError(
                f"kl_support must be one of {KL_SUPPORTS} (topk >= 1 with 'topk'), got "
                f"{self.kl_support!r}, topk={self.topk}"
            )
        if self.lambda_g < 0 or self.lambda_s < 0:
            raise ValueError(f"loss weights must be >= 0, got lambda_g={self.lambda_g}, lambda_s={self.lambda_s}")
        for name in ("batch", "updates", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def name(self) -> str:
        base = {
            "live": "DCE",
            "frozen": "frozen",
            "ema": f"EMA(d={self.ema_decay})",
            "periodic": f"periodic(m={self.sync_every})",
        }[self.teacher_mode]
        return base + ("+SRCL" if self.srcl else "")


def data_order(n_items: int, cfg: ArmConfig, seed: int) -> np.ndarray:
    """Indices of the training items for every update of a seed (the same for every arm of that seed)."""
    rng = np.random.default_rng(seed)
    need = cfg.batch * cfg.updates
    order = np.concatenate([rng.permutation(n_items) for _ in range(-(-need // n_items))])
    return order[:need].reshape(cfg.updates, cfg.batch)


def _ids(tok, texts: list[str]) -> list[list[int]]:
    return [tok(t, add_special_tokens=False).input_ids for t in texts]


def train_arm(
    model0,
    tok,
    train_items,
    cfg: ArmConfig,
    seed: int,
    *,
    task=ARITHMETIC,
    probe_items=(),
    probe_every: int = 0,
    progress: bool = True,
) -> tuple[torch.nn.Module, dict]:
    """Train a copy of ``model0`` for ``cfg.updates`` steps on ``task``; returns the student and a log with
    per-step losses, SRCL acceptance, gate failure counts, the probe curve and ``updates`` (optimizer steps made)."""
    from tqdm.auto import tqdm

    torch.manual_seed(seed)
    student = copy.deepcopy(model0).train()
    params = list(trainable(student).values())
    sync = make_sync(cfg.teacher_mode, ema_decay=cfg.ema_decay, sync_every=cfg.sync_every)
    sync.start(student)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    order = data_order(len(train_items), cfg, seed)
    log = {
        "arm": cfg.name,
        "config": {k: v for k, v in asdict(cfg).items() if k != "gates"},
        "gates": asdict(cfg.gates),
        "loss_g": [],
        "loss_s": [],
        "accepted": [],
        "rollout_tokens": [],
        "gate_failures": {},
        "probe": [],
        "updates": 0,
    }

    def do_probe(step):
        if probe_items:
            s = probe(student, tok, probe_items, layout=cfg.teacher_layout, roles=("student",), task=task)
            with sync.as_teacher() as teacher:
                t = probe(teacher, tok, probe_items, layout=cfg.teacher_layout, roles=("teacher",), task=task)
            log["probe"].append({"step": step, **s, **t})

    do_probe(0)
    for k in tqdm(range(1, cfg.updates + 1), desc=f"{cfg.name} seed {seed}", disable=not progress, leave=False):
        items = [train_items[i] for i in order[k - 1]]
        student_prompts = _ids(tok, [task.student_prompt(e) for e in items])
        # rollouts are seeded by (seed, step): equal across arms wherever the students agree
        rollouts = A.generate(
            student,
            tok,
            [task.student_prompt(e) for e in items],
            max_new_tokens=cfg.max_new_tokens,
            do_sample=True,
            temperature=cfg.train_temperature,
            seed=seed * 100_003 + k,
        )
        resp = [r["ids"] for r in rollouts]
        with sync.as_teacher() as teacher:
            t_logits, _ = response_logits(
                teacher, _ids(tok, [task.teacher_prompt(e, cfg.teacher_layout) for e in items]), resp, tok.pad_token_id
            )
        student.train()
        s_logits, _ = response_logits(student, student_prompts, resp, tok.pad_token_id)
        mask = response_mask(resp, tok.eos_token_id, cfg.dce_positions).to(s_logits.device)
        loss_g = distill_loss(
            t_logits,
            s_logits,
            mask,
            divergence_name=cfg.divergence,
            agg=cfg.dce_agg,
            kl_support=cfg.kl_support,
            topk=cfg.topk,
        )
        loss = cfg.lambda_g * loss_g
        n_acc = 0
        if cfg.srcl:
            rewrites = A.generate(
                student,
                tok,
                [task.refine_prompt(e, r["text"]) for e, r in zip(items, rollouts)],
                max_new_tokens=cfg.max_new_tokens,
            )
            accepted = []
            for e, r, c in zip(items, rollouts, rewrites):
                gates = gate_results(
                    c["text"], len(c["ids"]), c["eos"], len(r["ids"]), task.reference_answer(e), cfg.gates
                )
                for g, ok in gates.items():
                    log["gate_failures"][g] = log["gate_failures"].get(g, 0) + (not ok)
                accepted.append(all(gates.values()))
            n_acc = sum(accepted)
            student.train()
            c_logits, c_mask = response_logits(student, student_prompts, [c["ids"] for c in rewrites], tok.pad_token_id)
            targets = torch.zeros(c_mask.shape, dtype=torch.long, device=c_mask.device)
            for i, c in enumerate(rewrites):
                targets[i, : len(c["ids"])] = torch.tensor(c["ids"], device=c_mask.device)
            nll = F.cross_entropy(c_logits.float().transpose(1, 2), targets, reduction="none")
            loss_s = srcl_loss(nll, c_mask, torch.tensor(accepted, dtype=torch.float32, device=c_mask.device))
            loss = loss + cfg.lambda_s * loss_s
            log["loss_s"].append(float(loss_s.detach()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        log["updates"] += 1
        sync.after_step(k, student)
        log["loss_g"].append(float(loss_g.detach()))
        log["accepted"].append(n_acc)
        log["rollout_tokens"].append(int(sum(map(len, resp))))
        if probe_every and k % probe_every == 0:
            do_probe(k)
    return student.eval(), log


@torch.no_grad()
def reference_nll(model, tok, items, task=ARITHMETIC, batch_size: int = 64) -> list[float]:
    """Per item, the teacher-forced NLL (nats, summed over its tokens and ``<eos>``) of the task's reference
    response (:meth:`reference_response`) after the student prompt: ``-log p(whole correct response | x)``.

    A continuous companion of accuracy: it moves when an update makes the correct working more or less likely,
    even where the greedy answer does not flip."""
    was_training = model.training
    model.eval()
    out: list[float] = []
    for b in range(0, len(items), batch_size):
        chunk = items[b : b + batch_size]
        resp = [ids + [tok.eos_token_id] for ids in _ids(tok, [task.reference_response(e) for e in chunk])]
        logits, mask = response_logits(
            model, _ids(tok, [task.student_prompt(e) for e in chunk]), resp, tok.pad_token_id
        )
        targets = torch.zeros(mask.shape, dtype=torch.long, device=mask.device)
        for i, r in enumerate(resp):
            targets[i, : len(r)] = torch.tensor(r, device=mask.device)
        nll = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
        out += (nll * mask).sum(1).tolist()
    model.train(was_training)
    return out


def evaluate(model, tok, items, max_new_tokens: int, task=ARITHMETIC) -> dict:
    """Greedy decoding from the student prompt: per-item correctness of the final box (the task's check) and
    response length (tokens, including EOS); and per item the NLL of the reference response
    (:func:`reference_nll`)."""
    outs = A.generate(model, tok, [task.student_prompt(e) for e in items], max_new_tokens=max_new_tokens)
    return {
        "correct": [float(task.is_correct(o["text"], e)) for o, e in zip(outs, items)],
        "length": [float(len(o["ids"])) for o in outs],
        "eos": [float(o["eos"]) for o in outs],
        "nll": reference_nll(model, tok, items, task),
        "examples": [o["text"] for o in outs[:3]],
    }
