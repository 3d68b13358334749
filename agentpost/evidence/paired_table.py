"""The one table form of paired comparisons, read from receipts (what :func:`~agentpost.evidence.glue_paired` records).

Every comparison a chapter records with ``glue_paired`` lands in each run's receipt as the dict form of
:class:`agentpost.stats.paired.PairedResult`; the evidence pages and the ledger render all of them with
:func:`paired_rows`, and the ledger's outcome note reads each verdict with :func:`paired_outcome`.
"""

from __future__ import annotations

from typing import Iterable

from agentpost.evidence.escape import code, escape_cell

#: Keys a recorded comparison must carry to be rendered (the v2 ``PairedResult.as_dict()``).
REQUIRED = (
    "name_a",
    "name_b",
    "estimate",
    "ci_low",
    "ci_high",
    "mde",
    "min_effect",
    "verdict",
    "variance_components",
    "n_seeds",
    "n_items",
    "design",
)

HEADER = (
    "| chapter | profile | run seed | comparison (b − a) | estimate | 95% CI | MDE@80% | smallest effect "
    "| verdict | var. seed / item / residual | seeds × items |"
)


def is_paired(value) -> bool:
    """Whether a recorded metric is a paired comparison in the v2 dict form."""
    return isinstance(value, dict) and all(k in value for k in REQUIRED)


def _num(x, spec: str = ".3g") -> str:
    if x is None:
        return "—"
    return format(x, spec) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def paired_outcome(value: dict) -> str:
    """One comparison as the ledger's outcome note: verdict, estimate and CI against the smallest effect."""
    return (
        f"{value['verdict']} ({value['name_b']} − {value['name_a']} {_num(value['estimate'], '+.3g')}, "
        f"95% CI [{_num(value['ci_low'], '+.3g')}, {_num(value['ci_high'], '+.3g')}], "
        f"MDE {_num(value['mde'])} vs smallest effect {_num(value['min_effect'])})"
    )


def paired_rows(receipts: Iterable[dict]) -> str:
    """Markdown table of every paired comparison recorded in ``receipts``; empty string when there is none.

    One row per (receipt, comparison), ordered by chapter, profile, comparison name and seed.
    """
    rows = []
    for rec in receipts:
        for name, v in (rec.get("metrics") or {}).items():
            if is_paired(v):
                rows.append((rec.get("chapter", ""), rec.get("profile", ""), name, rec.get("seed", ""), v))
    if not rows:
        return ""
    lines = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    for chapter, profile, name, seed, v in sorted(rows, key=lambda r: tuple(map(str, r[:4]))):
        vc = v["variance_components"] if isinstance(v["variance_components"], dict) else {}
        shape = f"{v['n_seeds']} × {v['n_items']} {'shared' if v['design'] == 'crossed' else 'nested'}"
        cells = [
            chapter,
            profile,
            seed,
            None,
            _num(v["estimate"], "+.4g"),
            None,
            _num(v["mde"]),
            _num(v["min_effect"]),
            None,
            f"{_num(vc.get('seed'))} / {_num(vc.get('item'))} / {_num(vc.get('residual'))}",
            shape,
        ]
        text = [escape_cell(c) for c in cells]  # everything recorded by a run is text, never markup
        text[3] = f"{code(name)} ({escape_cell(v['name_b'])} − {escape_cell(v['name_a'])})"
        text[5] = f"[{escape_cell(_num(v['ci_low'], '+.4g'))}, {escape_cell(_num(v['ci_high'], '+.4g'))}]"
        text[8] = f"**{escape_cell(v['verdict'])}**"
        lines.append("| " + " | ".join(text) + " |")
    return "\n".join(lines) + "\n"
