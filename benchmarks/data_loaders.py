"""Load times of the public data sets through ``datasets`` (agentpost.data.hf) vs plain Python reading of the same file.

Each measurement is a fresh process (no in-process caches). ``plain``: the file read with ``json`` / ``str``
(the loaders' implementation before ``datasets``); ``cold``: ``datasets`` with an empty project cache (builds the
Arrow file); ``warm``: ``datasets`` again on that cache (memory-maps it). ``import datasets`` is timed on its own
(once per process, paid by the first loader that needs it). Prints the median of ``--repeats`` runs and the ratio
to ``plain``.

    python benchmarks/data_loaders.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from _table import record

LOADS = {
    "gsm8k train (json)": (
        "plain_json",
        "gsm8k",
        "train.jsonl",
        "from agentpost.data import gsm8k; gsm8k.problems('train')",
    ),
    "wikitext-2 train (text)": (
        "plain_text",
        "wikitext-2",
        "train.txt",
        "from agentpost.data import wikitext2; wikitext2.read_split('train')",
    ),
    "stabletoolbench queries (json)": (
        "plain_json",
        "stabletoolbench",
        "queries.jsonl",
        "from agentpost.data.hf import local_rows; from agentpost.data.registry import data_file; local_rows(data_file('stabletoolbench', 'queries.jsonl'), 'json').to_list()",
    ),
}
PLAIN = {
    "plain_json": "import json; from agentpost.data.registry import data_file\n"
    "with open(data_file({n!r}, {f!r}), encoding='utf-8') as fh: rows = [json.loads(l) for l in fh if l.strip()]",
    "plain_text": "from agentpost.data.registry import data_file; text = data_file({n!r}, {f!r}).read_text(encoding='utf-8')",
}
CHILD = """
import json, time
{setup}
t = time.perf_counter()
{load}
print(json.dumps(time.perf_counter() - t))
"""


def _time(code: str, cache: str, setup: str = "import agentpost.data.registry") -> float:
    env = {**os.environ, "AGENTPOST_CACHE": cache}
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(setup=setup, load=code)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        imports = [_time("import datasets", tmp, setup="") for _ in range(args.repeats)]
        record("data_loaders", "import datasets", imports, "s")
        print(f"import datasets: {statistics.median(imports):.2f} s (median of {args.repeats})\n")
        print(
            "| load | plain s | datasets cold s | datasets warm s | cold / plain | warm / plain |\n|---|---|---|---|---|---|"
        )
        for label, (plain, name, filename, load) in LOADS.items():
            setup = "import agentpost.data.registry, datasets"  # the import is timed above, not here
            plain_s, cold_s, warm_s = [], [], []
            for r in range(args.repeats):
                cache = os.path.join(tmp, f"{label}-{r}")
                plain_s.append(_time(PLAIN[plain].format(n=name, f=filename), cache, setup))
                cold_s.append(_time(load, cache, setup))
                warm_s.append(_time(load, cache, setup))
            p, c, w = (
                record("data_loaders", f"{label}: {kind}", xs, "s")["median"]
                for kind, xs in (("plain", plain_s), ("datasets cold", cold_s), ("datasets warm", warm_s))
            )
            print(f"| {label} | {p:.3f} | {c:.3f} | {w:.3f} | {c / p:.1f} | {w / p:.1f} |")


if __name__ == "__main__":
    main()
