"""The shared GSM8K-derived arithmetic task and the project's arithmetic LM (formats, tokenizer, checkpoint)."""

import json

import numpy as np
import pytest

from agentpost.data.gsm8k import Expression, annotations, arithmetic_split
from agentpost.models import arith_lm as A


def test_annotations_are_read_from_gsm8k():
    train = annotations("train")
    assert train[:2] == ["48/2=24", "48+24=72"]  # the first problem's calculator annotations


def test_splits_are_disjoint_and_test_never_seen_in_train():
    tr, va, te = (arithmetic_split(s) for s in ("train", "validation", "test"))
    assert len(tr) == 4324 and len(va) == 498 and len(te) == 464
    texts = [{e.text for e in x} for x in (tr, va, te)]
    assert not (texts[0] & texts[1]) and not (texts[0] & texts[2]) and not (texts[1] & texts[2])
    assert all(eval(e.text.replace("/", "//")) == int(e.result) or "/" in e.text for e in tr[:200])
    with pytest.raises(ValueError, match="split"):
        arithmetic_split("dev")


def test_tokenizer_is_character_level_and_round_trips():
    tok = A.build_tokenizer()
    e = Expression("48/2", "24")
    text = A.teacher_prompt(e) + A.response(e, "rebox", wrong="23") + "<eos>"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids) == text
    assert tok("48/2", add_special_tokens=False).input_ids == [tok.convert_tokens_to_ids(c) for c in "48/2"]
    assert (tok.pad_token_id, tok.eos_token_id) == (0, 1)


def test_response_styles_and_wrong_values():
    e = Expression("48/2", "24")
    pad = "048/2: 00/2=0r0, 04/2=2r0, 08/2=4r0; 024"
    assert A.response(e, "concise") == f"{pad}. 48/2 = 24. The answer is \\boxed{{24}}."
    assert A.response(e, "corrected", wrong="23") == f"48/2 = 23. Wait, {pad}. 48/2 = 24. The answer is \\boxed{{24}}."
    assert A.boxed_values(A.response(e, "rebox", wrong="23")) == ["23", "24"]
    rng = np.random.default_rng(0)
    assert all(A.wrong_value("0", rng) not in ("0",) and int(A.wrong_value("7", rng)) >= 0 for _ in range(50))
    with pytest.raises(ValueError, match="style"):
        A.response(e, "poem")


@pytest.mark.parametrize(
    "line, pad",
    [
        # by hand: 8+4 = 12 -> digit 2 carry 1; 4+2+1 = 7; 0+0 = 0 -> 072
        ("48+24=72", "048+024: 8+4+0=2c1, 4+2+1=7c0, 0+0+0=0c0; 072"),
        # 6-8 < 0 -> 16-8 = 8 borrow 1; 2-4-1 < 0 -> 12-5 = 7 borrow 1; 1-0-1 = 0 -> 078
        ("126-48=78", "126-048: 6-8-0=8b1, 2-4-1=7b1, 1-0-1=0b0; 078"),
        # 68*3: 8*3 = 24 -> 4 carry 2; 6*3+2 = 20 -> 0 carry 2; 0*3+2 = 2 -> 204 (the one-digit factor goes last)
        ("3*68=204", "068*3: 8*3+0=4c2, 6*3+2=0c2, 0*3+2=2c0; 204"),
        # long division 765/3: 7/3 = 2 r 1; 16/3 = 5 r 1; 15/3 = 5 r 0 -> 255
        ("765/3=255", "765/3: 07/3=2r1, 16/3=5r1, 15/3=5r0; 255"),
        ("48*15=720", None),  # two multi-digit factors: no scratchpad
        ("252/12=21", None),  # a multi-digit divisor: no scratchpad
    ],
)
def test_scratchpad_worked_by_hand(line, pad):
    text, result = line.split("=")
    e = Expression(text, result)
    assert A.scratchpad(e) == pad
    assert A.response(e, "concise").endswith(f"{text} = {result}. The answer is \\boxed{{{result}}}.")


def test_scratchpad_reads_off_every_train_result_and_responses_fit_the_token_cap():
    from agentpost.models.train_arith_lm import Hyper

    tok, rng = A.build_tokenizer(), np.random.default_rng(0)
    for e in arithmetic_split("train"):
        pad = A.scratchpad(e)
        assert pad is None or int(pad.rsplit("; ", 1)[1]) == int(e.result), e
        longest = max(len(tok(A.response(e, s, rng), add_special_tokens=False).input_ids) + 1 for s in A.STYLES)
        assert longest <= Hyper().max_new_tokens, e


def test_load_names_the_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_arith_lm"):
        A.load(tmp_path)


def test_committed_checkpoint_loads_and_matches_its_receipt():
    model, tok = A.load()
    receipt = json.loads((A.ASSET_DIR / "receipt.json").read_text())
    assert sum(p.numel() for p in model.parameters()) == receipt["parameters"]
    assert (A.ASSET_DIR / "model.safetensors").stat().st_size <= 25 * 2**20
    assert receipt["task"]["trained_on"] == "train only"
    out = A.generate(model, tok, [A.teacher_prompt(Expression("120+15", "135"))], max_new_tokens=160)
    assert out[0]["eos"]  # the pretrained model ends its answers


def test_pretraining_examples_cover_the_three_roles():
    from agentpost.models.train_arith_lm import Hyper, example

    e, rng, hp = Expression("48/2", "24"), np.random.default_rng(0), Hyper()
    prompt, target = example(e, 0, rng, hp)
    assert prompt == A.student_prompt(e) and A.final_answer(target) == "24"
    assert example(e, 1, rng, hp)[0] == A.teacher_prompt(e, "assistant")
    assert example(e, 2, rng, hp)[0] == A.teacher_prompt(e, "user")
    prompt, target = example(e, 3, rng, hp)
    assert prompt.startswith(A.USER + "Compute 48/2.\nPrevious answer: ")
    assert target == A.concise_rewrite(e, A.final_answer(prompt.split("Previous answer: ")[1]))


def test_pretraining_script_runs_and_writes_a_loadable_checkpoint(tmp_path):
    from agentpost.models.train_arith_lm import Hyper, train

    arch = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    receipt = train(tmp_path, Hyper(steps=2, batch=4, eval_items=2, max_new_tokens=8, warmup_steps=1), arch=arch)
    assert receipt["task"]["splits"] == {"train": 4324, "validation": 498, "test": 464}
    assert receipt["evaluation_greedy"]["test"]["items"] == 2
    model, tok = A.load(tmp_path)
    assert model.config.hidden_size == 32 and tok.decode(tok("7*6").input_ids) == "7*6"
    again = train(tmp_path / "b", Hyper(steps=1, batch=4, eval_items=1, max_new_tokens=4), init=tmp_path)
    assert len(again["previous_phases"]) == 1 and again["previous_phases"][0]["hyperparameters"]["steps"] == 2
