"""benchmarks/_table.py (the long-format rows of `make bench`) and the coverage of benchmarks/run_all.py."""

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import _table  # noqa: E402
import run_all  # noqa: E402


def test_quantiles_by_hand():
    # 1..10: median 5.5; p20 at rank 0.2 * 9 = 1.8 -> 2 + 0.8 = 2.8; p80 at 7.2 -> 8.2 (linear, numpy's default).
    assert _table.quantiles(range(1, 11)) == pytest.approx((5.5, 2.8, 8.2))
    assert _table.quantiles([3.0]) == (3.0, 3.0, 3.0)
    lo, _, _ = _table.quantiles([0.0008, 0.0007, 0.022])  # never below the smallest sample
    assert lo >= 0.0007
    with pytest.raises(ValueError, match="at least one sample"):
        _table.quantiles([])


def test_record_appends_one_json_row_when_asked(tmp_path, monkeypatch):
    rows = tmp_path / "rows.jsonl"
    monkeypatch.setenv(_table.ROWS_ENV, str(rows))
    row = _table.record("bench", "case A", [1.0, 2.0, 3.0], "ms")
    _table.emit("bench", "case B", 4.0, float("nan"), float("nan"), "ms", "cuda")
    got = [json.loads(line) for line in rows.read_text().splitlines()]
    assert [r["case"] for r in got] == ["case A", "case B"] and got[0] == row
    assert list(row) == list(_table.COLUMNS) and row["median"] == 2.0 and got[1]["device"] == "cuda"
    table = _table.format_table(got).splitlines()
    assert table[0].split() == list(_table.COLUMNS) and "case A" in table[1] and "nan" in table[2]


def test_every_benchmark_script_is_run_or_excluded_with_a_reason():
    scripts = run_all.scripts()
    assert "kernel_path_spread.py" not in scripts and "kernel_path_spread.py" in run_all.EXCLUDED
    on_disk = {p.name for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.name != "run_all.py"}
    assert set(scripts) | set(run_all.EXCLUDED) == on_disk
