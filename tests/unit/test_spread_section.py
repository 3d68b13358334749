"""The evidence page's machine-spread table reads book/spread/<chapter>.json."""

import json

from agentpost.evidence.spread import spread_section


def test_spread_section_flags_a_comparison_whose_estimate_moves_more_than_its_mde(tmp_path):
    (tmp_path / "book" / "spread").mkdir(parents=True)
    measurement = {
        "seed": 42,
        "paths": ["avx2"],
        "paired": [
            {
                "comparison": "paired_a_vs_b",
                "estimate": {"committed": -0.109, "avx2": -0.155},
                "estimate_spread": 0.046,
                "mde": 0.026,
                "verdicts": {"committed": "better", "avx2": "better"},
                "spread_below_mde": False,
            },
            {
                "comparison": "paired_c_vs_d",
                "estimate": {"committed": 0.5, "avx2": 0.5},
                "estimate_spread": 0.0,
                "mde": 0.1,
                "verdicts": {"committed": "worse", "avx2": "worse"},
                "spread_below_mde": True,
            },
        ],
    }
    (tmp_path / "book" / "spread" / "kite.json").write_text(json.dumps(measurement))
    lines = spread_section(tmp_path, "kite")
    rows = [line for line in lines if line.startswith("| `")]
    assert rows[0] == "| `paired_a_vs_b` | -0.109 | -0.155 | 0.046 | 0.026 | **no** | better |"
    assert rows[1] == "| `paired_c_vs_d` | 0.5 | 0.5 | 0 | 0.1 | yes | worse |"
    assert spread_section(tmp_path, "actkv") == []
