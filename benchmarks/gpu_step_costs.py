"""Per-step costs behind ``benchmarks/gpu_predictions.yaml``, counted on the CPU: kernel launches and FLOPs of one step.

For each named step (a training update or a one-token decode of a model at its ``a100`` profile's shape) this counts,
in one execution on the CPU, the ATen operators dispatched that are not views (on CUDA each launches about one
kernel in eager mode) and the FLOPs (``torch.utils.flop_counter``), then predicts the step's time on one H200:

    t_step = launches x LAUNCH_US + FLOPs / SUSTAINED_FLOPS

LAUNCH_US = 33.1 us is the eager PyTorch cost per operator when the GPU is idle between kernels (CPU-side dispatch
plus ``cudaLaunchKernel``: the regime of every model in this project). It is MEASURED: the first GPU run (one H200,
2026-12-04, torch 2.11, receipt benchmarks/receipts/2026-12-04-h200/gpu_step_costs.json) timed the seven steps then
in ``steps()`` (the two generate calls came after) at batch 1, where each is launch-bound, and measured milliseconds
/ counted launches gave 25.6 us (KITE SST update) to 39.8 us (OPSD update) per launch: tool LM update 36.7, decode
38.7; OPSD update 39.8, decode 32.0; MaD-RL decode 30.6; KITE update 25.6; DeltaS hybrid update 33.1; LAUNCH_US is
their median (the mean is 33.8; the batch-1 FLOPs, at most 2.6 ms of a step at the rate below, are left in, so it
slightly over-counts). The 10 us assumed before that run was 3.3x too low. SUSTAINED_FLOPS = 15 TFLOP/s stays an
ASSUMPTION (no step was timed at a batch where FLOPs dominate): about a quarter of the H200's fp32 (non-tensor-core)
peak of 67 TFLOP/s, the rate small eager fp32 matrices reach (torch leaves TF32 off for matmuls by default).
Counting is exact; the seconds are a model.

Training steps are counted at batch 1 (launches do not grow with the batch; FLOPs are scaled by the batch). The
counts do not depend on the machine, only on torch and transformers versions. With ``--device cuda`` each step is
also built on the GPU and timed (CUDA events, median of 5 calls after 2 warm-ups, at the counted batch of 1), which
checks the launch term of the model (benchmarks/gpu_all.sh runs it first thing on a lent GPU).

    python benchmarks/gpu_step_costs.py [--only NAME ...] [--device cpu|cuda] [--out costs.json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LAUNCH_US = 33.1  # us per launch: median of the 2026-12-04 H200 run's seven steps (docstring)
SUSTAINED_FLOPS = 15e12


def model_ms(launches: int, flops: float) -> float:
    """The model's milliseconds of one step: ``launches x LAUNCH_US + FLOPs / SUSTAINED_FLOPS`` (module docstring)."""
    return launches * LAUNCH_US / 1e3 + flops / SUSTAINED_FLOPS * 1e3


class CountLaunches(TorchDispatchMode):
    """Counts dispatched ATen operators that are not views (a view launches no kernel)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func.namespace == "aten":
            self.n += 1
        return func(*args, **(kwargs or {}))


def count(step) -> tuple[int, float]:
    """(launches, FLOPs) of one call of ``step`` (after one warm-up call, so lazy initialisation is not counted)."""
    step()
    counter = CountLaunches()
    flops = FlopCounterMode(display=False)
    with flops, counter:
        step()
    return counter.n, float(flops.get_total_flops())


def time_ms(step, device: str, repeats: int = 5) -> float | None:
    """Median GPU milliseconds of one call of ``step`` (CUDA events; None on the CPU, where it would mean nothing)."""
    if device != "cuda":
        return None
    for _ in range(2):
        step()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _train_step(model, batch_fn):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def step():
        loss = batch_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _qwen3(cfg):
    import transformers

    torch.manual_seed(0)
    return transformers.Qwen3ForCausalLM(cfg)


def _decode_step(model, batch: int, context: int, device: str):
    """One cached decode token of an HF causal LM for ``batch`` rows after ``context`` tokens."""
    model = model.to(device).eval()
    # transformers >= 5.2x names the cache `cache`; older releases (the GPU image's) `past_key_values`
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    ids = torch.randint(2, model.config.vocab_size, (batch, context), device=device)
    with torch.no_grad():
        past = getattr(model(input_ids=ids, use_cache=True), name)
    tok = ids[:, -1:]

    def step():
        with torch.no_grad():
            model(input_ids=tok, use_cache=True, logits_to_keep=1, **{name: past})
            past.crop(-1)  # drop the token again: every call decodes at the same length

    return step


def _generate_step(model, batch: int, context: int, new_tokens: int, sample: bool, device: str):
    """One Hugging Face ``generate`` call of exactly ``new_tokens`` tokens for ``batch`` rows after ``context`` tokens:
    the prefill, one forward per further token, and generate's own per-token operators (sampling, stopping checks)."""
    model = model.to(device).eval()
    ids = torch.randint(2, model.config.vocab_size, (batch, context), device=device)
    kwargs = dict(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=sample, pad_token_id=0, eos_token_id=1
    )

    def step():
        with torch.no_grad():
            model.generate(ids, **kwargs)

    return step


def _lm_train(model, seq_len: int, device: str):
    model = model.to(device)
    ids = torch.randint(2, model.config.vocab_size, (1, seq_len), device=device)
    return _train_step(model, lambda: model(input_ids=ids, labels=ids).loss)


