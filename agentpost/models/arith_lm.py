"""The project's small arithmetic LM for "GSM8K-derived arithmetic" (shared by the OPSD and MaD-RL chapters).

A Qwen3-architecture causal LM (grouped-query attention, ~0.4 M parameters) with a **character-level** tokenizer
(every printable ASCII character and ``\\n`` is one token, plus ``<pad>``, ``<eos>``, ``<|im_start|>``,
``<|im_end|>``), pretrained from scratch by ``python -m agentpost.models.train_arith_lm`` on the train-split
expressions of :func:`agentpost.data.gsm8k.arithmetic_split` (validation and test expressions never seen). The
checkpoint, tokenizer and ``receipt.json`` are in :data:`ASSET_DIR`; :func:`load` returns ``(model, tokenizer)``.

Formats (the model was trained on exactly these strings; ``<eos>`` ends every response):

* student prompt (:func:`student_prompt`)::

    <|im_start|>user\\nCompute 48/2.<|im_end|>\\n<|im_start|>assistant\\n

* response styles (:func:`response`; a **synthetic format** over the real expressions), each with the
  digit-by-digit scratchpad of :func:`scratchpad` (``S`` below; for ``48/2`` it is ``048/2: 00/2=0r0, 04/2=2r0,
  08/2=4r0; 024``), e.g. for ``48/2=24``: ``concise`` ``S. 48/2 = 24. The answer is \\boxed{24}.``; ``verbose``
  ``Let me compute 48/2. S. 48/2 = 24. Let me double-check: 48/2 = 24. The answer is \\boxed{24}.``; ``corrected``
  ``48/2 = 23. Wait, S. 48/2 = 24. The answer is \\boxed{24}.``; ``rebox`` ``48/2 = 23. The answer is \\boxed{23}.
  Wait, that is wrong. S. 48/2 = 24. The answer is \\boxed{24}.`` (the wrong value is a random perturbation of the
  result). Every response fits in 160 tokens. The scratchpad is what lets a model this small compute: without it
  (the answer line alone) the same network was right on 1.5% of the test items;
* privileged teacher prompt (:func:`teacher_prompt`), the reference being GSM8K's own annotation line:
  ``assistant`` layout (default) ``...<|im_start|>assistant\\nReference: 48/2=24\\nSolve it in your own way.\\n``;
  ``user`` layout ``<|im_start|>user\\nCompute 48/2.\\nReference: 48/2=24\\nSolve it in your own way.<|im_end|>\\n
  <|im_start|>assistant\\n``;
* refinement prompt (:func:`refine_prompt`), answered by the concise style with the previous answer's final box::

    <|im_start|>user\\nCompute 48/2.\\nPrevious answer: {response}\\nRewrite it concisely.<|im_end|>\\n<|im_start|>assistant\\n

Committed checkpoint (``receipt.json``, greedy, the first 200 held-out test items): the student is right on about a
third of the test expressions (its receipt gives the figures, validation alike) while the assistant-side teacher
prompt, which can read the result off the reference, is right far more often: a privileged teacher better than a
student that partly solves the task, the situation OPSD needs.

Pretraining mixes the four prompt kinds (student, both teacher layouts, refinement) so that the one network can
play the student, the privileged teacher and the rewriter, the three roles of Recursive OPSD.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
import transformers

ASSET_DIR = Path(__file__).parent / "assets" / "gsm8k-arith-lm"
TRAIN_COMMAND = "python -m agentpost.models.train_arith_lm"
SPECIAL_TOKENS = ["<pad>", "<eos>", "<|im_start|>", "<|im_end|>"]
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))
USER, ASSISTANT, END = "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_end|>\n"
TAU = "Solve it in your own way."
REFINE = "Rewrite it concisely."
LAYOUTS = ("assistant", "user")
STYLES = ("concise", "verbose", "corrected", "rebox")

#: Architecture of the committed checkpoint (Qwen3, GQA 4 query / 2 KV heads, tied embeddings).
ARCH = dict(
    vocab_size=128,
    hidden_size=96,
    intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=24,
    max_position_embeddings=512,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
    initializer_range=0.02,
)


def build_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """The character-level tokenizer: ids 0-3 are :data:`SPECIAL_TOKENS`, then one id per character of CHARS."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    vocab.update({c: len(SPECIAL_TOKENS) + i for i, c in enumerate(CHARS)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="?"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    fast.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[2:]})
    return fast


def config(**overrides) -> transformers.Qwen3Config:
    """Qwen3 config of the arithmetic LM (``overrides`` change the size, e.g. for the a100 profile)."""
    return transformers.Qwen3Config(**{**ARCH, "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": None, **overrides})


