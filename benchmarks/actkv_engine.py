"""ActKV engine benchmark (dense backend, CPU by default): decode token by token through a trace and report

1. peak KV entries per layer, per round, against the bound prefix + B + current round;
   (round r = the tokens between the r-th and (r+1)-th compression boundary, i.e. after each observation);
2. compression overhead (observe + score + select + compact) per round as a fraction of that round's decode time;
3. decode time per token with the compressed cache vs FullKV (ratio, same run, median of repeats).

Model: the project's tool LM (``agentpost.models.lm.load_tool_lm``) when its checkpoint is present, otherwise a
random-init model of the same architecture (reported as such). Trace: the longest of a few held-out tool traces
(:mod:`agentpost.data.tool_traces`: synthetic format over real StableToolBench API docs).

    .venv/bin/python benchmarks/actkv_engine.py [--ratio 0.25] [--repeats 3] [--methods fullkv,actkv] [--out r.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

import torch
import transformers
from _table import emit

from agentpost.actkv.diagnostic import DiagTrace, decode_profile, load_heldout_traces
from agentpost.models.lm import load_tool_lm, tool_lm_config
from agentpost.models.tokenizer import load_tokenizer


def _model():
    try:
        model, tok = load_tool_lm()
        return model, tok, "tool-lm checkpoint"
    except FileNotFoundError:
        torch.manual_seed(0)
        model = transformers.Qwen3ForCausalLM(tool_lm_config()).eval()
        return model, load_tokenizer(), "random-init stand-in (no checkpoint)"


#: Trace shapes (rounds, distractors, max_doc_chars): the chapter's default and a short one for quick runs.
SHAPES = {"default": (4, 2, 300), "short": (3, 1, 100)}


def _trace(tok, n_candidates: int, shape: str) -> tuple[DiagTrace, str]:
    rounds, distractors, max_doc_chars = SHAPES[shape]
    traces = load_heldout_traces(
        tok, n_traces=n_candidates, seed=0, rounds=rounds, distractors=distractors, max_doc_chars=max_doc_chars
    )
    return max(traces, key=len), "held-out tool trace (synthetic format over real StableToolBench API docs)"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratio", type=float, default=0.25)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--methods", default="fullkv,actkv")
    ap.add_argument("--candidates", type=int, default=3, help="held-out traces to pick the longest from")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="default", help="trace shape (short: quick runs)")
    ap.add_argument("--out", default=None, help="write a JSON receipt here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tok, model_label = _model()
    tr, trace_label = _trace(tok, args.candidates, args.shape)
    prof = decode_profile(model, tr, args.ratio, methods=args.methods.split(","), repeats=args.repeats)
    lay = tr.layout
    print(
        f"model: {model_label}; trace: {trace_label}; {len(tr)} tokens, prefix {lay.prefix_len}, "
        f"rounds {[b - a for a, b in lay.round_spans]}, B = {prof['budget']} ({args.ratio:.0%}); "
        f"decode = 1 token/step; medians of {args.repeats} runs"
    )
    print(f"\n{'method':<13}{'round':>6}{'tokens':>8}{'peak':>7}{'bound':>7}{'ms/token':>10}{'overhead':>10}")
    for method, res in prof["methods"].items():
        for row in res["per_round"]:
            print(
                f"{method:<13}{row['round']:>6}{row['tokens']:>8}{row['peak_entries']:>7}{row['bound']:>7}"
                f"{row['decode_ms_per_token']:>10.3f}{row['overhead_frac']:>10.1%}"
            )
    print(f"\n{'method':<13}{'ms/token':>10}{'ratio':>8}{'peak/full':>11}{'max ovh':>9}  bound ok")
    for method, res in prof["methods"].items():
        print(
            f"{method:<13}{res['decode_ms_per_token']:>10.3f}{res.get('decode_ratio_vs_fullkv', float('nan')):>8.3f}"
            f"{res.get('peak_frac_vs_fullkv', float('nan')):>11.3f}{res['max_round_overhead_frac']:>9.1%}"
            f"  {res['peak_within_bound']}"
        )
        # decode_profile keeps the median over repeats only: p20/p80 are NaN in the long table.
        emit(
            "actkv_engine",
            f"{method} B={args.ratio:.0%} decode/token",
            res["decode_ms_per_token"],
            float("nan"),
            float("nan"),
            "ms",
        )
    receipt = {
        "benchmark": "actkv_engine",
        "model": model_label,
        "trace": trace_label,
        "repeats": args.repeats,
        "threads": args.threads,
        "device": "cpu",
        "torch": torch.__version__,
        "python": platform.python_version(),
        **prof,
    }
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(receipt, fh, indent=2)
    return receipt


if __name__ == "__main__":
    main(sys.argv[1:])
