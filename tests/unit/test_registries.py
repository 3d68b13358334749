"""Every name -> implementation table of the chapters is one :class:`agentpost.registry.Registry`: a second entry under
a taken name is refused, and an unknown name is one error (UnknownName, a KeyError and a ValueError) that names it and
the known ones."""

from __future__ import annotations

import pytest

from agentpost.actkv.diagnostic import VARIANTS as ACTKV_VARIANTS
from agentpost.graft.train import ARM_SPECS, TrainConfig
from agentpost.registry import Registry, UnknownName
from agentpost.toolsearcher.train import VARIANTS as TOOLSEARCHER_VARIANTS


def test_the_tables_are_registries():
    assert all(isinstance(t, Registry) for t in (ACTKV_VARIANTS, ARM_SPECS, TOOLSEARCHER_VARIANTS))


def test_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="GRAFT method 'grpo' is already registered"):
        ARM_SPECS.register("grpo")(("grpo", {}, {}))
    assert ARM_SPECS["grpo"] == ("grpo", {}, {})  # the first entry stays


def test_an_unknown_graft_arm_is_named_with_the_known_ones():
    with pytest.raises(UnknownName) as err:
        TrainConfig(method="graft_tdd")
    assert str(err.value) == f"unknown GRAFT method 'graft_tdd'; known: {sorted(ARM_SPECS)}"
    assert isinstance(err.value, ValueError)  # callers that caught the former ValueError still do


def test_toolsearcher_readings_are_distinct():
    readings = list(TOOLSEARCHER_VARIANTS.values())
    assert len(set(readings)) == len(readings) == 5
    assert readings[0] == ("grpo", "none", "zero")


def test_a_second_skill_under_one_name_is_refused():
    pytest.importorskip("minihack")
    from agentpost.codeskills.skills import SKILLS, skill

    def explore_room(bot):  # the name of a registered skill
        yield

    before = SKILLS["explore_room"]
    with pytest.raises(ValueError, match="skill 'explore_room' is already registered"):
        skill("a second explore_room")(explore_room)
    assert SKILLS["explore_room"] is before
    assert isinstance(SKILLS, Registry)