def load(path: str | Path = ASSET_DIR, *, dtype: torch.dtype = torch.float32):
    """``(model, tokenizer)`` from a checkpoint folder via ``from_pretrained``, model in eval mode."""
    path = Path(path)
    if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
        raise FileNotFoundError(
            f"no arithmetic-LM checkpoint (config.json + *.safetensors) at {path}; train it with `{TRAIN_COMMAND}`"
        )
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation="sdpa")
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(str(path))
    return model.eval(), tokenizer


# ---- formats -----------------------------------------------------------------------------------------------


def question(expr) -> str:
    return f"Compute {expr.text}."


def student_prompt(expr) -> str:
    """What the student sees: the problem only."""
    return USER + question(expr) + END + ASSISTANT


def teacher_prompt(expr, layout: str = "assistant", tau: str = TAU) -> str:
    """The privileged context: the reference line ``expr.line`` and transition instruction ``tau``.

    ``assistant``: prefilled at the start of the assistant turn (Recursive OPSD, §3.1); ``user``: appended to the
    user turn, instruction last (the OPSD layout)."""
    ref = f"Reference: {expr.line}\n{tau}"
    if layout == "assistant":
        return student_prompt(expr) + ref + "\n"
    if layout == "user":
        return USER + question(expr) + "\n" + ref + END + ASSISTANT
    raise ValueError(f"unknown teacher layout {layout!r}; use one of {LAYOUTS}")


def refine_prompt(expr, previous: str, instruction: str = REFINE) -> str:
    """The SRCL refinement prompt: the problem and the model's own previous answer, no reference."""
    return USER + question(expr) + f"\nPrevious answer: {previous}\n{instruction}" + END + ASSISTANT


def boxed(value: str) -> str:
    return f"The answer is \\boxed{{{value}}}."


def wrong_value(result: str, rng: np.random.Generator) -> str:
    """A plausible wrong result: off by 1, 2 or 10, or one digit changed; never equal to ``result``, never < 0."""
    r = int(result)
    while True:
        kind = rng.integers(4)
        if kind < 3:
            w = r + int(rng.choice([-1, 1])) * (1, 2, 10)[kind]
        else:
            digits = list(result)
            i = rng.integers(len(digits))
            digits[i] = str(rng.integers(10))
            w = int("".join(digits))
        if w != r and w >= 0:
            return str(w)


WIDTH = 3  # every number of the task has at most 3 digits (arithmetic_split's max_digits)


def _operands(expr) -> tuple[str, str, str]:
    a, op, b = re.fullmatch(r"(\d+)([-+*/])(\d+)", expr.text).groups()
    return a, op, b


