"""ActKV engine benchmark (dense backend, CPU by default): decode token by token through a trace and report

1. peak KV entries per layer, per round, against the bound prefix + B + current round;
   (round r = the tokens between the r-th and (r+1)-th compression boundary, i.e. after each observation);
2. compression overhead (observe + score + select + compact) per round as a fraction of that round's decode time;
3. decode time per token with the compressed cache vs FullKV (ratio, same run, median of repeats).

Model: the project's tool LM (``agentpost.models.lm.load_tool_lm``) when its checkpoint is present, otherwise a
random-init model of the same architecture (reported as such). Traces: the longest of a few held-out tool traces
(synthetic format over real StableToolBench API docs) when ``agentpost.data.tooltraces`` is available, otherwise
a synthetic token stream of the same shape (reported as such).

    .venv/bin/python benchmarks/actkv_engine.py [--ratio 0.25] [--repeats 3] [--methods fullkv,actkv] [--out r.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch

from agentpost.actkv.diagnostic import DiagTrace, budget_for, diag_trace, round_bounds
from agentpost.actkv.engine import score_trace
from agentpost.actkv.policies import make_policy


def _model():
    try:
        from agentpost.models.lm import load_tool_lm

        model, tok = load_tool_lm()
        return model, tok, "tool-lm checkpoint"
    except (ImportError, FileNotFoundError):
        import transformers

        from agentpost.models.tokenizer import load_tokenizer

        try:
            from agentpost.models.lm import tool_lm_config

            cfg = tool_lm_config()
        except ImportError:
            cfg = transformers.Qwen3Config(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                           num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                                           max_position_embeddings=4096, tie_word_embeddings=True)
        torch.manual_seed(0)
        return transformers.Qwen3ForCausalLM(cfg).eval(), load_tokenizer(), "random-init stand-in (no checkpoint)"


def _trace(tok, n_candidates: int) -> tuple[DiagTrace, str]:
    try:
        from agentpost.actkv.diagnostic import load_heldout_traces

        traces = load_heldout_traces(tok, n_per_seed=n_candidates, seeds=(0,), rounds=4, distractors=2,
                                     max_doc_chars=300)[0]
        return max(traces, key=len), "held-out tool trace (synthetic format over real StableToolBench API docs)"
    except ImportError:
        g = torch.Generator().manual_seed(0)
        prefix = tok("<|im_start|>system\nsolve the task<|im_end|>\n", add_special_tokens=False).input_ids
        ids, spans = list(prefix), []
        for r in range(4):
            start = len(ids)
            obs = torch.randint(20, 4000, (400,), generator=g).tolist()
            text = f"</tool_response><|im_end|>\n<|im_start|>assistant\nthink<tool_call>{{\"name\": \"f{r}\"}}</tool_call>"
            ids += obs + tok(text, add_special_tokens=False).input_ids
            spans.append((start, len(ids)))
        return diag_trace("synthetic", ids, tok, len(prefix), spans), "SYNTHETIC token stream (no tooltraces module)"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratio", type=float, default=0.25)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--methods", default="fullkv,actkv")
    ap.add_argument("--candidates", type=int, default=3, help="held-out traces to pick the longest from")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="write a JSON receipt here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tok, model_label = _model()
    tr, trace_label = _trace(tok, args.candidates)
    budget = budget_for(tr, args.ratio)
    lay = tr.layout
    print(f"model: {model_label}; trace: {trace_label}; {len(tr)} tokens, prefix {lay.prefix_len}, "
          f"rounds {[b - a for a, b in lay.round_spans]}, B = {budget} ({args.ratio:.0%}); decode = 1 token/step")
    results = {}
    for method in args.methods.split(","):
        runs = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            res = score_trace(model, tr.ids, lay, make_policy(method), None if method == "fullkv" else budget,
                              chunk=1, compress_points=tr.compress_points)
            runs.append((res, time.perf_counter() - t0))
        st = [r.stats for r, _ in runs]
        per_round = []
        for r, peak, bound in round_bounds(runs[0][0], tr):  # round r: between compression boundaries r, r+1
            dec = statistics.median(s.decode_s[r] for s in st)
            ovh = statistics.median(s.overhead_s.get(r, 0.0) for s in st)
            per_round.append({"round": r, "tokens": st[0].tokens[r], "peak_entries": peak, "bound": bound,
                              "decode_ms_per_token": 1e3 * dec / st[0].tokens[r], "overhead_frac": ovh / dec})
        results[method] = {"per_round": per_round,
                           "decode_ms_per_token": statistics.median(r.decode_ms_per_token() for r, _ in runs),
                           "peak_entries": max(st[0].peak_entries.values()),
                           "wall_s_median": statistics.median(w for _, w in runs)}
    print(f"\n{'method':<13}{'round':>6}{'tokens':>8}{'peak':>7}{'bound':>7}{'ms/token':>10}{'overhead':>10}")
    for method, res in results.items():
        for row in res["per_round"]:
            print(f"{method:<13}{row['round']:>6}{row['tokens']:>8}{row['peak_entries']:>7}{row['bound']:>7}"
                  f"{row['decode_ms_per_token']:>10.3f}{row['overhead_frac']:>10.1%}")
    summary = {}
    if "fullkv" in results:
        base = results["fullkv"]["decode_ms_per_token"]
        for method, res in results.items():
            summary[method] = {"decode_ratio_vs_fullkv": res["decode_ms_per_token"] / base,
                               "peak_frac_vs_fullkv": res["peak_entries"] / results["fullkv"]["peak_entries"],
                               "max_round_overhead_frac": max(r["overhead_frac"] for r in res["per_round"]),
                               "peak_within_bound": all(r["peak_entries"] <= r["bound"] for r in res["per_round"])}
        print(f"\n{'method':<13}{'ms/token':>10}{'ratio':>8}{'peak/full':>11}{'max ovh':>9}  bound ok")
        for method, s in summary.items():
            print(f"{method:<13}{results[method]['decode_ms_per_token']:>10.3f}{s['decode_ratio_vs_fullkv']:>8.3f}"
                  f"{s['peak_frac_vs_fullkv']:>11.3f}{s['max_round_overhead_frac']:>9.1%}  {s['peak_within_bound']}")
    receipt = {"benchmark": "actkv_engine", "model": model_label, "trace": trace_label, "n_tokens": len(tr),
               "prefix_len": lay.prefix_len, "budget": budget, "ratio": args.ratio, "repeats": args.repeats,
               "threads": args.threads, "device": "cpu", "torch": torch.__version__, "python": platform.python_version(),
               "results": results, "summary": summary}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(receipt, fh, indent=2)
    return receipt


if __name__ == "__main__":
    main(sys.argv[1:])
