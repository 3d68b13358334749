"""benchmarks/kernel_path_spread.py --keep: another machine's paths are kept (named path@machine) beside this one's, so
a value's spread covers both CPUs."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernel_path_spread.py"
spec = importlib.util.spec_from_file_location("kernel_path_spread", SCRIPT)
kps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kps)


def test_earlier_paths_are_labelled_by_machine_and_merged_into_the_spread():
    old = {
        "device": {"name": "AMD EPYC"},
        "paths": ["native"],
        "environments": {"native": {}},
        "values": {"x": {"spread": 0.2}, "s": {"values": ["a"]}, "gone": {"spread": 0.1}},
        "paired": [
            {
                "comparison": "c",
                "estimate": {"committed": 0.1, "native": 0.1},
                "mde": 0.05,
                "verdicts": {"committed": "better", "native": "better"},
            }
        ],
    }
    rows, earlier, environments = kps.earlier_paths(old)
    assert environments == {"native@AMD EPYC": {}} and earlier[0]["estimate"] == {"native@AMD EPYC": 0.1}
    new = kps.spread_table({"committed": {"x": 1.25, "s": "a"}, "native@Intel": {"x": 1.5, "s": "b"}})
    assert new == {"x": {"spread": 0.25}, "s": {"values": ["a", "b"]}}
    assert kps.merge_rows(new, rows) == {"x": {"spread": 0.25}, "s": {"values": ["a", "b"]}, "gone": {"spread": 0.1}}
    merged = kps.merge_paired(
        [{"comparison": "c", "estimate": {"native@Intel": 0.14}, "mde": 0.04, "verdicts": {"native@Intel": "better"}}],
        earlier,
    )[0]
    assert merged["estimate"] == {"native@AMD EPYC": 0.1, "native@Intel": 0.14} and merged["mde"] == 0.05
    assert abs(merged["estimate_spread"] - 0.04) < 1e-12 and merged["spread_below_mde"] is True


def test_the_items_of_a_list_share_their_largest_spread_and_strings_keep_every_value():
    per_path = {
        "committed": {"o": {"arms": {"a": [1.0, 2.0]}}, "v": ["x", "y"]},
        "avx2": {"o": {"arms": {"a": [1.1, 2.5]}}, "v": ["x", "z"]},
    }
    rows = kps.spread_table(per_path)
    assert rows["o.arms.a[*]"]["spread"] == 0.5 and rows["v[*]"] == {"values": ["x", "y", "z"]}
