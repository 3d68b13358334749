"""Kernel launches of the actkv ``a100`` profile's work on one held-out trace, counted on the CPU.

Behind the actkv basis in ``benchmarks/gpu_predictions.yaml``: the chapter's teacher-forced scoring
(:func:`agentpost.actkv.diagnostic.run_method`, FullKV + the grid's 8 arms at one budget ratio, the profile's chunk)
and its token-by-token decode profile (FullKV and ActKV at ``compare_ratio``) are run on the longest of the seed's
first ``--traces`` traces under :class:`gpu_step_costs.CountLaunches` (non-view ATen operators: the model's forwards
and the policies' own scoring and compaction), and model forwards are counted with a hook. Multiplied by the
measured cost per launch (``gpu_step_costs.LAUNCH_US``) this predicts the profile's GPU time; the model is tiny, so
its FLOPs are negligible. Needs the tool LM checkpoint and the StableToolBench data (``AGENTPOST_DATA``); about
three minutes of one CPU core.

    python benchmarks/actkv_launch_count.py [--profile a100] [--traces 2] [--seed 42] [--no-decode]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_step_costs import LAUNCH_US, CountLaunches  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="a100")
    ap.add_argument("--traces", type=int, default=2, help="traces drawn; the longest is counted")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument(
        "--no-decode", action="store_true", help="skip the token-by-token decode profile (most of the time)"
    )
    args = ap.parse_args(argv)
    from agentpost.actkv import diagnostic as diag

    torch.set_num_threads(1)
    p = yaml.safe_load((ROOT / "params" / "actkv" / f"{args.profile}.yaml").read_text())["parameters"]
    model, tok, _ = diag.load_diagnostic_model(p["model_name"], device="cpu")
    traces = diag.load_heldout_traces(
        tok,
        split=p["split"],
        n_traces=args.traces,
        seed=args.seed,
        rounds=p["trace_rounds"],
        distractors=p["trace_distractors"],
        max_doc_chars=p["max_doc_chars"],
        boundary=p["boundary"],
    )
    trace = max(traces, key=len)
    policy_kwargs = {
        "actkv": {"p": p["nucleus_p"], "decay": p["lrfu_decay"], "head_reduce": p["head_reduce"]},
        "streamingllm": {"n_sink": p["streaming_sinks"]},
        "h2o": {"recent_fraction": p["h2o_recent_fraction"]},
        "snapkv": {"window": p["snapkv_window"], "kernel": p["snapkv_kernel"], "pool": p["snapkv_pool"]},
        "rkv": {"window": p["rkv_window"], "mix_lambda": p["rkv_lambda"]},
    }
    forwards = [0]
    model.register_forward_pre_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))

    def counted(method, ratio, chunk, **kw):
        counter = CountLaunches()
        forwards[0] = 0
        with counter:
            diag.run_method(
                model,
                trace,
                method,
                ratio,
                chunk=chunk,
                policy_kwargs=policy_kwargs,
                budget_reading=p["budget_reading"],
                **kw,
            )
        return counter.n, forwards[0]

    ratio = p["compare_ratio"]
    arms = [("fullkv", "fullkv", None, {})] + [(m, m, ratio, {}) for m in diag.BASELINES + ("actkv",)]
    arms += [("actkv+budget", "actkv", ratio, {"adaptive_budget": True})]
    arms += [(arm, m, ratio, {"variant_kwargs": kw}) for arm, (m, kw) in diag.VARIANTS.items()]
    print(f"trace {trace.trace_id}: {len(trace)} tokens (of {[len(t) for t in traces]}); chunk {p['chunk']}")
    total = 0
    for arm, method, r, kw in arms:
        n, f = counted(method, r, p["chunk"], **kw)
        total += n
        print(f"  scoring {arm:18} {n:8d} launches {f:4d} forwards ({n / f:.0f} per forward)", flush=True)
    print(
        f"  scoring, FullKV + {len(arms) - 1} arms at one ratio: {total} launches = {total * LAUNCH_US / 1e6:.1f} s "
        f"at {LAUNCH_US} us per launch",
        flush=True,
    )
    if not args.no_decode:
        for method in ("fullkv", "actkv"):
            n, f = counted(method, None if method == "fullkv" else ratio, 1)
            print(f"  decode {method:8} {n:8d} launches {f:5d} forwards = {n * LAUNCH_US / 1e6:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
