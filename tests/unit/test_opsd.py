"""Recursive OPSD: divergences, roles/masks/aggregation, teacher-sync policies, SRCL gates and loss, the probe."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from agentpost.data.gsm8k import Expression
from agentpost.models import arith_lm as A
from agentpost.opsd import (
    ArmConfig,
    Gates,
    accept,
    answers_match,
    data_order,
    distill_loss,
    divergence,
    fixed_incorrect,
    gate_results,
    has_reflection,
    make_sync,
    probe,
    response_logits,
    response_mask,
    srcl_loss,
    train_arm,
)

Q = torch.tensor([0.7, 0.2, 0.1]).log()
P = torch.tensor([0.5, 0.3, 0.2]).log()


@pytest.mark.claim("opsd", "C4")
def test_divergence_worked_values():
    # spec mechanism test 3 (natural log): forward 0.085123, reverse 0.092033, JSD 0.021901
    assert divergence("forward_kl", Q, P).item() == pytest.approx(0.085123, abs=1e-6)
    assert divergence("reverse_kl", Q, P).item() == pytest.approx(0.092033, abs=1e-6)
    assert divergence("jsd", Q, P).item() == pytest.approx(0.021901, abs=1e-6)


def test_forward_kl_matches_opsd_code_convention():
    # OPSD code, beta = 0: F.kl_div(student_logp, teacher_logp, log_target=True).sum(-1) = KL(teacher || student)
    t, s = torch.randn(4, 7), torch.randn(4, 7)
    ref = F.kl_div(torch.log_softmax(s, -1), torch.log_softmax(t, -1), log_target=True, reduction="none").sum(-1)
    assert torch.allclose(divergence("forward_kl", t, s), ref, atol=1e-6)


def test_unknown_divergence_and_shape_errors():
    with pytest.raises(KeyError, match="unknown divergence"):
        divergence("tv", Q, P)
    with pytest.raises(ValueError, match="same shape"):
        divergence("forward_kl", torch.zeros(3), torch.zeros(4))


def _tiny(seed=0):
    torch.manual_seed(seed)
    cfg = A.config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    cfg._attn_implementation = "eager"
    import transformers

    return transformers.Qwen3ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tok():
    return A.build_tokenizer()


def test_identical_contexts_give_zero_loss(tok):
    model = _tiny()
    e = Expression("48/2", "24")
    prompt = [tok(A.student_prompt(e), add_special_tokens=False).input_ids] * 2
    resp = [tok("48/2 = 24.", add_special_tokens=False).input_ids + [1], [5, 6, 1]]
    s, mask = response_logits(model, prompt, resp, 0)
    t, _ = response_logits(model, prompt, resp, 0)
    for name in ("forward_kl", "reverse_kl", "jsd"):
        assert distill_loss(t, s, mask, divergence_name=name).item() == pytest.approx(0.0, abs=1e-6)


def test_response_logits_align_and_padding_is_ignored(tok):
    model = _tiny()
    prompts, resp = [[2, 10, 11], [2, 12]], [[20, 21, 1], [22]]
    logits, mask = response_logits(model, prompts, resp, 0)
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    full = model(input_ids=torch.tensor([[2, 12, 22]])).logits
    assert torch.allclose(logits[1, 0], full[0, 1], atol=1e-5)  # predicts the first response token
    # changing the padded positions' logits changes nothing
    other = logits.clone()
    other[1, 1:] += 5.0
    assert distill_loss(logits.detach(), other, mask).item() == pytest.approx(
        distill_loss(logits.detach(), logits, mask).item(), abs=1e-6
    )


def test_dce_per_sequence_mean_not_token_mean():
    # spec mechanism test 5: per-position KLs [1, 1] and [3] -> mean(1, 3) = 2, not 5/3.
    # With q = (e^-1... ) we build logits whose forward KL is exactly the wanted value via a direct aggregate check.
    from agentpost.rl import aggregate

    per_pos = torch.tensor([[1.0, 1.0], [3.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert aggregate(per_pos, mask, "seq_mean_token_mean").item() == pytest.approx(2.0)
    assert aggregate(per_pos, mask, "token_mean").item() == pytest.approx(5 / 3)
    # and through distill_loss: two positions of KL k1 and one of k3 from real distributions
    t = torch.stack([torch.stack([Q, Q]), torch.stack([Q, Q])])
    s = torch.stack([torch.stack([P, P]), torch.stack([Q, Q])])
    k = divergence("forward_kl", Q, P).item()
    assert distill_loss(t, s, mask).item() == pytest.approx((k + 0.0) / 2, abs=1e-6)


def test_response_mask_positions():
    assert response_mask([[5, 6, 1], [7]], 1, "all").tolist() == [[1, 1, 1], [1, 0, 0]]
    assert response_mask([[5, 6, 1], [7]], 1, "exclude_eos").tolist() == [[1, 1, 0], [1, 0, 0]]
    with pytest.raises(ValueError, match="dce_positions"):
        response_mask([[1]], 1, "some")


def test_stop_gradient_only_student_branch():
    # spec mechanism test 2: the teacher branch carries no gradient; the gradient equals the analytic
    # d/ds KL(q || softmax(s)) = softmax(s) - q even when the teacher logits require grad
    s = torch.randn(1, 1, 5, requires_grad=True)
    t = torch.randn(1, 1, 5, requires_grad=True)
    mask = torch.ones(1, 1)
    distill_loss(t, s, mask).backward()
    assert t.grad is None
    q = torch.softmax(t.detach(), -1)
    assert torch.allclose(s.grad, torch.softmax(s.detach(), -1) - q, atol=1e-6)
    # shifting the teacher by a detached constant per-vocabulary changes the loss and the gradient accordingly
    s2 = s.detach().clone().requires_grad_(True)
    t2 = t.detach() + torch.tensor([1.0, 0, 0, 0, 0])
    loss2 = distill_loss(t2, s2, mask)
    loss2.backward()
    assert loss2.item() != pytest.approx(distill_loss(t.detach(), s.detach(), mask).item())
    assert torch.allclose(s2.grad, torch.softmax(s.detach(), -1) - torch.softmax(t2, -1), atol=1e-6)


class TwoParam(torch.nn.Module):
    def __init__(self, a=1.0, b=1.0):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(a))
        self.b = torch.nn.Parameter(torch.tensor(b))

    def values(self):
        return [round(self.a.item(), 4), round(self.b.item(), 4)]


def _values(weights):
    return [round(weights["a"].item(), 4), round(weights["b"].item(), 4)]


def _run_sync(name, k, **kw):
    """Student (a, b) starts at (1, 1) and after step j is set to (j + 1, 10 (j + 1)); returns the teacher's
    weights after each step."""
    student = TwoParam()
    sync = make_sync(name, **kw)
    sync.start(student)
    seen = []
    for j in range(1, k + 1):
        with torch.no_grad():
            student.a.fill_(j + 1.0)
            student.b.fill_(10.0 * (j + 1))
        sync.after_step(j, student)
        seen.append(_values(sync.weights()))
    return seen


@pytest.mark.claim("opsd", "C3")
def test_sync_frozen_keeps_theta0():
    assert _run_sync("frozen", 3) == [[1.0, 1.0]] * 3


@pytest.mark.claim("opsd", "C3")
def test_sync_live_is_current_student():
    assert _run_sync("live", 3) == [[2.0, 20.0], [3.0, 30.0], [4.0, 40.0]]


@pytest.mark.claim("opsd", "C3")
def test_sync_ema_d03():
    # theta_T = 1, theta_S = 0, d = 0.3 -> 0.3 (spec); then the two-parameter trajectory by hand
    student, sync = TwoParam(), make_sync("ema", ema_decay=0.3)
    sync.start(student)
    with torch.no_grad():
        student.a.fill_(0.0)
        student.b.fill_(0.0)
    sync.after_step(1, student)
    assert _values(sync.weights()) == [0.3, 0.3]
    # a: 0.3*1 + 0.7*2 = 1.7; 0.3*1.7 + 0.7*3 = 2.61.  b: 0.3*1 + 0.7*20 = 14.3; 0.3*14.3 + 0.7*30 = 25.29
    assert _run_sync("ema", 2, ema_decay=0.3) == [[1.7, 14.3], [2.61, 25.29]]
    # d = 0.7: a: 0.7 + 0.6 = 1.3; 0.91 + 0.9 = 1.81
    assert _run_sync("ema", 2, ema_decay=0.7)[1][0] == pytest.approx(1.81)


@pytest.mark.claim("opsd", "C3")
def test_sync_periodic_changes_only_at_multiples():
    assert _run_sync("periodic", 5, sync_every=2) == [[1.0, 1.0], [3.0, 30.0], [3.0, 30.0], [5.0, 50.0], [5.0, 50.0]]


def test_sync_bad_input():
    with pytest.raises(KeyError, match="unknown teacher sync"):
        make_sync("sometimes")
    with pytest.raises(ValueError, match="decay"):
        make_sync("ema", ema_decay=1.0)
    with pytest.raises(ValueError, match="period"):
        make_sync("periodic", sync_every=0)


def test_copies_are_independent_of_the_student():
    student = TwoParam()
    sync = make_sync("frozen")
    sync.start(student)
    with torch.no_grad():
        student.a.add_(5.0)
    assert sync.weights()["a"].item() == 1.0 and not sync.weights()["a"].requires_grad
    with sync.as_teacher() as teacher:  # the teacher's tensors are swapped into the student module ...
        assert teacher is student and student.a.item() == 1.0
    assert student.a.item() == 6.0 and student.a.requires_grad  # ... and swapped back


CLEAN = "Here 48/2 = 24 since 48 = 2*24. The answer is \\boxed{24}."
N_CLEAN = len(CLEAN) + 1  # character tokens plus EOS


def _gates(text=CLEAN, n=None, ended=True, source=200, ref="24", **g):
    return gate_results(text, len(text) + 1 if n is None else n, ended, source, ref, Gates(**g))


@pytest.mark.claim("opsd", "C2")
@pytest.mark.parametrize(
    "gate,bad",
    [
        ("shorter", dict(source=N_CLEAN)),  # not strictly shorter than the source
        ("natural_eos", dict(ended=False)),  # truncated, no EOS
        ("no_reflection", dict(text=CLEAN.replace("Here", "Wait,"))),  # reflection word
        ("no_reflection", dict(text=CLEAN.replace("Here", "Let me DOUBLE-CHECK:"))),
        ("min_tokens", dict(text="48/2 = 24. \\boxed{24}")),  # 22 tokens < 32
        ("final_box_correct", dict(ref="25")),  # final box wrong
        ("final_box_correct", dict(text=CLEAN.replace("\\boxed{24}", "24"))),  # no box at all
        ("no_earlier_wrong_box", dict(text="First \\boxed{23} then 48/2 = 24 again. The answer is \\boxed{24}.")),
        ("max_tokens", dict(max_tokens=40)),
        ("no_repetition", dict(text="48/2 = 24. 48/2 = 24. 48/2 = 24. The answer is \\boxed{24}.")),
    ],
)
def test_each_gate_rejects_its_case_and_the_clean_rewrite_passes(gate, bad):
    clean = _gates()
    assert all(clean.values()), clean
    assert accept(CLEAN, N_CLEAN, True, 200, "24")
    res = _gates(**bad)
    assert not res[gate], (gate, res)
    assert [g for g, ok in res.items() if not ok] == [gate]


def test_min_tokens_threshold_is_a_parameter():
    short = "48/2 = 24. \\boxed{24}"
    assert not _gates(text=short)["min_tokens"]
    assert _gates(text=short, min_tokens=20)["min_tokens"]
    with pytest.raises(ValueError, match="min_tokens"):
        Gates(min_tokens=0)


@pytest.mark.parametrize(
    "answer,reference",
    [
        (" 24 ", "24.0"),
        ("24", "24.0"),
        ("3:4", "3/4"),
        ("A", "a"),  # whitespace, trailing .0, ratio, case
        ("1,000", "1000"),
        ("1,000,000", "1000000"),  # thousands separators
        ("$18", "18"),
        ("\\$18", "18"),
        ("\\$1,000.00", "1000"),  # dollar signs (plain and LaTeX-escaped)
        ("\\frac{1}{2}", "0.5"),
        ("1/2", "0.5"),
        ("2/4", "\\frac{1}{2}"),  # fractions
        ("18.", "18"),
        ("2.50", "2.5"),  # trailing dot and zeros
    ],
)
def test_answers_match_equal_answers(answer, reference):
    assert answers_match(answer, reference)


@pytest.mark.parametrize("answer,reference", [("24", "25"), ("-5", "5"), ("1,2", "12"), ("", "0"), ("abc", "abd")])
def test_answers_match_different_answers(answer, reference):
    assert not answers_match(answer, reference)


def test_task_accuracy_and_srcl_gate_use_the_same_check():
    from agentpost.opsd import GSM8KChat
    from agentpost.opsd.tasks import ARITHMETIC

    e = Expression("500*2", "1000")
    text = "500*2 = 1000. The answer is \\boxed{1,000}."
    assert ARITHMETIC.is_correct(text, e)
    assert _gates(text=text, ref="1000")["final_box_correct"] and _gates(text=text, ref="1000.0")["final_box_correct"]

    class Tok:
        chat_template = "x"

    assert GSM8KChat(Tok()).is_correct("so \\boxed{\\$18}", {"question": "q", "answer": "... #### 18"})


def test_reflection_filter_matches_whole_words_only():
    assert has_reflection("Wait, 48/2 = 24.") and has_reflection("let me double-check") and has_reflection("WAIT")
    assert has_reflection("we await the result; it actually")  # 'actually' is a cue, 'await' is not
    assert not has_reflection("We await the sum of 2 and 2: 4.")
    assert not has_reflection("The bus waits 5 minutes; the correctional officer counts.")


def test_boxed_values_balanced():
    assert A.boxed_values("a \\boxed{1} b \\boxed{\\frac{1}{2}} c \\boxed{3") == ["1", "\\frac{1}{2}"]
    assert A.final_answer("x \\boxed{ 2 4 }") == "24" and A.final_answer("none") is None


@pytest.mark.claim("opsd", "C2")
def test_srcl_normalisation_worked_example():
    # spec mechanism test 7: accepted rewrites of lengths 2 and 4 with NLL sums 1 and 3 -> (1 + 3) / 6
    nll = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.75, 0.75, 0.75, 0.75], [9.0, 9.0, 9.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]])
    assert srcl_loss(nll, mask, torch.tensor([1.0, 1.0, 0.0])).item() == pytest.approx(4 / 6)


def test_srcl_zero_when_nothing_accepted():
    nll = torch.tensor([[2.0, 3.0]], requires_grad=True)
    loss = srcl_loss(nll, torch.ones(1, 2), torch.tensor([0.0]))
    assert loss.item() == 0.0 and math.isfinite(loss.item())
    loss.backward()
    assert torch.equal(nll.grad, torch.zeros(1, 2))


def test_data_order_same_for_every_arm_and_cycles():
    a = data_order(10, ArmConfig(teacher_mode="frozen", batch=4, updates=5), seed=3)
    b = data_order(10, ArmConfig(teacher_mode="live", srcl=True, batch=4, updates=5), seed=3)
    assert np.array_equal(a, b) and a.shape == (5, 4)
    assert sorted(a.reshape(-1)[:10].tolist()) == list(range(10))


def test_arm_config_bad_input():
    with pytest.raises(ValueError, match="teacher_mode"):
        ArmConfig(teacher_mode="lazy")
    with pytest.raises(ValueError, match="teacher_layout"):
        ArmConfig(teacher_layout="system")
    with pytest.raises(ValueError, match="updates"):
        ArmConfig(updates=0)


def test_teacher_layouts(tok):
    e = Expression("48/2", "24")
    a, u = A.teacher_prompt(e, "assistant"), A.teacher_prompt(e, "user")
    assert a.startswith(A.student_prompt(e)) and "Reference: 48/2=24" in a.split(A.ASSISTANT)[1]
    assert "Reference: 48/2=24" in u.split(A.ASSISTANT)[0] and u.endswith(A.ASSISTANT)
    with pytest.raises(ValueError, match="layout"):
        A.teacher_prompt(e, "system")


def test_probe_values_are_probabilities_and_match_direct_computation(tok):
    model = _tiny()
    items = fixed_incorrect([Expression("48/2", "24"), Expression("3+4", "7")], 2, seed=0)
    out = probe(model, tok, items)
    assert set(out) == {"student_p_eos", "student_p_cue", "teacher_p_eos", "teacher_p_cue"}
    e, w = items[0]
    ids = tok(A.student_prompt(e) + f"{e.text} = {w}. {A.boxed(w)}", add_special_tokens=False).input_ids
    p0 = torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1], -1)[tok.eos_token_id].item()
    e1, w1 = items[1]
    ids1 = tok(A.student_prompt(e1) + f"{e1.text} = {w1}. {A.boxed(w1)}", add_special_tokens=False).input_ids
    p1 = torch.softmax(model(input_ids=torch.tensor([ids1])).logits[0, -1], -1)[tok.eos_token_id].item()
    assert out["student_p_eos"] == pytest.approx((p0 + p1) / 2, rel=1e-4)
    assert all(0.0 < v < 1.0 for v in out.values())


def test_train_arm_runs_and_live_teacher_follows(tok):
    model = _tiny()
    exprs = [Expression("1+2", "3"), Expression("4*2", "8"), Expression("9-5", "4")]
    cfg = ArmConfig(teacher_mode="frozen", srcl=True, batch=2, updates=2, max_new_tokens=8, lr=1e-2)
    student, log = train_arm(
        model, tok, exprs, cfg, seed=0, probe_items=fixed_incorrect(exprs, 2), probe_every=1, progress=False
    )
    assert len(log["loss_g"]) == 2 and len(log["probe"]) == 3 and all(np.isfinite(log["loss_g"]))
    assert len(log["loss_s"]) == 2 and all(np.isfinite(log["loss_s"]))
    changed = any(not torch.equal(p, q) for p, q in zip(student.parameters(), model.parameters()))
    assert changed


@pytest.mark.claim("opsd", "C2")
def test_srcl_gradient_with_an_accepted_rewrite(tok, monkeypatch):
    """One SRCL update with one accepted and one rejected rewrite, checked against an independent computation.

    Generation is replaced by fixed texts: both rollouts are verbose responses; the rewrite of ``48+24`` is the
    concise response (shorter, >= 32 tokens, no reflection, final box 72: accepted), the rewrite of ``9-5`` boxes
    5 (wrong: rejected). With lambda_G = 0 and lambda_S = 1 the loss is eq. 6 over the accepted rewrite only, its
    token NLL summed and divided by its length N_k, computed here from the model's own logits on
    ``student prompt + rewrite + <eos>``; AdamW's first step (no weight decay) moves every weight by
    ``-lr * g / (|g| + eps)`` with ``g`` the gradient of that loss."""
    import agentpost.opsd.train as T

    good, bad = Expression("48+24", "72"), Expression("9-5", "4")
    rewrites = {good.text: A.response(good, "concise"), bad.text: A.concise_rewrite(bad, "5")}

    def fake_generate(model, tok_, prompts, **kw):
        out = []
        for p in prompts:
            e = good if "Compute 48+24." in p else bad
            text = rewrites[e.text] if "Previous answer:" in p else A.response(e, "verbose")
            out.append(
                {"ids": tok_(text, add_special_tokens=False).input_ids + [tok_.eos_token_id], "text": text, "eos": True}
            )
        return out

    monkeypatch.setattr(T.A, "generate", fake_generate)
    model = _tiny(seed=1)
    lr, eps = 1e-3, 1e-8
    cfg = ArmConfig(
        teacher_mode="frozen",
        srcl=True,
        batch=2,
        updates=1,
        lr=lr,
        lambda_g=0.0,
        lambda_s=1.0,
        grad_clip=1e9,
        max_new_tokens=200,
    )
    student, log = train_arm(model, tok, [good, bad], cfg, seed=0, progress=False)
    assert log["accepted"] == [1] and log["gate_failures"]["final_box_correct"] == 1
    assert sum(log["gate_failures"].values()) == 1  # the rejected rewrite fails the correctness gate only

    ref = _tiny(seed=1)
    prompt = tok(A.student_prompt(good), add_special_tokens=False).input_ids
    c = tok(rewrites[good.text], add_special_tokens=False).input_ids + [tok.eos_token_id]
    logp = torch.log_softmax(ref(input_ids=torch.tensor([prompt + c])).logits[0], -1)
    nll = -torch.stack([logp[len(prompt) - 1 + t, c[t]] for t in range(len(c))])
    expected = nll.sum() / len(c)  # eq. 6 with A = (1, 0): N_k = |c_1|
    assert log["loss_s"][0] == pytest.approx(expected.item(), rel=1e-5)
    expected.backward()
    for (name, p1), p0 in zip(student.named_parameters(), ref.parameters()):
        step = -lr * p0.grad / (p0.grad.abs() + eps)
        moved = p1.detach() - p0.detach()
        clear = p0.grad.abs() > 1e-6  # below, float noise of the padded batch can flip the sign of g
        assert clear.float().mean() > 0.5 and torch.allclose(moved[clear], step[clear], atol=1e-7), name
        assert moved.abs().max() <= lr * (1 + 1e-4), name


def test_a100_path_pretrains_and_trains_on_the_given_device(tmp_path):
    """The a100 profile's path at tiny sizes with device "cpu": in-notebook pretraining of a model of
    ``pretrain_arch`` on ``device``, loading it, every arm on ``device``; outputs and weights stay there."""
    from agentpost.data.gsm8k import arithmetic_split
    from agentpost.models.train_arith_lm import Hyper, train as pretrain
    from agentpost.opsd.diagnostic import arm_grid, run_arms

    device = "cpu"
    arch = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    receipt = pretrain(tmp_path, Hyper(steps=2, batch=4, eval_items=2, max_new_tokens=8), arch=arch, device=device)
    assert receipt["architecture"]["hidden_size"] == 32 and receipt["device"].startswith(device)
    model0, tok = A.load(tmp_path)
    model0 = model0.to(device)
    exprs = list(arithmetic_split("train")[:8])
    arms = arm_grid(ArmConfig(batch=2, updates=2, max_new_tokens=8, sync_every=1), ema_decays=(0.3,))
    runs = run_arms(
        model0,
        tok,
        exprs,
        {"test": arithmetic_split("test")[:2]},
        arms,
        0,
        probe_pool=exprs,
        n_probe=2,
        probe_every=1,
        progress=False,
    )
    assert all(len(r["eval"]["test"]["correct"]) == 2 and len(r["log"]["probe"]) == 3 for r in runs.values())
    assert all(r["log"]["updates"] == 2 for r in runs.values())
    assert all(p.device.type == device for p in model0.parameters())


def test_arm_grid_holds_opsd_and_the_layout_contrast():
    from agentpost.opsd.diagnostic import arm_grid

    arms = arm_grid(ArmConfig(), ema_decays=(0.3, 0.7))
    assert list(arms) == [
        "opsd",
        "frozen",
        "dce",
        "ema_0p3",
        "ema_0p7",
        "periodic",
        "dce_user",
        "frozen_srcl",
        "dce_srcl",
    ]
    # C1's contrast: OPSD = frozen teacher with the user-side reference; DCE = live teacher, assistant-side
    assert (arms["opsd"].teacher_mode, arms["opsd"].teacher_layout) == ("frozen", "user")
    assert (arms["dce"].teacher_mode, arms["dce"].teacher_layout) == ("live", "assistant")
    # C4's layout contrast differs from DCE in the layout only
    assert arms["dce_user"] == replace(arms["dce"], teacher_layout="user")
    assert arms["dce_srcl"] == replace(arms["dce"], srcl=True)
    with pytest.raises(ValueError, match="srcl_arms"):
        arm_grid(ArmConfig(), srcl_arms=("nope",))


def test_loss_weights_default_to_the_papers_ratio():
    cfg = ArmConfig()
    assert cfg.lambda_s / cfg.lambda_g == pytest.approx(25 / 5e4)  # Qwen3-8B: lambda_S = 25, lambda_G = 5e4
    with pytest.raises(ValueError, match="loss weights"):
        ArmConfig(lambda_s=-1.0)


@pytest.mark.claim("opsd", "C4")
def test_topk_support_renormalises_over_the_teachers_top_tokens():
    from agentpost.opsd.loss import restrict_support

    # teacher (0.7, 0.2, 0.1), student (0.5, 0.3, 0.2); top-2 of the teacher = tokens 0, 1:
    # q' = (0.7, 0.2) / 0.9, p' = (0.5, 0.3) / 0.8, KL(q' || p') by hand
    qk, pk = torch.tensor([7 / 9, 2 / 9]), torch.tensor([5 / 8, 3 / 8])
    expected = float((qk * (qk / pk).log()).sum())
    t, s_ = restrict_support(Q[None], P[None], "topk", 2)
    assert divergence("forward_kl", t, s_).item() == pytest.approx(expected, abs=1e-6)
    mask = torch.ones(1, 1)
    assert distill_loss(Q[None, None], P[None, None], mask, kl_support="topk", topk=2).item() == pytest.approx(
        expected, abs=1e-6
    )
    # full support (and top-k = the vocabulary) is the plain divergence
    assert distill_loss(Q[None, None], P[None, None], mask, kl_support="topk", topk=3).item() == pytest.approx(
        0.085123, abs=1e-6
    )
    with pytest.raises(ValueError, match="topk"):
        restrict_support(Q[None], P[None], "topk", 0)
    with pytest.raises(ValueError, match="kl_support"):
        ArmConfig(kl_support="topk", topk=0)


def test_reference_nll_is_the_summed_nll_of_the_correct_response(tok):
    """test_nll per item: -sum_t log p(c_t | student prompt, c_<t) over the concise correct response and <eos>,
    computed here from one unpadded forward pass per item; batching (padding) does not change it."""
    from agentpost.opsd import ARITHMETIC, reference_nll

    model = _tiny(seed=2)
    items = [Expression("48+24", "72"), Expression("48*15", "720")]  # with and without a scratchpad
    expected = []
    for e in items:
        prompt = tok(A.student_prompt(e), add_special_tokens=False).input_ids
        c = tok(A.response(e, "concise"), add_special_tokens=False).input_ids + [tok.eos_token_id]
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + c])).logits[0], -1)
        expected.append(-sum(logp[len(prompt) - 1 + t, c[t]].item() for t in range(len(c))))
    assert ARITHMETIC.reference_response(items[0]) == A.response(items[0], "concise")
    assert reference_nll(model, tok, items) == pytest.approx(expected, rel=1e-5)
    assert reference_nll(model, tok, items, batch_size=1) == pytest.approx(expected, rel=1e-5)
