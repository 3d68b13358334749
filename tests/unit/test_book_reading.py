"""What a reader meets on the generated pages (issue 52): tables that fit the column, verdicts coloured by what they
say, the profiles with runs first, no ``nan``, no progress bars, TeX typeset rather than shown as text."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentpost.catalogue import Comparison, chapter
from agentpost.evidence.comparison_pages import (
    VERDICT_COLOURS,
    comparison_details,
    comparison_table,
    forest_plot,
    seed_list,
    verdict_colour,
)
from agentpost.evidence.comparisons import Computed, compute_one
from agentpost.evidence.metrics_summary import metrics_section, summary
from agentpost.evidence.verdicts import by_evidence, verdicts_notebook
from tests.e2e.page_text import tex_as_text
from tests.unit.test_outcomes import COMP, fake_run


def _result(estimate, lo, hi, verdict, cls, mde=0.05, seeds=3):
    return {
        "estimate": estimate,
        "ci_low": lo,
        "ci_high": hi,
        "mde": mde,
        "verdict": verdict,
        "verdict_class": cls,
        "n_seeds": seeds,
        "n_items": 60,
    }


def _computed(cid, result, seeds=(1, 2, 3), profile="cpu", problem=None):
    comparison = Comparison(**{**COMP.__dict__, "id": cid})
    return Computed("x", profile, comparison, seeds=list(seeds), result=result, problem=problem)


def test_seed_list_reads_runs_of_seeds_as_ranges():
    assert seed_list([44, 42, 43, 46, 48, 49]) == "42–44, 46, 48, 49"
    assert seed_list(range(42, 126)) == "42–125"
    assert seed_list([]) == ""


def test_comparison_table_keeps_four_columns_and_never_shows_nan():
    rows = [
        _computed("better_one", _result(0.3, 0.2, 0.4, "better", "matters")),
        _computed("nan_ci", _result(0.01, float("nan"), float("nan"), "inconclusive", "inconclusive")),
        _computed("missing", None, seeds=(), problem="no run recorded outcomes_acc"),
    ]
    table = comparison_table(rows)
    assert table[0] == "| comparison | estimate [95% CI] | MDE@80% (margin) | verdict |"
    assert all(line.count(" | ") == 3 for line in table if not line.startswith("|---"))
    assert "| `better_one` | +0.3 [+0.2, +0.4] | 0.05 (0.1) | **better** |" in table
    assert "| `nan_ci` | +0.01 [—, —] |" in "\n".join(table)
    assert "nan" not in "\n".join(table).replace("nan_ci", "")
    assert "not computed: no run recorded outcomes\\_acc" in table[-1]
    details = "\n".join(comparison_details(rows))
    assert "- `better_one` (C1): b − a, 3 seeds × 60 crossed items; margin 0.1: test" in details
    assert "- `missing` (C1): b − a, 0 seed(s); margin 0.1: test" in details


def test_better_and_worse_have_their_own_colours_in_the_forest_plot(tmp_path):
    labels = ("better", "worse", "equivalent", "inconclusive")
    assert len({verdict_colour(v) for v in labels}) == 4
    assert verdict_colour("equivalent, detectably worse") == verdict_colour("equivalent")  # inside the margin
    assert verdict_colour("a label from a newer protocol") not in VERDICT_COLOURS.values()
    rows = [
        _computed("up", _result(0.3, 0.2, 0.4, "better", "matters")),
        _computed("down", _result(-0.3, -0.4, -0.2, "worse", "matters")),
    ]
    path = tmp_path / "forest.png"
    assert forest_plot(rows, path, "t")
    import matplotlib.image

    pixels = (matplotlib.image.imread(path)[..., :3] * 255).round().astype(int).reshape(-1, 3)
    drawn = {tuple(p) for p in pixels}
    for label in ("better", "worse"):  # each verdict's colour is on the plot (its bar, its dot, its legend entry)
        hexa = verdict_colour(label).lstrip("#")
        assert tuple(int(hexa[i : i + 2], 16) for i in (0, 2, 4)) in drawn, label
    assert matplotlib.image.imread(path).shape[1] == 750  # the page's column, not wider


def _profiles(tmp_path):
    rng = np.random.default_rng(2)
    items = [f"q{i}" for i in range(30)]
    runs = [
        fake_run(s, {"a": (a := rng.normal(size=30)), "b": a + 1 + rng.normal(scale=0.1, size=30)}, items)
        for s in (1, 2, 3)
    ]
    few = runs[:2]
    return {
        "a100": [compute_one("x", "a100", COMP, [])],
        "a100-hub": [compute_one("x", "a100-hub", COMP, [])],
        "cpu": [compute_one("x", "cpu", COMP, runs)],
        "smoke": [compute_one("x", "smoke", COMP, few)],
    }


def test_verdicts_page_shows_the_profiles_with_runs_strongest_first_and_the_rest_in_one_line(tmp_path):
    computed = _profiles(tmp_path)
    ran, idle = by_evidence(computed)
    assert ran == ["cpu", "smoke"] and idle == ["a100", "a100-hub"]  # cpu: 3 seeds, conclusive; smoke: 2 seeds
    nb = verdicts_notebook(chapter("kite"), computed, tmp_path)
    shown = [c for c in nb["cells"] if "remove-output" not in c["metadata"].get("tags", [])]
    markdown = "\n".join(c["source"] for c in shown if c["cell_type"] == "markdown")
    headings = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert headings == ["## Profile `cpu`", "## Profile `smoke`"]
    not_run = [line for line in markdown.splitlines() if "`a100`" in line]
    assert len(not_run) == 1 and "`a100-hub`" in not_run[0] and "agentpost run kite --profile" in not_run[0]
    shown_outputs = json.dumps([o for c in shown for o in c.get("outputs", [])])
    assert "nan" not in markdown.lower() and "NaN" not in shown_outputs and "nan" not in shown_outputs
    hidden = [c for c in nb["cells"] if "remove-output" in c["metadata"].get("tags", [])]
    assert len(hidden) == 1  # every profile's glued values, so prose citing any of them still finds it
    names = {o["metadata"]["scrapbook"]["name"] for o in hidden[0]["outputs"]}
    assert {"cpu_b_vs_a_verdict", "a100_hub_b_vs_a_estimate", "smoke_b_vs_a_seeds"} <= names


def test_recorded_metrics_are_summarised_not_one_column_per_seed(tmp_path):
    assert summary([1, 2, 3, 4]) == pytest.approx({"mean": 2.5, "sd": 1.2909944, "min": 1, "max": 4, "n": 4})
    assert summary([5.0])["sd"] != summary([5.0])["sd"]  # one value: no spread (NaN, shown as a dash)
    receipts = [
        {"seed": s, "metrics": {"acc": v, "label": lab, "nested": {"x": 1}}}
        for s, v, lab in [(42, 0.5, "ok"), (43, 0.7, "ok"), (44, 0.6, "odd|one")]
    ] + [{"seed": 45 + i, "metrics": {"acc": 0.6, "label": "ok"}} for i in range(40)]
    lines = metrics_section("x", "cpu", receipts, tmp_path)
    table = [line for line in lines if line.startswith("|")]
    assert table[0] == "| metric | mean | sd | min | max | seeds |"
    assert all(line.count("|") == 7 for line in table)  # six columns for 43 seeds
    # 43 values: 0.5, 0.7 and 41 times 0.6: mean 0.6, sd = sqrt((0.1² + 0.1²) / 42) = 0.02182
    assert table[2] == "| `acc` | 0.6 | 0.02182 | 0.5 | 0.7 | 43 |"
    assert "- `label`: ok (×42), odd\\|one (×1)" in lines
    import matplotlib.image

    assert matplotlib.image.imread(tmp_path / "x-cpu-metrics.png").shape[1] == 750


def test_tex_shown_as_text_is_found_outside_maths_and_code_only():
    page = (
        '<p>the set with <span class="math notranslate">\\(\\sum_i a_i\\)</span> is fine</p>'
        '<div class="math">\\[\\frac12\\]</div><pre>print("\\n")</pre><code>\\alpha</code>'
        "<div class=\"cell_output\"><td>'north \\nbecause'</td></div>"
    )
    assert tex_as_text(page) == []
    broken = "<p>thehitset, $$a_i\\ge p\\sum_i a_i$$ and <em>MS_\\text{seed}</em></p><br><p>ok</p>"
    found = tex_as_text(broken)  # $$, \\ge, \\sum, $$, \\text: each with its context
    assert len(found) == 5 and found[0].startswith("thehitset, $$") and found[-1] == "MS_\\text{seed}"


def test_progress_bars_are_left_out_of_stderr_and_warnings_stay():
    from agentpost.evidence.book_pages import without_progress_bars
    from agentpost.run.refresh import drop_progress_bars

    bars = (
        "\rarms:   0%|          | 0/4 [00:00<?, ?it/s]"
        "\rarms:  25%|██▌       | 1/4 [00:00<00:00,  4.87it/s]"
        "\rLM streams: 100%|██████████| 12/12 [00:27<00:00,  2.25s/it]\n"
    )
    warning = "base.py:415: UserWarning: smooth quitting of game failed\n  self._quit_game(observation, done)\n"
    assert without_progress_bars(bars) == ""
    assert without_progress_bars(bars + warning) == warning
    assert without_progress_bars("loss 0.5 | 3/4 done\n") == "loss 0.5 | 3/4 done\n"  # not a bar: kept
    outputs = [
        {"output_type": "stream", "name": "stderr", "text": bars},
        {"output_type": "stream", "name": "stderr", "text": warning},
        {"output_type": "stream", "name": "stdout", "text": "10%|x| 1/10 [00:01<00:09]\n"},  # stdout is a result
    ]
    assert drop_progress_bars(outputs) == outputs[1:]


def test_the_receipts_page_cites_the_schema_version_from_the_code():
    from agentpost.evidence.book_pages import substitutions
    from agentpost.evidence.receipt import SCHEMA_VERSION
    from agentpost.project import project_root

    assert substitutions() == {"receipt_schema_version": str(SCHEMA_VERSION)}
    page = (project_root() / "book" / "receipts.md").read_text(encoding="utf-8")
    assert "(currently {{ receipt_schema_version }})" in page
    assert f"currently {SCHEMA_VERSION}" not in page and f"schema version {SCHEMA_VERSION};" not in page
