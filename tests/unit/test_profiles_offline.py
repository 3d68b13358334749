"""Every chapter's ``a100`` profile runs offline; a profile that needs hub weights is named ``a100-hub`` (README,
"Running a GPU profile")."""

import re

import pytest
import yaml

from agentpost.project import project_root

PARAMS = project_root() / "params"
#: A Hugging Face hub model id ("Qwen/Qwen3-1.7B", "hub:Qwen/Qwen2.5-1.5B-Instruct"): org/name, no spaces.
HUB_ID = re.compile(r"^(hub:)?[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def hub_names(profile: dict) -> list[str]:
    """The hub model ids a profile names: org/name-shaped strings, ``hub:`` specs and a non-empty ``hub_model``."""
    params = profile.get("parameters") or {}
    found = [s for s in _strings(params) if HUB_ID.match(s) or s.startswith("hub:")]
    if params.get("hub_model"):
        found.append(params["hub_model"])
    return sorted(set(found))


def test_the_hub_name_detector_on_worked_examples():
    assert hub_names({"parameters": {"model_name": "Qwen/Qwen3-1.7B", "device": "cuda"}}) == ["Qwen/Qwen3-1.7B"]
    assert hub_names({"parameters": {"lm_policy": "hub:Qwen/Qwen2.5-1.5B-Instruct"}}) == [
        "hub:Qwen/Qwen2.5-1.5B-Instruct"
    ]
    assert hub_names({"parameters": {"hub_model": "./weights"}}) == ["./weights"]
    assert (
        hub_names(
            {
                "parameters": {
                    "model_name": "tool-lm",
                    "hub_model": "",
                    "lm_policy": "sft",
                    "tasks": ["MiniHack-Room-5x5-v0"],
                    "ratio": 0.5,
                }
            }
        )
        == []
    )


A100 = sorted(PARAMS.glob("*/a100.yaml"))


def test_every_chapter_with_profiles_has_an_a100_profile():
    chapters = {p.parent.name for p in PARAMS.glob("*/smoke.yaml")}
    assert chapters and chapters == {p.parent.name for p in A100}


@pytest.mark.parametrize("path", A100, ids=lambda p: p.parent.name)
def test_a100_profiles_name_no_hub_weights(path):
    named = hub_names(yaml.safe_load(path.read_text()))
    assert not named, (
        f"{path.relative_to(project_root())} must run offline but names hub weights {named}: move them to a100-hub.yaml"
    )


@pytest.mark.parametrize("path", sorted(PARAMS.glob("*/*.yaml")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_only_a100_hub_profiles_name_hub_weights(path):
    named = hub_names(yaml.safe_load(path.read_text()))
    if path.stem == "a100-hub":
        assert named, f"{path.relative_to(project_root())} is named for hub weights but names none"
    else:
        assert not named, (
            f"{path.relative_to(project_root())} names hub weights {named}; such a profile is named a100-hub"
        )
