"""benchmarks/gpu_all.sh's plan (agentpost.run.gpu_plan): the committed predictions, the order, the budget rule, the
clean stop, and bad plans refused before anything runs. The CPU rehearsal of the whole command is
tests/e2e/test_gpu_all.py."""

from __future__ import annotations

import io
import sys
import tarfile
import textwrap
import time

import pytest
import yaml

from agentpost.errors import UsageError
from agentpost.project import project_root
from agentpost.run import gpu_plan
from agentpost.run.gpu_plan import Item, Plan, execute, item_minutes, load_plan, pack, prediction_table

ROOT = project_root()
sys.path.insert(0, str(ROOT / "benchmarks"))  # gpu_step_costs, the benchmark whose model the predictions use

SETTINGS = {"seeds": [42, 43, 44], "jobs": 3, "contention": 1.5, "overrun": 2.0, "reserve_s": 1, "grace_s": 5}


def quiet(*_, **__):
    pass


def test_every_a100_profile_is_predicted_to_fit_ten_minutes_per_seed():
    plan = load_plan()
    profiles = [i for i in plan.items if i.kind == "profile"]
    assert sorted(i.chapter for i in profiles) == sorted(p.parent.name for p in (ROOT / "params").glob("*/a100.yaml"))
    assert all(0 < i.minutes <= 10 for i in profiles), {i.name: i.minutes for i in profiles if i.minutes > 10}
    assert all("a100-hub" not in " ".join(i.argv) for i in plan.items)  # the lent machine has no network


def test_launch_cost_is_the_median_measured_on_the_first_gpu_run():
    """LAUNCH_US is the median of measured ms / counted launches over the seven steps the H200 run timed
    (benchmarks/receipts/2026-12-04-h200/gpu_step_costs.json; by hand: 25.6, 30.6, 32.0, 33.1, 36.7, 38.7, 39.8)."""
    import json
    import statistics

    import gpu_step_costs

    rows = json.loads((ROOT / "benchmarks/receipts/2026-12-04-h200/gpu_step_costs.json").read_text())["rows"]
    per_launch_us = sorted(r["measured_ms_batch1"] * 1e3 / r["launches"] for r in rows)
    assert [round(u, 1) for u in per_launch_us] == [25.6, 30.6, 32.0, 33.1, 36.7, 38.7, 39.8]
    assert gpu_step_costs.LAUNCH_US == pytest.approx(statistics.median(per_launch_us), abs=0.05)


def test_step_model_adds_launches_and_flops():
    """t = launches x LAUNCH_US + FLOPs / SUSTAINED_FLOPS; by hand for the tool LM update (759 launches, 750.5
    GFLOP): 759 x 33.1 us = 25.12 ms, 750.5e9 / 15e12 s = 50.03 ms, 75.16 ms in all."""
    import gpu_step_costs

    assert (gpu_step_costs.LAUNCH_US, gpu_step_costs.SUSTAINED_FLOPS) == (33.1, 15e12)
    assert gpu_step_costs.model_ms(759, 750.5e9) == pytest.approx(75.16, abs=0.01)
    assert gpu_step_costs.model_ms(238, 0.0) == pytest.approx(7.8778)  # 238 x 33.1 us


def test_order_is_kernels_then_benchmarks_then_trainings_then_profiles_by_predicted_minutes():
    plan = load_plan()
    kinds = [i.kind for i in plan.items]
    assert kinds[0] == "tests" and kinds == sorted(kinds, key=["tests", "bench", "train", "profile"].index)
    benches = [i.name for i in plan.items if i.kind == "bench"]
    assert benches[:3] == ["bench-actkv-kernels", "bench-deltas-kernel", "bench-kite-latency"]
    walls = [item_minutes(i, plan.settings) for i in plan.items if i.kind == "profile"]
    assert walls == sorted(walls)


