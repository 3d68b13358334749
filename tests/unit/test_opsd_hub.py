"""The a100-hub path of the OPSD chapter (real GSM8K problems, a LoRA-wrapped Qwen3 hub model) runs end to end on
CPU with a tiny random Qwen3-architecture model saved to a local folder (never a download), and the teacher
policies act on the adapter tensors only."""

import numpy as np
import pytest
import torch
import transformers

from agentpost.data import gsm8k
from agentpost.models import arith_lm as A
from agentpost.models.hub import load_hub_model, require_hub_model, with_lora
from agentpost.opsd import ArmConfig, Gates, GSM8KChat, make_sync, train_arm, trainable
from agentpost.opsd.diagnostic import arm_grid, run_arms

# A Qwen3-style chat template (non-thinking mode opens the assistant turn with an empty think block).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
    "not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def save_tiny_qwen3(folder) -> str:
    """A random 2-layer Qwen3 (hidden 32) and a character tokenizer with a chat template whose EOS is
    ``<|im_end|>`` (as Qwen3's), saved with ``save_pretrained``: a stand-in for a hub folder."""
    tok = A.build_tokenizer()
    tok.eos_token = "<|im_end|>"
    tok.chat_template = CHAT_TEMPLATE
    cfg = transformers.Qwen3Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def tiny_hub(tmp_path_factory):
    return save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture(scope="module")
def lora_model(tiny_hub):
    tok, model = load_hub_model(tiny_hub, dtype="float32")
    return tok, with_lora(model, rank=4, alpha=8)


JANET = gsm8k.problems("test")[0]


def test_gsm8k_problem_fields_and_splits():
    assert gsm8k.final_answer(JANET["answer"]) == "18"
    assert (
        gsm8k.solution(JANET["answer"]).splitlines()[1]
        == "She makes 9 * 2 = $18 every day at the farmer\u2019s market."
    )
    assert gsm8k.final_answer("so 1,000 in all\n#### 1,000") == "1000"
    train, val = gsm8k.problem_split("train"), gsm8k.problem_split("validation")
    assert len(train) + len(val) == len(gsm8k.problems("train")) and 0.05 < len(val) / len(train) < 0.15
    assert not {p["question"] for p in train} & {p["question"] for p in val}
    with pytest.raises(ValueError, match="####"):
        gsm8k.final_answer("no marker")
    with pytest.raises(ValueError, match="problem split"):
        gsm8k.problem_split("dev")


def test_gsm8k_chat_roles_and_answer_check(lora_model):
    tok, _ = lora_model
    task = GSM8KChat(tok)
    s, a, u = task.student_prompt(JANET), task.teacher_prompt(JANET, "assistant"), task.teacher_prompt(JANET, "user")
    assert s.startswith("<|im_start|>user\nJanet") and s.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert a.startswith(s) and "Reference solution:\nJanet sells 16 - 3 - 4 = 9 duck eggs" in a.split(s)[1]
    assert "<<" not in a and "The answer is \\boxed{18}." in a
    assert "Reference solution:" in u.split("<|im_start|>assistant")[0] and u.endswith("</think>\n\n")
    assert "Previous answer:\nmy try" in task.refine_prompt(JANET, "my try") and "Reference" not in task.refine_prompt(
        JANET, "x"
    )
    for text, ok in (
        ("so \\boxed{18}", True),
        ("\\boxed{\\$18}", True),
        ("\\boxed{18.0}.", True),
        ("\\boxed{17} then \\boxed{18}", True),
        ("\\boxed{18} then \\boxed{17}", False),
        ("18", False),
    ):
        assert task.is_correct(text, JANET) is ok, text
    assert task.wrong_answer(JANET, np.random.default_rng(0)) != "18"
    end, revision = task.probe_texts(JANET, "17")
    assert end.endswith("The answer is \\boxed{17}.") and revision.endswith("So the answer is 17. ")
    with pytest.raises(ValueError, match="layout"):
        task.teacher_prompt(JANET, "system")
    with pytest.raises(ValueError, match="chat template"):
        GSM8KChat(A.build_tokenizer())


def test_lora_trains_only_adapters_and_starts_as_the_base(tiny_hub, lora_model):
    tok, model = lora_model
    names = list(trainable(model))
    assert names and all("lora_" in n for n in names)
    ids = torch.tensor([tok("<|im_start|>user\nhi", add_special_tokens=False).input_ids])
    _, base = load_hub_model(tiny_hub, dtype="float32")
    assert torch.allclose(model(input_ids=ids).logits, base(input_ids=ids).logits)  # B = 0 at creation
    with pytest.raises(ValueError, match="rank"):
        with_lora(base, rank=0, alpha=8)


