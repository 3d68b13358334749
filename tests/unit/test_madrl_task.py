"""MaD-RL diagnostic parts: the GSM8K first-annotation classifier, the character GRU and its stacked copies."""

from functools import partial

import numpy as np
import pytest
import torch

from agentpost.madrl.gru import EOS, CharGRU, GRUConfig, decode, encode, prompt_ids
from agentpost.madrl.stacked import StackedGRU
from agentpost.madrl.task import CATEGORIES, annotation_correct, classify, operation_category, prompt_text
from agentpost.madrl.policies import GRUPolicy
from agentpost.madrl.train import extended_jsd, sample


@pytest.mark.parametrize(
    "expr,cat",
    [
        ("48/2", "/"),
        ("48+24", "+"),
        ("0.2*50", "*"),
        ("10-3", "-"),
        ("2*3+4", "mixed"),
        ("-3+2", "+"),
        ("(5-2)*-4", "mixed"),
        ("3*-2", "*"),
    ],
)
def test_operation_category(expr, cat):
    assert operation_category(expr) == CATEGORIES.index(cat)


def test_no_operator_is_invalid():
    assert operation_category("5") == -1
    assert classify("<<5=5>>") == (-1, False)
    assert classify("no annotation <<3+") == (-1, False)


def test_annotation_correct_to_printed_precision():
    assert annotation_correct("48/2", "24")
    assert annotation_correct("12/60", "0.2")
    assert annotation_correct("10/3", "3.33")
    assert not annotation_correct("10/3", "3.4")
    assert not annotation_correct("48/2", "25")
    assert not annotation_correct("4/0", "1")
    assert not annotation_correct("__import__('os')", "1")
    assert classify("so <<48/2=24>> then <<1+1=3>>") == (CATEGORIES.index("/"), True)


def test_prompt_and_codec():
    assert prompt_text("How many  clips\ndid she sell?", 10) == "did she sell?"[-10:] + "\n"
    assert decode(encode("<<1+2=3>>") + [EOS] + encode("junk")) == "<<1+2=3>>"
    ids = prompt_ids(["ab\n"], 4)
    assert ids.tolist() == [[0, 0] + encode("ab\n")]


