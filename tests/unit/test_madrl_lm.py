"""MaD-RL with a Hugging Face causal LM as the policy: sampling/log-prob plumbing, a tiny end-to-end run through the
same loop as the GRU, and the a100-hub code path on a tiny random Qwen-architecture model saved to a folder."""

from functools import partial

import pytest
import torch

from agentpost.madrl.policies import HFPolicy, chat_prompt_fn
from agentpost.madrl.task import Problem, classify, prompt_text
from agentpost.madrl.train import DiagConfig, Run, run_diagnostic, sample
from agentpost.models import arith_lm


def _tiny_char_lm(seed=0):
    from transformers import Qwen3ForCausalLM

    cfg = arith_lm.config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(cfg).eval(), arith_lm.build_tokenizer()


def _problems(n=6):
    return [Problem("x" * i + f"question {i}: how many apples are left?", "<<5-2=3>>", 1) for i in range(n)]


def test_sampled_logprobs_equal_teacher_forced_recomputation_with_left_padding():
    model, tok = _tiny_char_lm()
    policy = HFPolicy(model, tok, 2, lambda p: p.question[-(3 + len(p.question) % 7) :] + "\n")
    ids, mask = policy.encode(_problems(4))
    assert (mask == 0).any()  # prompts of different lengths: left padding is exercised
    ids, mask = ids[None].expand(2, -1, -1), mask[None].expand(2, -1, -1)
    comp, logp, cmask = sample(policy, ids, mask, 10, torch.Generator().manual_seed(0))
    assert comp.shape == logp.shape == cmask.shape and comp.shape[:2] == (2, 4)
    assert (comp[~cmask] == tok.pad_token_id).all() and (logp[~cmask] == 0).all()
    torch.testing.assert_close(policy.logp(ids, mask, comp)[cmask], logp[cmask], rtol=1e-4, atol=1e-4)
    # a row's log-probabilities do not depend on the padding of the others: recompute row 0 alone
    n = int(mask[0, 0].sum())
    alone = policy.logp(ids[:, :1, -n:], mask[:, :1, -n:], comp[:, :1])
    torch.testing.assert_close(alone[cmask[:, :1]], logp[:, :1][cmask[:, :1]], rtol=1e-4, atol=1e-4)


def test_policy_stops_at_eos_and_decodes_up_to_it():
    model, tok = _tiny_char_lm()
    policy = HFPolicy(model, tok, 1, lambda p: p.question)
    row = tok("<<5-2=3>>", add_special_tokens=False).input_ids + [tok.eos_token_id] + tok("junk").input_ids
    assert policy.decode(row) == "<<5-2=3>>" and classify(policy.decode(row)) == (1, True)
    assert policy.stops(torch.tensor([[tok.eos_token_id, 5]]), torch.zeros(1, 2, dtype=torch.long)).tolist() == [
        [True, False]
    ]


def test_tiny_end_to_end_lm_run_through_the_shared_loop():
    model, tok = _tiny_char_lm()
    make = partial(HFPolicy, model, tok, prompt_fn=lambda p: prompt_text(p.question, 16))
    cfg = DiagConfig(
        steps=2,
        prompts_per_step=2,
        group_size=4,
        lr=1e-2,
        eval_prompts=3,
        eval_samples=4,
        max_new_chars=8,
        kl_coef=0.04,
    )
    runs = [Run("correctness", "u", 0), Run("jsd", "u", 0), Run("mixture", "u", 1, lr=1e-3)]
    before = [p.detach().clone() for p in model.parameters()]
    out = run_diagnostic(make, runs, {"u": [0.2] * 5}, _problems(), _problems(), cfg, sample_seed=0, progress=False)
    assert [len(h) for h in out["history"]] == [2, 2, 2]
    assert all(h[0]["counts"].sum() == 8 for h in out["history"])
    for f in out["final"]:
        assert f["jsd_per_prompt"].shape == (3,) and f["pooled_counts"].sum() == 12
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the base model is never trained


def test_hub_arm_code_path_runs_on_a_tiny_random_qwen_folder(tmp_path):
    from agentpost.models.hub import load_hub_model
    from agentpost.models.lm import tiny_random_lm
    from agentpost.models.tokenizer import load_tokenizer

    tiny_random_lm(0).save_pretrained(tmp_path)
    load_tokenizer().save_pretrained(tmp_path)
    tok, model = load_hub_model(str(tmp_path), dtype="float32")
    make = partial(HFPolicy, model, tok, prompt_fn=chat_prompt_fn(tok), device="cpu")
    cfg = DiagConfig(
        steps=1,
        prompts_per_step=1,
        group_size=4,
        lr=1e-3,
        eval_prompts=2,
        eval_samples=2,
        max_new_chars=6,
        kl_coef=0.04,
        copies_per_policy=1,
    )
    runs = [Run("correctness", "u", 0), Run("reverse_kl", "u", 0)]
    out = run_diagnostic(make, runs, {"u": [0.2] * 5}, _problems(), _problems(), cfg, sample_seed=0, progress=False)
    assert all(f["pooled_counts"].sum() == 4 for f in out["final"])


def test_chat_prompt_uses_the_template_when_there_is_one():
    class Tok:
        chat_template = "x"

        def apply_chat_template(self, messages, **kw):
            assert kw["add_generation_prompt"] and not kw["tokenize"]
            return "<user>" + messages[0]["content"] + "<assistant>"

    p = chat_prompt_fn(Tok())(Problem("How many  eggs?", "<<1+1=2>>", 0))
    assert p.startswith("<user>Write only the first calculation") and p.endswith("How many eggs?<assistant>")


def test_hf_policy_needs_an_end_of_sequence_token():
    model, tok = _tiny_char_lm()
    model.generation_config.eos_token_id = None
    tok.eos_token = None
    with pytest.raises(ValueError, match="end-of-sequence"):
        HFPolicy(model, tok, 1, lambda p: p.question)


def test_committed_annotation_lm_matches_its_receipt_and_size_limit():
    import json

    from agentpost.record.hashing import sha256_file
    from agentpost.madrl.annotation_lm import ARCH, ASSET_DIR, load_annotation_lm

    receipt = json.loads((ASSET_DIR / "receipt.json").read_text())
    weights = ASSET_DIR / "model.safetensors"
    assert sha256_file(weights) == receipt["checkpoint"]["sha256"] and weights.stat().st_size <= 25 * 2**20
    model, tok = load_annotation_lm()
    assert sum(p.numel() for p in model.parameters()) == receipt["parameters"]
    assert all(getattr(model.config, k) == v for k, v in ARCH.items())
    assert tok.decode(tok("<<48/2=24>>").input_ids) == "<<48/2=24>>"


def test_annotation_lm_script_writes_a_loadable_checkpoint(tmp_path):
    from agentpost.madrl.annotation_lm import load_annotation_lm, train

    _, _, receipt = train(
        tmp_path,
        steps=2,
        batch=4,
        lr=1e-3,
        seed=0,
        arch=dict(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
        ),
    )
    assert receipt["splits"]["validation (held out)"] == 500 and (tmp_path / "receipt.json").is_file()
    model, _ = load_annotation_lm(tmp_path)
    assert model.config.hidden_size == 16


def test_missing_annotation_lm_names_the_training_command(tmp_path):
    from agentpost.madrl.annotation_lm import load_annotation_lm

    with pytest.raises(FileNotFoundError, match="agentpost.madrl.annotation_lm"):
        load_annotation_lm(tmp_path)
