"""Tool-LM loader and config (the training itself is not tested here)."""

import pytest
import torch

from agentpost.models.lm import DEFAULT_DIR, load_tool_lm, tiny_random_lm, tool_lm_config
from agentpost.models.tokenizer import load_tokenizer


def test_config_is_gqa_with_long_rope():
    c = tool_lm_config()
    assert c.num_key_value_heads < c.num_attention_heads and c.num_attention_heads % c.num_key_value_heads == 0
    assert c.max_position_embeddings >= 4096 and c.tie_word_embeddings and c.vocab_size == 4096
    assert tool_lm_config(num_hidden_layers=2).num_hidden_layers == 2
    with pytest.raises(ValueError, match="grouped-query"):
        tool_lm_config(num_key_value_heads=8)


def test_from_pretrained_round_trip(tmp_path):
    model = tiny_random_lm(seed=1)
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    model.save_pretrained(tmp_path)
    load_tokenizer().save_pretrained(tmp_path)
    loaded, tok = load_tool_lm(tmp_path)
    ids = torch.tensor([tok("the tool <tool_call> call", add_special_tokens=False).input_ids])
    with torch.no_grad():
        a = model(ids).logits
        out = loaded(ids, output_attentions=True)
    torch.testing.assert_close(out.logits, a, rtol=0, atol=0)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (1, 4, ids.shape[1], ids.shape[1])
    torch.testing.assert_close(out.attentions[0].sum(-1), torch.ones(1, 4, ids.shape[1]))
    assert tok.convert_tokens_to_ids("<tool_call>") == 4
    assert any(tmp_path.glob("*.safetensors"))


def test_tiny_random_is_seeded():
    a, b = tiny_random_lm(seed=3), tiny_random_lm(seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_missing_checkpoint_names_path_and_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m agentpost.models.train_tool_lm") as err:
        load_tool_lm(tmp_path / "nowhere")
    assert "nowhere" in str(err.value)


@pytest.mark.skipif(not (DEFAULT_DIR / "config.json").is_file(), reason="committed checkpoint not trained yet")
def test_committed_checkpoint_loads():
    model, tok = load_tool_lm()
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    assert tok.convert_tokens_to_ids("</tool_call>") == 5