def test_stacked_copies_equal_nn_gru():
    torch.manual_seed(0)
    base = CharGRU(GRUConfig(embed=8, hidden=16))
    stack = StackedGRU(base, 3)
    ids = torch.randint(3, 90, (3, 4, 7))
    logits, h = stack(ids)
    for a in range(3):
        ref, href = base(ids[a])
        torch.testing.assert_close(logits[a], ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(h[a], href[0], rtol=1e-5, atol=1e-5)
    # gradients of a per-copy loss reach only that copy
    logits[1].sum().backward()
    assert stack.w_hh.grad[0].abs().sum() == 0 and stack.w_hh.grad[1].abs().sum() > 0


def test_sampling_stops_and_masks():
    torch.manual_seed(0)
    policy = GRUPolicy(CharGRU(GRUConfig(embed=8, hidden=16)), 2)
    ids = torch.randint(3, 90, (2, 5, 6))
    comp, logp, mask = sample(policy, ids, torch.ones_like(ids), 12, torch.Generator().manual_seed(0))
    assert comp.shape == logp.shape == mask.shape and comp.shape[:2] == (2, 5)
    assert (logp[~mask] == 0).all() and (logp[mask] < 0).all()
    assert (comp[~mask] == 0).all()
    # the sampling log-probabilities are the teacher-forced ones of the same completions
    torch.testing.assert_close(policy.logp(ids, torch.ones_like(ids), comp)[mask], logp[mask], rtol=1e-5, atol=1e-5)


def test_extended_jsd_counts_invalid_as_distance():
    t = torch.tensor([0.2] * 5).numpy()
    assert extended_jsd(torch.tensor([2, 2, 2, 2, 2, 0]).numpy(), t) == pytest.approx(0.0, abs=1e-12)
    assert extended_jsd(torch.tensor([0, 0, 0, 0, 0, 5]).numpy(), t) == pytest.approx(
        torch.log(torch.tensor(2.0)).item()
    )


def _tiny_setup():
    from agentpost.madrl.task import Problem

    torch.manual_seed(0)
    base = CharGRU(GRUConfig(embed=8, hidden=16, prompt_chars=8, max_new_chars=6))
    probs = [Problem(f"question {i} how many?", "<<1+2=3>>", 0) for i in range(6)]
    return partial(GRUPolicy, base), probs


def test_run_diagnostic_refuses_bad_input_before_work():
    from agentpost.madrl.train import DiagConfig, Run, run_diagnostic

    base, probs = _tiny_setup()
    cfg = DiagConfig(steps=2, prompts_per_step=2, group_size=4, lr=1e-3, eval_prompts=2, eval_samples=2)
    tg = {"u": [0.2] * 5}
    with pytest.raises(ValueError, match="unknown arm 'bonus'"):
        run_diagnostic(base, [Run("bonus", "u", 0)], tg, probs, probs, cfg, sample_seed=0)
    with pytest.raises(ValueError, match="need a knob > 0"):
        run_diagnostic(base, [Run("entropy", "u", 0)], tg, probs, probs, cfg, sample_seed=0)
    with pytest.raises(ValueError, match="need a knob > 0"):
        run_diagnostic(base, [Run("jsd", "u", 0, knob=2.0)], tg, probs, probs, cfg, sample_seed=0)
    with pytest.raises(ValueError, match="need a knob > 0"):
        run_diagnostic(base, [Run("temperature", "u", 0, knob=0.0)], tg, probs, probs, cfg, sample_seed=0)
    with pytest.raises(ValueError, match="has 3 entries"):
        run_diagnostic(base, [Run("jsd", "u", 0)], {"u": [0.2, 0.3, 0.5]}, probs, probs, cfg, sample_seed=0)
    with pytest.raises(ValueError, match="training prompts needed"):
        run_diagnostic(base, [Run("jsd", "u", 0)], tg, probs[:3], probs, cfg, sample_seed=0)
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        DiagConfig(steps=2, prompts_per_step=2, group_size=1, lr=1e-3, eval_prompts=2, eval_samples=2)


def test_run_diagnostic_end_to_end_on_a_tiny_model():
    from agentpost.madrl.train import DiagConfig, Run, run_diagnostic

    base, probs = _tiny_setup()
    cfg = DiagConfig(
        steps=2,
        prompts_per_step=2,
        group_size=4,
        lr=1e-2,
        eval_prompts=3,
        eval_samples=4,
        max_new_chars=6,
        kl_coef=0.04,
    )
    runs = [Run("correctness", "u", 0), Run("jsd", "u", 0), Run("mixture", "u", 1)]
    out = run_diagnostic(base, runs, {"u": [0.2] * 5}, probs, probs, cfg, sample_seed=0, progress=False)
    assert [len(h) for h in out["history"]] == [2, 2, 2]
    assert out["updates"] == [2, 2, 2]  # optimiser steps counted by the loop (steps x ppo_epochs)
    assert all(h[0]["counts"].sum() == 8 for h in out["history"])
    for f in out["final"]:
        assert f["jsd_per_prompt"].shape == (3,) and f["pooled_counts"].sum() == 12
        assert (f["pooled_correct"] <= f["pooled_counts"]).all()


def test_per_run_learning_rates_and_copy_cap_give_every_run_a_result():
    from agentpost.madrl.train import DiagConfig, Run, run_diagnostic

    base, probs = _tiny_setup()
    cfg = DiagConfig(
        steps=1,
        prompts_per_step=2,
        group_size=4,
        lr=1e-2,
        eval_prompts=2,
        eval_samples=2,
        max_new_chars=6,
        copies_per_policy=1,
    )
    runs = [Run("jsd", "u", 0, lr=1e-3), Run("l2", "u", 0), Run("correctness", "u", 1, lr=1e-3)]
    out = run_diagnostic(base, runs, {"u": [0.2] * 5}, probs, probs, cfg, sample_seed=0, progress=False)
    assert all(f is not None and f["pooled_counts"].sum() == 4 for f in out["final"])
    with pytest.raises(ValueError, match="learning rate -1"):
        run_diagnostic(base, [Run("jsd", "u", 0, lr=-1.0)], {"u": [0.2] * 5}, probs, probs, cfg, sample_seed=0)


def test_sampling_temperature_tempers_each_copy():
    """Copy 0 at T=1 and copy 1 at T=2 of the same GRU: each step's log-probabilities are log_softmax(logits / T)
    of its copy (checked on the first sampled token, whose logits are the prompt's)."""
    torch.manual_seed(0)
    policy = GRUPolicy(CharGRU(GRUConfig(embed=8, hidden=16)), 2)
    ids = torch.randint(3, 90, (1, 4, 6)).expand(2, -1, -1).contiguous()
    comp, logp, _ = sample(
        policy, ids, torch.ones_like(ids), 3, torch.Generator().manual_seed(0), temperature=torch.tensor([1.0, 2.0])
    )
    last, _ = policy.start(ids, torch.ones_like(ids))
    for a, t in enumerate((1.0, 2.0)):
        ref = torch.log_softmax(last[a].float() / t, -1).gather(-1, comp[a, :, :1])[:, 0]
        torch.testing.assert_close(logp[a, :, 0], ref)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        sample(
            policy, ids, torch.ones_like(ids), 3, torch.Generator().manual_seed(0), temperature=torch.tensor([1.0, 0.0])
        )


def test_knob_arms_train_evaluate_and_are_selected_on_validation():
    """C2's baselines through the shared loop: the temperature copy is evaluated at its knob, the entropy copy is
    trained with its bonus, and select_settings picks an (lr, knob) per knob arm from the grids."""
    from agentpost.madrl.train import DiagConfig, Run, run_diagnostic, select_settings

    base, probs = _tiny_setup()
    cfg = DiagConfig(
        steps=1, prompts_per_step=2, group_size=4, lr=1e-2, eval_prompts=2, eval_samples=3, max_new_chars=6
    )
    runs = [Run("entropy", "u", 0, knob=0.1), Run("temperature", "u", 0, knob=1.5), Run("correctness", "u", 0)]
    assert [r.eval_temperature for r in runs] == [1.0, 1.5, 1.0]
    out = run_diagnostic(base, runs, {"u": [0.2] * 5}, probs, probs, cfg, sample_seed=0, progress=False)
    assert all(f["pooled_counts"].sum() == 6 for f in out["final"])
    lr, knob, rows = select_settings(
        base,
        ("correctness", "entropy", "temperature"),
        {"u": [0.2] * 5},
        probs,
        probs,
        cfg,
        [1e-3, 1e-2],
        seed=0,
        progress=False,
        knob_grids={"entropy": [0.1, 1.0], "temperature": [1.5]},
    )
    assert set(lr) == {"correctness", "entropy", "temperature"} and set(knob) == {"entropy", "temperature"}
    assert knob["entropy"] in (0.1, 1.0) and knob["temperature"] == 1.5
    assert len(rows) == 2 * (1 + 2 + 1)  # lr x (correctness, entropy x 2 knobs, temperature x 1 knob)
    best = min((r for r in rows if r["arm"] == "entropy"), key=lambda r: (r["score"], r["lr"], r["knob"]))
    assert (lr["entropy"], knob["entropy"]) == (best["lr"], best["knob"])  # one target: the mean is the score
    with pytest.raises(ValueError, match="non-empty grid of positive knobs"):
        select_settings(base, ("entropy",), {"u": [0.2] * 5}, probs, probs, cfg, [1e-3], seed=0, progress=False)


def test_validation_split_is_fixed_disjoint_and_from_train():
    from agentpost.madrl.task import Problem, split_validation

    probs = [Problem(f"q{i}", "<<1+2=3>>", 0) for i in range(20)]
    rl, val = split_validation(probs, 5)
    assert len(rl) == 15 and len(val) == 5 and not {p.question for p in rl} & {p.question for p in val}
    assert split_validation(probs, 5) == (rl, val)
    with pytest.raises(ValueError, match="n_validation"):
        split_validation(probs, 20)


def test_selection_scores_each_arm_by_its_own_objective():
    from agentpost.madrl.train import selection_score

    assert selection_score("correctness", 0.3, 0.6, 1.0) == -0.6
    assert selection_score("jsd", 0.3, 0.6, 1.0) == 0.3
    assert selection_score("mixture", 0.3, 0.6, 0.5) == pytest.approx(0.0)


def test_learning_rate_selection_evaluates_on_validation_prompts_only():
    from agentpost.madrl.task import Problem
    from agentpost.madrl.train import DiagConfig, select_learning_rates

    make, probs = _tiny_setup()
    validation = [Problem(f"validation {i} how much?", "<<2*3=6>>", 2) for i in range(3)]
    cfg = DiagConfig(
        steps=1, prompts_per_step=2, group_size=4, lr=1e-2, eval_prompts=3, eval_samples=2, max_new_chars=6
    )
    seen = []

    def spy(copies):
        policy = make(copies)
        encode = policy.encode
        policy.encode = lambda items: (seen.extend(items), encode(items))[1]
        return policy

    chosen, rows = select_learning_rates(
        spy, ["correctness", "jsd"], {"u": [0.2] * 5}, probs, validation, cfg, [1e-2, 1e-3], seed=0, progress=False
    )
    assert set(chosen) == {"correctness", "jsd"} and set(chosen.values()) <= {1e-2, 1e-3}
    assert len(rows) == 4 and {r["lr"] for r in rows} == {1e-2, 1e-3}
    evaluated = {p.question for p in seen if p.question.startswith("validation")}
    assert evaluated == {p.question for p in validation}
    with pytest.raises(ValueError, match="lr_grid"):
        select_learning_rates(make, ["jsd"], {"u": [0.2] * 5}, probs, validation, cfg, [], seed=0)


def test_two_seeds_are_two_replications():
    """A run is one seed: another seed (prompt order and sampling) gives other per-prompt outcomes for the same
    arm on the same held-out prompts."""
    from agentpost.madrl.train import DiagConfig, Run, run_diagnostic

    from agentpost.madrl.gru import load_char_gru
    from agentpost.madrl.task import Problem

    base = partial(GRUPolicy, load_char_gru())  # the committed checkpoint: it writes annotations of every category
    probs = [Problem(f"He buys {i + 2} boxes of 12 eggs. How many eggs?", "<<2*12=24>>", 2) for i in range(6)]
    cfg = DiagConfig(
        steps=1, prompts_per_step=2, group_size=4, lr=1e-3, eval_prompts=3, eval_samples=16, max_new_chars=24
    )
    out = {
        s: run_diagnostic(
            base, [Run("jsd", "u", s)], {"u": [0.2] * 5}, probs, probs, cfg, sample_seed=s, progress=False
        )
        for s in (42, 43)
    }
    assert [p.question for p in out[42]["eval_items"]] == [p.question for p in out[43]["eval_items"]]
    a, b = (out[s]["final"][0] for s in (42, 43))
    assert not (
        np.array_equal(a["jsd_per_prompt"], b["jsd_per_prompt"])
        and np.array_equal(a["pooled_counts"], b["pooled_counts"])
    )
