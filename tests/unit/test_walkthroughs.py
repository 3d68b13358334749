""" "Turn it by hand": the shared builder (agentpost.book.walkthrough), the chapter pages' JupyterLab link, and each
chapter's mechanism callback at a hand-checked setting (the worked examples of the chapters and their unit tests)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from matplotlib.figure import Figure

from agentpost.book import lab_link
from agentpost.book.walkthrough import turn_by_hand
from agentpost.codeskills import walkthrough as codeskills_wt
from agentpost.graft import walkthrough as graft_wt
from agentpost.madrl import walkthrough as madrl_wt
from agentpost.muser import walkthrough as muser_wt
from agentpost.opsd import walkthrough as opsd_wt
from agentpost.protocol import walkthrough as protocol_wt

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


# --- the builder (needs ipywidgets, a dependency since the walkthroughs) ----------------------------------------


@pytest.fixture
def widgets():
    return pytest.importorskip("ipywidgets")


def test_moving_a_control_re_renders_with_the_new_value(widgets):
    calls = []

    def render(n, label):
        calls.append((n, label))
        return f"{label}: {n * n}"

    walk = turn_by_hand(render, n=widgets.IntSlider(3, min=0, max=9), label=widgets.Text("square"))
    assert calls == [(3, "square")] and walk.rendered == ["square: 9"]
    walk.controls["n"].value = 4
    assert calls[-1] == (4, "square") and walk.rendered == ["square: 16"]
    assert walk.view.value == "<pre>square: 16</pre>"  # what the live view shows
    assert walk.values() == {"n": 4, "label": "square"}


def test_display_carries_the_widget_view_and_the_static_view_at_the_current_values(widgets):
    walk = turn_by_hand(lambda x: f"<b>{x}</b>", x=widgets.FloatSlider(0.5))
    bundle = walk._repr_mimebundle_()
    assert WIDGET_VIEW in bundle and bundle[WIDGET_VIEW]["model_id"] == walk.box.model_id
    static = bundle["text/html"]
    assert "<code>x</code> = 0.5" in static
    assert "&lt;b&gt;0.5&lt;/b&gt;" in static and "<b>0.5" not in static  # rendered text is data, escaped
    assert "make lab" in static


def test_figures_become_inline_png_and_tables_html(widgets):
    def render(k):
        fig = Figure()
        fig.add_subplot().plot([0, k])
        return [fig, graft_wt.step_table(k, 0.9)]

    walk = turn_by_hand(render, k=widgets.IntSlider(2, min=1, max=6))
    html = walk.static_html()
    assert html.count('src="data:image/png;base64,') == 1 and "<table" in html


def test_bad_controls_are_named(widgets):
    with pytest.raises(ValueError, match="at least one control"):
        turn_by_hand(lambda: None)
    with pytest.raises(TypeError, match=r"\['n'\]"):
        turn_by_hand(lambda n: n, n=3)


# --- the chapter pages' link into JupyterLab ----------------------------------------------------------------------


def test_lab_link_points_chapter_pages_at_the_lab_root_and_nothing_else():
    assert lab_link("http://localhost:8888/", "notebooks/graft") == "http://localhost:8888/lab/tree/graft.ipynb"
    assert lab_link("http://h:1", "notebooks/paired-protocol") == "http://h:1/lab/tree/paired-protocol.ipynb"
    assert lab_link("http://localhost:8888", "book/generated/verdicts/graft") is None
    assert lab_link("http://localhost:8888", "book/intro") is None


# --- the chapters' mechanisms at hand-checked settings ------------------------------------------------------------


def test_graft_worked_example_at_three_rollouts():
    """V(s1) = 0.9 (1 + 0)/2 = 0.45, V(s0) = 0.9 (2 * 0.45 + 0)/3 = 0.27; TD(0) of T3's first step 0.9 * 0.45 - 0.27 =
    0.135; the group at s0 (0.135, -0.27, 0.135) normalises to (0.7071, -1.4142, 0.7071)."""
    t = graft_wt.step_table(3, 0.9)
    first = t[t["t"] == 0]
    assert first["V(s_t)"].tolist() == [0.27] * 3
    assert first["TD(0) A_t"].tolist() == [0.135, -0.27, 0.135]
    assert first["normalised A"].tolist() == [0.7071, -1.4142, 0.7071]


def test_graft_fourth_rollout_lifts_s2():
    """Rollout 4 wins through s2 -> s3: V(s3) = 0.9, V(s2) = 0.9 (0 + 0.9)/2 = 0.405,
    V(s0) = 0.9 (2 * 0.45 + 2 * 0.405)/4 = 0.38475; T2's first step: 0.9 * 0.405 - 0.38475 = -0.02025."""
    t = graft_wt.step_table(4, 0.9)
    t2 = t[(t["rollout"] == 2) & (t["t"] == 0)].iloc[0]
    assert t2["V(s_t+1)"] == 0.405 and t2["V(s_t)"] == pytest.approx(0.38475, abs=1e-4)
    assert t2["TD(0) A_t"] == pytest.approx(-0.02025, abs=1e-4)
    assert len(t) == 2 + 2 + 2 + 3


def test_madrl_worked_example_reward_table():
    """p* = (0.5, 0.3, 0.2), p_hat = (0.6, 0.3, 0.1): category 2 gets l2 0.1, forward KL 0.2/0.1 - 1 = 1,
    reverse KL log 2, JSD 0.5 log(0.15 / 0.1); weights are normalised (x2 is the same target)."""
    for weights in ((0.5, 0.3, 0.2), (1.0, 0.6, 0.4)):
        t = madrl_wt.reward_table(*weights)
        assert t["p_hat"].tolist() == [0.6, 0.3, 0.1]
        row = t.iloc[2]
        assert row["r l2"] == pytest.approx(0.1, abs=1e-4) and row["r forward_kl"] == pytest.approx(1.0, abs=1e-4)
        assert row["r reverse_kl"] == pytest.approx(math.log(2), abs=1e-4)
        assert row["r jsd"] == pytest.approx(0.5 * math.log(1.5), abs=1e-4)
        assert t.iloc[1][["r l2", "r forward_kl", "r reverse_kl", "r jsd"]].abs().max() < 1e-4  # p* = p_hat