def _kite_sst(device: str):
    from agentpost.kite.model import build

    model = build("sst", d_model=256, n_heads=4, d_ff=1024, n_prefill=2, n_decode=2).to(device)
    tokens = torch.randint(0, 4096, (1, 256), device=device)
    return _train_step(model, lambda: torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()))


def _deltas_hybrid_model(device: str):
    from agentpost.deltas.hybrid import HybridConfig, HybridForCausalLM

    h = 256  # params/deltas/a100.yaml lm_hidden_size, sized as the notebook does
    return HybridForCausalLM(
        HybridConfig(
            hidden_size=h, intermediate_size=3 * h, linear_num_heads=h // 64, num_attention_heads=h // 64, head_dim=64
        )
    ).to(device)


def _deltas_hybrid(device: str):
    model = _deltas_hybrid_model(device)
    ids = torch.randint(0, 4096, (1, 1024), device=device)
    return _train_step(model, lambda: model(ids, labels=ids).loss)


def _deltas_hybrid_chunk(device: str):
    """One 32-token prefix chunk read on a state that holds 960 tokens (the a100 geometry's last chunk)."""
    model = _deltas_hybrid_model(device).eval()
    with torch.no_grad():
        state = model(torch.randint(0, 4096, (1, 960), device=device)).state
    ids = torch.randint(0, 4096, (1, 32), device=device)

    def step():
        with torch.no_grad():
            model(ids, state=state)

    return step


def steps() -> dict:
    """name -> (what, batch the FLOPs are scaled by, builder of the step on a device)."""
    from agentpost.models import arith_lm
    from agentpost.models.lm import tool_lm_config

    def opsd_lm():
        arch = {
            "hidden_size": 256,
            "intermediate_size": 768,
            "num_hidden_layers": 6,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "head_dim": 32,
        }  # params/opsd/a100.yaml pretrain_arch
        return _qwen3(arith_lm.config(**arch))

    def annotation_lm():
        from agentpost.madrl.annotation_lm import load_annotation_lm

        return load_annotation_lm()[0]

    return {
        "tool_lm_train_1024": (
            "tool LM (3.8 M) update, one 1024-token row (codeskills SFT)",
            32,
            lambda d: _lm_train(_qwen3(tool_lm_config()), 1024, d),
        ),
        "tool_lm_decode": (
            "tool LM one decode token after 1024 (codeskills controller, actkv)",
            1,
            lambda d: _decode_step(_qwen3(tool_lm_config()), 1, 1024, d),
        ),
        "opsd_lm_train_160": (
            "OPSD a100 LM (6 layers, 256 wide) update, one 160-token row",
            32,
            lambda d: _lm_train(opsd_lm(), 160, d),
        ),
        "opsd_lm_decode": (
            "OPSD a100 LM one decode token, 32 rows after 64",
            1,
            lambda d: _decode_step(opsd_lm(), 32, 64, d),
        ),
        "opsd_lm_generate_16": (
            "OPSD a100 LM generate call, 32 rows after 64, 16 sampled tokens (an OPSD rollout)",
            1,
            lambda d: _generate_step(opsd_lm(), 32, 64, 16, True, d),
        ),
        "tool_lm_generate_6": (
            "tool LM generate call, 1024-token prompt + 6 greedy tokens (a codeskills decision)",
            1,
            lambda d: _generate_step(_qwen3(tool_lm_config()), 1, 1024, 6, False, d),
        ),
        "madrl_lm_decode": (
            "MaD-RL annotation LM one decode token, 128 rows after 96 (one copy)",
            1,
            lambda d: _decode_step(annotation_lm(), 128, 96, d),
        ),
        "kite_sst_train_256": ("KITE SST (d 256, 2+2) update, one 256-token row", 32, _kite_sst),
        "deltas_hybrid_train_1024": ("DeltaS hybrid LM (d 256) update, one 1024-token row", 16, _deltas_hybrid),
        "deltas_hybrid_chunk_32": (
            "DeltaS hybrid LM (d 256) forward of one 32-token chunk on 960 cached tokens",
            1,
            _deltas_hybrid_chunk,
        ),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", default=None, metavar="NAME")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda also times each step")
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    table = steps()
    if unknown := sorted(set(args.only or []) - set(table)):
        raise SystemExit(f"unknown steps {unknown}; known: {sorted(table)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    torch.set_num_threads(1)
    rows = []
    print(f"{'step':26} {'launches':>8} {'GFLOP':>8} {'batch':>5} {'model ms':>8} {'GPU ms':>7}  what")
    for name, (what, batch, build) in table.items():
        if args.only and name not in args.only:
            continue
        try:
            launches, flops = count(build("cpu"))
            measured = time_ms(build(args.device), args.device)
        except Exception as e:  # one step that breaks (a library version) is reported; the others still run
            print(f"{name:26} failed: {type(e).__name__}: {e}", flush=True)
            rows.append({"step": name, "what": what, "failed": f"{type(e).__name__}: {e}"})
            continue
        flops *= batch
        ms = model_ms(launches, flops)
        rows.append(
            {
                "step": name,
                "what": what,
                "launches": launches,
                "gflop": flops / 1e9,
                "batch": batch,
                "model_ms": ms,
                "measured_ms_batch1": measured,
                "device": args.device,
            }
        )
        shown = "-" if measured is None else f"{measured:7.1f}"
        print(f"{name:26} {launches:8d} {flops / 1e9:8.1f} {batch:5d} {ms:8.1f} {shown:>7}  {what}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"launch_us": LAUNCH_US, "sustained_flops": SUSTAINED_FLOPS, "rows": rows}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