def test_profile_minutes_scale_with_waves_and_contention_only_on_a_shared_gpu():
    gpu = Item("profile-x", "profile", 4.0, ("x",), None, chapter="x")
    cpu = Item("profile-y", "profile", 4.0, ("y",), None, chapter="y", cpu_only=True)
    assert item_minutes(gpu, SETTINGS) == pytest.approx(6.0)  # one wave of 3 seeds x 1.5
    assert item_minutes(cpu, SETTINGS) == pytest.approx(4.0)
    assert item_minutes(gpu, {**SETTINGS, "jobs": 2}) == pytest.approx(12.0)  # two waves x 1.5
    assert item_minutes(gpu, {**SETTINGS, "jobs": 1}) == pytest.approx(12.0)  # three waves, no sharing
    assert item_minutes(gpu, {**SETTINGS, "seeds": [42]}) == pytest.approx(4.0)  # one run: nothing shared
    assert item_minutes(gpu, SETTINGS, dry=True) == 0.0


def test_readme_shows_the_committed_prediction_table():
    assert prediction_table(load_plan()) in (ROOT / "README.md").read_text()


def _plan(*items: Item, **settings) -> Plan:
    return Plan({**SETTINGS, **settings}, items)


def _sleep(seconds: float, rc: int = 0) -> tuple[str, ...]:
    return (sys.executable, "-c", f"import sys, time; time.sleep({seconds}); sys.exit({rc})")


def test_items_that_do_not_fit_are_skipped_and_the_rest_still_run(tmp_path):
    plan = _plan(
        Item("big", "bench", 100.0, _sleep(0), _sleep(0)),
        Item("ok", "bench", 0.01, _sleep(0), _sleep(0)),
        Item("bad", "bench", 0.01, _sleep(0, rc=3), None),
        Item("lib", "bench", 0.01, _sleep(0), None, needs=("no_such_module_xyz",)),
    )
    out = {o.item.name: o for o in execute(plan, 60, tmp_path, say=quiet)}
    assert out["big"].status == "skipped" and "predicted 100.0 min >" in out["big"].note
    assert out["ok"].status == "done" and (tmp_path / "ok.log").read_text().startswith("$ ")
    assert sys.executable not in (tmp_path / "ok.log").read_text()  # no machine paths in a committed log
    assert out["bad"].status == "failed" and out["bad"].note == "exit 3"
    assert out["lib"].status == "skipped" and "no_such_module_xyz" in out["lib"].note


def test_an_item_past_its_overrun_is_stopped_with_sigint_and_the_plan_goes_on(tmp_path):
    slow = Item("slow", "bench", 0.02, _sleep(60), None)  # 1.2 s predicted -> stopped at 2.4 s
    after = Item("after", "bench", 0.01, _sleep(0), None)
    t0 = time.monotonic()
    out = execute(_plan(slow, after), 60, tmp_path, say=quiet)
    assert time.monotonic() - t0 < 20
    assert [o.status for o in out] == ["stopped", "done"]
    assert "2x its prediction" in out[0].note and "KeyboardInterrupt" in (tmp_path / "slow.log").read_text()


def test_dry_run_uses_the_dry_command_and_skips_items_without_one(tmp_path):
    marker = tmp_path / "dry.txt"
    dry = (
        sys.executable,
        "-c",
        f"import os, pathlib; pathlib.Path({str(marker)!r}).write_text("
        "os.environ['TRITON_INTERPRET'] + '|' + os.environ['CUDA_VISIBLE_DEVICES'])",
    )
    plan = _plan(Item("a", "tests", 1.0, _sleep(0, rc=9), dry), Item("b", "bench", 1.0, _sleep(0), None))
    out = execute(plan, 60, tmp_path, dry=True, say=quiet)
    assert [o.status for o in out] == ["done", "skipped"] and "no CPU dry-run sizes" in out[1].note
    assert marker.read_text() == "1|"


def test_dry_run_applies_no_budget_so_a_busy_cpu_cannot_stop_the_rehearsal(tmp_path):
    # a budget long spent (and predictions far beyond it) neither skips nor stops a rehearsed item
    plan = _plan(Item("a", "tests", 500.0, _sleep(0), _sleep(0.3)), Item("b", "bench", 500.0, _sleep(0), _sleep(0)))
    out = execute(plan, 0.001, tmp_path, dry=True, say=quiet)
    assert [(o.status, o.note) for o in out] == [("done", ""), ("done", "")]


