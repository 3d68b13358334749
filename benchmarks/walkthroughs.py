"""Response time of the chapters' "Turn it by hand" sections on CPU: what a reader waits after moving a control.

Per chapter, two cases: ``render`` (the chapter's mechanism callback alone: the agentpost functions, the figure and
the table) and ``move`` (a control changed on a live :func:`agentpost.book.walkthrough.turn_by_hand` display: the
callback plus the figure's PNG and the table's HTML that the view shows). The moved control alternates between two
settings; median, p20 and p80 in milliseconds.

    .venv/bin/python benchmarks/walkthroughs.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import time

from _table import record

#: chapter -> (its walkthrough module, the notebook's default setting, the control moved and its other value)
CASES = {
    "graft": ("agentpost.graft.walkthrough", {"n_rollouts": 3, "gamma": 0.9}, ("n_rollouts", 6)),
    "madrl": ("agentpost.madrl.walkthrough", {"w0": 0.5, "w1": 0.3, "w2": 0.2}, ("w2", 0.6)),
    "opsd": ("agentpost.opsd.walkthrough", {"updates": 8, "ema_decay": 0.3, "sync_every": 2}, ("updates", 40)),
    "codeskills": (
        "agentpost.codeskills.walkthrough",
        {"n_skills": 6, "n_primitives": 19, "mode": "uniform", "decisions": 10},
        ("mode", "equal_mass"),
    ),
    "muser": ("agentpost.muser.walkthrough", {"angle_deg": 53.13, "tau": 0.1}, ("angle_deg", 20.0)),
    "paired-protocol": (
        "agentpost.protocol.walkthrough",
        {"effect": 0.3, "margin": 0.2, "seeds": 3, "items": 30},
        ("seeds", 10),
    ),
}


def _control(value):
    import ipywidgets as widgets

    kind = {bool: widgets.Checkbox, int: widgets.IntText, float: widgets.FloatText, str: widgets.Text}[type(value)]
    return kind(value=value)


def ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - t0)


def main() -> None:
    import importlib

    import matplotlib

    matplotlib.use("Agg")
    from agentpost.book.walkthrough import turn_by_hand

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print(f"{'chapter':12} {'render ms':>10} {'move ms':>10}   (median of {args.repeats})")
    for chapter, (module, defaults, (name, other)) in CASES.items():
        render = importlib.import_module(module).render
        settings = [defaults, {**defaults, name: other}]
        walk = turn_by_hand(render, **{k: _control(v) for k, v in defaults.items()})
        render_ms = [ms(lambda i=i: render(**settings[i % 2])) for i in range(args.repeats)]
        control = walk.controls[name]
        move_ms = [ms(lambda i=i: setattr(control, "value", settings[(i + 1) % 2][name])) for i in range(args.repeats)]
        r = record("walkthroughs", f"{chapter} render", render_ms, "ms")["median"]
        m = record("walkthroughs", f"{chapter} move", move_ms, "ms")["median"]
        print(f"{chapter:12} {r:10.1f} {m:10.1f}")


if __name__ == "__main__":
    main()