def test_madrl_rejects_an_empty_target():
    with pytest.raises(ValueError, match="target weights"):
        madrl_wt.reward_table(0.0, 0.0, 0.0)


def test_opsd_teacher_weights_by_hand():
    """Student k + 1 after update k: EMA d = 0.3 gives 0.3 * 1 + 0.7 * 2 = 1.7, then 0.3 * 1.7 + 0.7 * 3 = 2.61;
    periodic m = 2 copies at updates 2 and 4; frozen stays 1, live is the student."""
    t = opsd_wt.teacher_weights(4, 0.3, 2)
    assert t["frozen"].tolist() == [1.0] * 5 and t["live"].tolist() == t["student"].tolist() == [1, 2, 3, 4, 5]
    assert t["ema d=0.3"].tolist()[:3] == [1.0, 1.7, 2.61]
    assert t["periodic m=2"].tolist() == [1.0, 1.0, 3.0, 3.0, 5.0]
    with pytest.raises(ValueError, match="updates"):
        opsd_wt.teacher_weights(0, 0.3, 2)


def test_muser_worked_example_interests():
    """e = (0.6, 0.8), tau = 0.1: alpha = softmax(6, 8) = (0.1192, 0.8808), s = 10 (0.1192 * 0.6 + 0.8808 * 0.8) =
    7.7616; max aggregation 8."""
    t = muser_wt.interest_table(math.degrees(math.atan2(0.8, 0.6)), 0.1)
    assert t["cos(u_m, e)"].tolist() == [0.6, 0.8] and t["alpha_m"].tolist() == [0.1192, 0.8808]
    assert t["score s (softmax)"].iloc[0] == 7.7616 and t["score s (max)"].iloc[0] == 8.0
    with pytest.raises(ValueError, match="tau"):
        muser_wt.interest_table(45.0, 0.0)


def test_codeskills_skill_mass_by_hand():
    """6 skills and 19 primitives: uniform m = 6/25 = 0.24, P(no skill in 10) = 0.76^10; equal_mass m = 1/2."""
    t = codeskills_wt.selection_table(6, 19, "uniform", 10).set_index("mode")
    assert t.loc["uniform (chosen)", "skill mass m"] == 0.24 and t.loc["uniform (chosen)", "actions"] == 25
    assert t.loc["uniform (chosen)", "P(no skill call)"] == round(0.76**10, 4)
    assert t.loc["equal_mass", "skill mass m"] == 0.5
    assert codeskills_wt.selection_table(2, 0, "equal_mass", 5)["skill mass m"].tolist() == [1.0, 1.0]  # no primitives
    with pytest.raises(ValueError, match="n_skills"):
        codeskills_wt.selection_table(0, 19, "uniform", 10)


@pytest.mark.parametrize(
    "module, values",
    [
        (graft_wt, {"n_rollouts": 6, "gamma": 0.95}),
        (madrl_wt, {"w0": 0.2, "w1": 0.2, "w2": 0.6}),
        (opsd_wt, {"updates": 12, "ema_decay": 0.7, "sync_every": 3}),
        (codeskills_wt, {"n_skills": 3, "n_primitives": 8, "mode": "equal_mass", "decisions": 20}),
        (muser_wt, {"angle_deg": 20.0, "tau": 0.5}),
        (protocol_wt, {"effect": 0.0, "margin": 0.2, "seeds": 10, "items": 200}),
    ],
    ids=["graft", "madrl", "opsd", "codeskills", "muser", "paired-protocol"],
)
def test_each_render_gives_a_figure_and_its_table(module, values):
    fig, table = module.render(**values)
    assert isinstance(fig, Figure) and len(table) > 0 and np.isfinite(table.select_dtypes("number").to_numpy()).all()


def test_protocol_walkthrough_is_compare_and_plan_on_its_data():
    """The walkthrough's verdict is compare's on the shown data: seed means of the 3 x 30 synthetic differences by
    hand (one-sample t, df 2), and its planned design is plan's from that result."""
    from scipy import stats

    from agentpost.stats import plan

    d = protocol_wt.differences(0.3, 3, 30)
    r, p = protocol_wt.walk(0.3, 0.2, 3, 30)
    m = d.mean(axis=1)
    assert r.estimate == pytest.approx(m.mean()) and r.se == pytest.approx(stats.sem(m)) and r.df == 2
    q = stats.t.ppf(0.975, 2)
    assert r.ci_low == pytest.approx(m.mean() - q * stats.sem(m))
    expected = "matters" if r.ci_low > 0.2 else ("detectable" if r.ci_low > 0 else "inconclusive")
    assert r.verdict_class == expected
    again = plan(
        r.variance_components, design="independent", min_effect=0.2, pilot=(3, 30), seeds=range(3, 61), max_items=400
    )
    assert p.designs[:1] == again.designs[:1] and p.max_items == protocol_wt.MAX_ITEMS
    # moving the items keeps the seed effects: the first 3 x 10 cells are the same draws
    assert np.array_equal(protocol_wt.differences(0.3, 3, 10), d[:, :10])
    with pytest.raises(ValueError, match="seeds"):
        protocol_wt.differences(0.3, 2, 30)
