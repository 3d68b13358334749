"""The GPU profile's hub loader fails clearly where weights are unreachable (never downloads in tests)."""

import pytest

from agentpost.toolsearcher.hub import HubModelUnavailable, load_policy_model


def test_nonexistent_model_offline_gives_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubModelUnavailable, match="HF_HUB_OFFLINE is set.*huggingface-cli download"):
        load_policy_model("agentpost-test/does-not-exist-0B-Instruct")


def test_empty_name_is_refused():
    with pytest.raises(ValueError, match="hub model id"):
        load_policy_model("")
