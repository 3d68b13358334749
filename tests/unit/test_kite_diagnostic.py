"""The KITE comparison's per-arm metadata and design, on a hand-built result (no training)."""

import numpy as np
import pytest

from agentpost.kite.diagnostic import DiagnosticResult, arm_meta, paired
from agentpost.stats.paired import ProtocolError


def _result(updates_kv=120):
    test = {"sst": {s: np.array([3.0, 3.1, 2.9, 3.2]) + 0.01 * s for s in (1, 2, 3)},
            "dense_kv": {s: np.array([3.2, 3.3, 3.0, 3.5]) + 0.01 * s for s in (1, 2, 3)}}
    runs = [{"arm": "sst", "lr": 0.01, "seed": s, "updates": 120} for s in (1, 2, 3)]
    runs += [{"arm": "dense_kv", "lr": 0.003, "seed": s, "updates": updates_kv} for s in (1, 2, 3)]
    runs += [{"arm": "dense_kv", "lr": 0.01, "seed": 1, "updates": 7}]  # a grid point that was not selected
    return DiagnosticResult({"sst": 0.01, "dense_kv": 0.003}, {}, test, runs)


def test_one_arm_meta_per_arm_from_its_own_runs():
    r = _result()
    a, b = arm_meta(r, "dense_kv", data_version="v"), arm_meta(r, "sst", data_version="v")
    assert a is not b and a.updates == b.updates == 120 and a.checkpoint == "from scratch"
    res = paired(r, "dense_kv", data_version="v", min_effect=0.02)
    # sst - dense_kv per article: [-0.2, -0.2, -0.1, -0.3] in every seed -> mean -0.2 (lower is better)
    assert res.estimate == pytest.approx(-0.2) and res.verdict == "better"


def test_arms_with_different_update_counts_are_refused():
    with pytest.raises(ProtocolError, match="updates"):
        paired(_result(updates_kv=119), "dense_kv", data_version="v", min_effect=0.02)