@pytest.mark.claim("opsd", "C3")
@pytest.mark.parametrize(
    "policy, kw, expected",
    [
        ("frozen", {}, [0.0, 0.0, 0.0]),  # the initial adapters: B = 0
        ("live", {}, [1.0, 2.0, 3.0]),  # the student's adapters after each step
        ("ema", dict(ema_decay=0.3), [0.7, 1.61, 2.583]),  # 0.3*0 + 0.7*1; 0.3*0.7 + 0.7*2; 0.3*1.61 + 0.7*3
        ("periodic", dict(sync_every=2), [0.0, 2.0, 2.0]),
    ],
)
def test_teacher_holds_these_adapter_weights_after_k_steps(lora_model, policy, kw, expected):
    """Every adapter B tensor of the student is set to k after step k (A tensors are left as initialised); the
    teacher's B tensors must hold ``expected[k - 1]`` and its A tensors the initial ones; base weights are never
    part of the teacher's state, and inside ``as_teacher`` the frozen teacher computes exactly the base model."""
    import copy

    _, model0 = lora_model
    student = copy.deepcopy(model0)
    sync = make_sync(policy, **kw)
    sync.start(student)
    a0 = {n: p.detach().clone() for n, p in trainable(student).items() if "lora_A" in n}
    for k in range(1, 4):
        with torch.no_grad():
            for n, p in trainable(student).items():
                if "lora_B" in n:
                    p.fill_(float(k))
        sync.after_step(k, student)
        w = sync.weights()
        assert set(w) == set(trainable(student)) and not any("base_layer" in n for n in w)
        for n, t in w.items():
            if "lora_B" in n:
                assert torch.allclose(t, torch.full_like(t, expected[k - 1])), (policy, k, n)
            else:
                assert torch.allclose(t, a0[n]), (policy, k, n)
    ids = torch.tensor([[5, 6, 7, 8]])
    with sync.as_teacher() as teacher, torch.no_grad():
        t_logits = teacher(input_ids=ids).logits
        with student.disable_adapter():
            base_logits = student(input_ids=ids).logits
    assert torch.allclose(t_logits, base_logits) == (policy == "frozen")
    assert all(torch.all(p == 3.0) for n, p in trainable(student).items() if "lora_B" in n)  # swapped back


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_a100_hub_path_runs_end_to_end_on_cpu(tiny_hub, one_thread):
    """require -> load -> LoRA -> every arm (OPSD, frozen, DCE, EMA, periodic, DCE user-side, +SRCL) on real GSM8K problems -> held-out
    scores, losses and probe curves; the base weights never move, the adapters do."""
    assert str(require_hub_model(tiny_hub)) == tiny_hub
    tok, model = load_hub_model(tiny_hub, dtype="float32")
    model = with_lora(model, rank=4, alpha=8).to("cpu")
    task = GSM8KChat(tok)
    train, val, test = (
        gsm8k.problem_split("train")[:6],
        gsm8k.problem_split("validation")[:2],
        gsm8k.problem_split("test")[:2],
    )
    base = ArmConfig(batch=2, updates=2, max_new_tokens=6, sync_every=1, lr=1e-2, gates=Gates(min_tokens=1))
    arms = arm_grid(base, ema_decays=(0.3,))
    runs = run_arms(
        model, tok, train, {"test": test}, arms, 0, task=task, probe_pool=val, n_probe=2, probe_every=2, progress=False
    )
    assert set(runs) == {"opsd", "frozen", "dce", "ema_0p3", "periodic", "dce_user", "frozen_srcl", "dce_srcl"}
    for arm, r in runs.items():
        assert len(r["eval"]["test"]["correct"]) == 2 and all(1 <= n <= 6 for n in r["eval"]["test"]["length"])
        assert len(r["log"]["loss_g"]) == 2 and all(np.isfinite(r["log"]["loss_g"]))
        assert [p["step"] for p in r["log"]["probe"]] == [0, 2]
        assert all(0.0 <= v <= 1.0 for p in r["log"]["probe"] for k, v in p.items() if k != "step")
        assert (len(r["log"]["loss_s"]) == 2) == arm.endswith("srcl")
    # run_arms trains copies: the wrapped model itself is untouched
    assert all(torch.all(p == 0) for n, p in trainable(model).items() if "lora_B" in n)
    # one DCE run: the adapters move, the base weights do not
    student, _ = train_arm(model, tok, train, base, 0, task=task, progress=False)
    trained = dict(student.named_parameters())
    assert any(torch.any(p != 0) for n, p in trainable(student).items() if "lora_B" in n)
    assert all(torch.equal(p, trained[n]) for n, p in model.named_parameters() if "base_layer" in n or "embed" in n)


def _run_notebook(tmp_path, **parameters):
    import papermill as pm

    from agentpost.project import project_root

    root = project_root()
    return pm.execute_notebook(
        str(root / "notebooks" / "opsd.ipynb"),
        str(tmp_path / "out.ipynb"),
        kernel_name="python3",
        cwd=str(root / "notebooks"),
        parameters=parameters,
        progress_bar=False,
    )


def test_notebook_a100_hub_offline_without_weights_stops_before_any_work(tmp_path, monkeypatch):
    import papermill as pm

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(pm.PapermillExecutionError) as err:
        _run_notebook(tmp_path, hub_model="agentpost-test/does-not-exist-0.6B")
    # the third code cell to run (parameters, injected parameters, set-up) fails, so no data or model is touched
    assert err.value.ename == "HubModelUnavailable" and err.value.exec_count == 3
    assert "require_hub_model(hub_model)" in err.value.source


@pytest.mark.slow
def test_notebook_a100_hub_runs_end_to_end_with_a_tiny_local_qwen3(tiny_hub, tmp_path, monkeypatch):
    """The chapter notebook with ``hub_model`` = the tiny local folder: LoRA, real GSM8K problems, every arm once
    at the run's seed, per-item outcomes recorded; tiny sizes (a run check, not evidence)."""
    import scrapbook as sb

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    _run_notebook(
        tmp_path,
        hub_model=tiny_hub,
        device="cpu",
        updates=1,
        batch=2,
        max_new_tokens=6,
        n_test=2,
        n_validation=2,
        n_probe=2,
        probe_every=1,
        lr_grid=[0.01],
        ema_decays=[0.3],
        lora_rank=4,
        lora_alpha=8.0,
        min_tokens=1,
    )
    scraps = sb.read_notebook(str(tmp_path / "out.ipynb")).scraps
    assert scraps["n_test_scored"].data == 2 and 0.0 <= scraps["test_accuracy_dce"].data <= 1.0
    outcomes = scraps["outcomes_test_accuracy"].data
    assert {"opsd", "dce", "dce_user", "pretrained"} <= set(outcomes["arms"]) and len(outcomes["items"]) == 2