def test_bundle_packs_every_output_but_the_table_into_pieces(tmp_path):
    for name, text in (("gpu_all.txt", "table"), ("a.log", "log"), ("r.json", "{}")):
        (tmp_path / name).write_text(text)
    pieces = pack(tmp_path, [], bundle=True)
    assert [p.name for p in pieces] == ["gpu-all.tar.gz.part0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu-all.tar.gz.part0", "gpu_all.txt"]
    with tarfile.open(fileobj=io.BytesIO(pieces[0].read_bytes())) as tar:
        assert sorted(tar.getnames()) == ["out/a.log", "out/r.json"]
    assert pack(tmp_path, [], bundle=False) == []  # without the bundle and no runs: nothing to pack


def test_the_plan_module_starts_on_a_bare_image():
    """It imports no package beyond the standard library, PyYAML and agentpost's project helpers at start-up (the
    lent GPU image has no pydantic, nbformat or papermill): a fresh interpreter shows which modules it loaded."""
    import subprocess

    code = "import sys; import agentpost.run.gpu_plan; print(sorted({m.split('.')[0] for m in sys.modules}))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for heavy in ("pydantic", "nbformat", "papermill", "torch", "pandas"):
        assert f"'{heavy}'" not in loaded, heavy


def _write_plan(tmp_path, text: str):
    path = tmp_path / "benchmarks" / "plan.yaml"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(text))
    return path


GOOD = """
settings: {seeds: [1, 2, 3], jobs: 3, contention: 1.5, overrun: 2, reserve_s: 10, grace_s: 5}
first:
  - {name: t, kind: tests, minutes: 1, basis: counted, argv: ["{py}", "-c", "0"]}
profiles: []
"""


@pytest.mark.parametrize(
    "old,new,culprit",
    [
        ("minutes: 1,", "minutes: -1,", "predicted minutes must be a positive number"),
        ("basis: counted,", "", "states its `basis`"),
        ("kind: tests", "kind: profile", "kind must be one of"),
        ("argv:", "argv: [], x:", "argv must be a non-empty list"),
        ("jobs: 3,", "", "settings: needs exactly"),
        ("seeds: [1, 2, 3]", "seeds: []", "settings.seeds"),
        ("minutes: 1,", "minutes: 1, colour: red,", "unknown keys ['colour']"),
    ],
)
def test_bad_plans_are_refused_naming_the_culprit(tmp_path, old, new, culprit):
    assert old in GOOD
    path = _write_plan(tmp_path, GOOD.replace(old, new))
    with pytest.raises(UsageError, match=culprit.replace("[", r"\[").replace("]", r"\]")):
        load_plan(path)


def test_a_plan_must_list_every_a100_profile(tmp_path):
    path = _write_plan(tmp_path, GOOD)
    (tmp_path / "params" / "kite").mkdir(parents=True)
    (tmp_path / "params" / "kite" / "a100.yaml").write_text(yaml.safe_dump({"parameters": {}}))
    with pytest.raises(UsageError, match=r"must list every params/\*/a100.yaml once: listed \[\], present \['kite'\]"):
        load_plan(path)


def test_list_prints_the_table_and_bad_arguments_exit_2(capsys):
    assert gpu_plan.main(["--list"]) == 0
    assert "profile-paired-protocol" in capsys.readouterr().out
    assert gpu_plan.main(["--only", "nope", "--dry-run-cpu"]) == 2
    assert "unknown items ['nope']" in capsys.readouterr().err
    assert gpu_plan.main(["--budget-s", "0", "--dry-run-cpu"]) == 2
    assert gpu_plan.main(["--seeds", "4x", "--dry-run-cpu"]) == 2
    assert "--seeds must be comma-separated integers, not '4x'" in capsys.readouterr().err
