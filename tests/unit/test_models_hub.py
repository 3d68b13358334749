"""The a100-hub profiles' weight loaders fail clearly where weights are unreachable (tests never download)."""

import pytest

from agentpost.models.hub import HubModelUnavailable, load_hub_model, require_hub_model


@pytest.mark.parametrize("loader", [load_hub_model, require_hub_model])
def test_nonexistent_model_offline_gives_clear_error(monkeypatch, loader):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubModelUnavailable, match="HF_HUB_OFFLINE is set.*huggingface-cli download"):
        loader("agentpost-test/does-not-exist-0B-Instruct")


@pytest.mark.parametrize("loader", [load_hub_model, require_hub_model])
def test_empty_name_is_refused(loader):
    with pytest.raises(ValueError, match="hub model id"):
        loader("")


def test_a_local_folder_without_weights_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(HubModelUnavailable, match="no config.json"):
        require_hub_model(str(tmp_path))


def test_a_local_folder_with_a_saved_model_loads(tmp_path):
    from agentpost.models.lm import tiny_random_lm
    from agentpost.models.tokenizer import load_tokenizer

    tiny_random_lm(0).save_pretrained(tmp_path)
    load_tokenizer().save_pretrained(tmp_path)
    assert require_hub_model(str(tmp_path)) == tmp_path
    tok, model = load_hub_model(str(tmp_path), dtype="float32")
    assert model.config.vocab_size == tiny_random_lm(0).config.vocab_size and tok.vocab_size > 0


def test_actkv_loads_a_hub_model_through_the_one_loader_in_eager_attention(tmp_path, monkeypatch):
    """ActKV reads attention weights, so its hub models load with eager attention, through load_hub_model."""
    import torch

    from agentpost.actkv.diagnostic import load_diagnostic_model
    from agentpost.models.lm import tiny_random_lm
    from agentpost.models.tokenizer import load_tokenizer

    tiny_random_lm(0).save_pretrained(tmp_path)
    load_tokenizer().save_pretrained(tmp_path)
    model, tok, label = load_diagnostic_model(str(tmp_path), dtype="float64")
    assert label == str(tmp_path) and not model.training and tok.vocab_size > 0
    assert model.config._attn_implementation == "eager" and model.dtype == torch.float64
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubModelUnavailable):
        load_diagnostic_model("agentpost-test/does-not-exist-0B-Instruct")