def scratchpad(expr) -> str | None:
    """The digit-by-digit working of ``expr`` (a **synthetic format**), or ``None`` when it has none.

    Columns run from the units up, every number padded to :data:`WIDTH` digits, every step of fixed width, so that
    the digits a step needs sit at fixed distances behind it; the last part (after ``;``) is the padded result
    read off the steps. ``+`` ``digit+digit+carry=digit c carry``; ``-`` ``digit-digit-borrow=digit b borrow``;
    ``*`` by a one-digit factor ``digit*factor+carry=digit c carry`` (the other factor is the padded one);
    ``/`` by a one-digit divisor, long division ``(remainder digit)/divisor=quotient r remainder``. Products of two
    multi-digit factors and divisions by multi-digit divisors have no scratchpad (their responses state the
    result directly). E.g. ``48+24`` -> ``048+024: 8+4+0=2c1, 4+2+1=7c0, 0+0+0=0c0; 072``."""
    a, op, b = _operands(expr)
    if op in "+-":
        x, y = a.zfill(WIDTH), b.zfill(WIDTH)
        steps, c, digits = [], 0, ""
        for dx, dy in zip(map(int, reversed(x)), map(int, reversed(y))):
            v = dx + dy + c if op == "+" else dx - dy - c
            d, c_out = (v % 10, v // 10) if op == "+" else (v % 10, int(v < 0))
            steps.append(f"{dx}{op}{dy}{op}{c}={d}{'c' if op == '+' else 'b'}{c_out}")
            c, digits = c_out, str(d) + digits
        return f"{x}{op}{y}: " + ", ".join(steps) + f"; {digits}"
    if op == "*":
        n, m = (a, b) if len(b) == 1 else (b, a) if len(a) == 1 else (None, None)
        if n is None or len(n) > WIDTH:
            return None
        x, f = n.zfill(WIDTH), int(m)
        steps, c, digits = [], 0, ""
        for dx in map(int, reversed(x)):
            v = dx * f + c
            steps.append(f"{dx}*{f}+{c}={v % 10}c{v // 10}")
            c, digits = v // 10, str(v % 10) + digits
        return f"{x}*{f}: " + ", ".join(steps) + f"; {digits}"
    if len(b) != 1 or b == "0":
        return None
    x, dv = a.zfill(WIDTH), int(b)
    steps, r, digits = [], 0, ""
    for dx in map(int, x):
        q, r_new = divmod(10 * r + dx, dv)
        steps.append(f"{r}{dx}/{dv}={q}r{r_new}")
        r, digits = r_new, digits + str(q)
    return f"{x}/{dv}: " + ", ".join(steps) + f"; {digits}"


def _worked(expr, value: str) -> str:
    """The scratchpad (when the expression has one) and the line ``expr = value.``"""
    pad = scratchpad(expr)
    return (f"{pad}. " if pad else "") + f"{expr.text} = {value}."


def response(expr, style: str, rng: np.random.Generator | None = None, wrong: str | None = None) -> str:
    """A worked response in one of :data:`STYLES` (module docstring); ``wrong`` is the erroneous value, drawn
    with :func:`wrong_value` when not given (styles ``corrected`` and ``rebox``)."""
    e, r = expr.text, expr.result
    if style == "concise":
        return f"{_worked(expr, r)} {boxed(r)}"
    if style == "verbose":
        return f"Let me compute {e}. {_worked(expr, r)} Let me double-check: {e} = {r}. {boxed(r)}"
    if style not in STYLES:
        raise ValueError(f"unknown response style {style!r}; use one of {STYLES}")
    w = wrong if wrong is not None else wrong_value(r, rng if rng is not None else np.random.default_rng(0))
    if style == "corrected":
        return f"{e} = {w}. Wait, {_worked(expr, r)} {boxed(r)}"
    return f"{e} = {w}. {boxed(w)} Wait, that is wrong. {_worked(expr, r)} {boxed(r)}"


def concise_rewrite(expr, previous_final: str) -> str:
    """The refinement target: the concise style (scratchpad included) carrying the previous answer's final value."""
    return f"{_worked(expr, previous_final)} {boxed(previous_final)}"


def boxed_values(text: str) -> list[str]:
    """Contents of every balanced ``\\boxed{...}`` in order (nested braces allowed); an unbalanced box is skipped."""
    out, start = [], 0
    while (i := text.find("\\boxed{", start)) >= 0:
        depth, j = 1, i + len("\\boxed{")
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth == 0:
            out.append(text[i + len("\\boxed{") : j - 1])
        start = j if depth == 0 else i + 1
    return out


def final_answer(text: str) -> str | None:
    """The last balanced box's content, whitespace removed (``None`` when there is no box)."""
    values = boxed_values(text)
    return "".join(values[-1].split()) if values else None


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[str],
    *,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    seed: int | None = None,
    batch_size: int = 256,
) -> list[dict]:
    """Batched generation (left padding, Hugging Face ``generate``): for each prompt a dict with ``ids``
    (response tokens up to and including ``<eos>``), ``text`` (decoded, without ``<eos>``) and ``eos``
    (True when the response ended naturally within ``max_new_tokens``)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if seed is not None:
        torch.manual_seed(seed)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    tokenizer.padding_side = "left"
    out = []
    was_training = model.training
    model.eval()
    for b in range(0, len(prompts), batch_size):
        enc = tokenizer(prompts[b : b + batch_size], return_tensors="pt", padding=True, add_special_tokens=False).to(
            model.device
        )
        kwargs = (
            dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if do_sample else dict(do_sample=False)
        )
        gen = model.generate(**enc, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad, **kwargs)
        for row in gen[:, enc.input_ids.shape[1] :].tolist():
            ids = row[: row.index(eos) + 1] if eos in row else row
            ended = bool(ids) and ids[-1] == eos
            ids = [t for t in ids if t != pad] if not ended else ids
            out.append({"ids": ids, "text": tokenizer.decode(ids[:-1] if ended else ids), "eos": ended})
    model.train(was_training)
    return out


__all__ = [
    "ASSET_DIR",
    "ARCH",
    "CHARS",
    "LAYOUTS",
    "SPECIAL_TOKENS",
    "STYLES",
    "TAU",
    "boxed_values",
    "build_tokenizer",
    "boxed",
    "final_answer",
    "generate",
    "concise_rewrite",
    "config",
    "load",
    "question",
    "refine_prompt",
    "response",
    "scratchpad",
    "student_prompt",
    "teacher_prompt",
    "wrong_value",
]
