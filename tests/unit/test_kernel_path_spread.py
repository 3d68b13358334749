"""benchmarks/kernel_path_spread.py --keep: another machine's paths are kept (named path@machine) beside this one's, so
a value's spread covers both CPUs."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernel_path_spread.py"
spec = importlib.util.spec_from_file_location("kernel_path_spread", SCRIPT)
kps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kps)


def test_earlier_paths_are_labelled_by_machine_and_merged_into_the_spread():
    old = {"device": {"name": "AMD EPYC"}, "paths": ["native"], "environments": {"native": {}},
           "values": {"x": {"spread": 0.0, "values": {"committed": 1.0, "native": 1.0}},
                      "s": {"same": True, "values": {"committed": "a", "native": "a"}}},
           "paired": [{"comparison": "c", "estimate": {"committed": 0.1, "native": 0.1}, "mde": 0.05,
                       "verdicts": {"committed": "better", "native": "better"}}]}
    flat, earlier, environments = kps.earlier_paths(old)
    assert flat == {"native@AMD EPYC": {"x": 1.0, "s": "a"}}           # the old committed column is not kept
    assert environments == {"native@AMD EPYC": {}} and earlier[0]["estimate"] == {"native@AMD EPYC": 0.1}
    rows = kps.spread_table({"committed": {"x": 1.25, "s": "a"}, "native@Intel": {"x": 1.5, "s": "a"}} | flat)
    assert rows["x"]["spread"] == 0.5 and rows["s"]["same"] is True
    merged = kps.merge_paired([{"comparison": "c", "estimate": {"native@Intel": 0.14}, "mde": 0.04,
                                "verdicts": {"native@Intel": "better"}}], earlier)[0]
    assert merged["estimate"] == {"native@AMD EPYC": 0.1, "native@Intel": 0.14} and merged["mde"] == 0.05
    assert abs(merged["estimate_spread"] - 0.04) < 1e-12 and merged["spread_below_mde"] is True
