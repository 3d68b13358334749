"""GPU-evidence rules, receipt sealing and parameter checks on hand-built inputs."""

import copy

import pytest

from agentpost.catalogue import chapter
from agentpost.evidence.receipt import seal
from agentpost.evidence.validate import gpu_device_allowed, gpu_evidence_problems
from agentpost.errors import UsageError
from agentpost.catalogue.params import (
    SEED_RANGE,
    Declared,
    check_parameters,
    parse_declaration,
    parse_overrides,
    parse_seeds,
)

H200 = {"kind": "cuda", "name": "NVIDIA H200", "count": 1}


def receipt(seed, device=H200, code="c1", status="ok", torch_cuda="12.8", cuda_event_ms=0.31, kind="profile"):
    return {
        "chapter": "kite",
        "profile": "a100",
        "kind": kind,
        "seed": seed,
        "status": status,
        "device": device,
        "packages": {"torch": "2.13.0", "torch_cuda": torch_cuda},
        "metrics": {"run_environment": {"device": device, "cuda_event_ms": cuda_event_ms}},
        "hashes": {
            "source_notebook": "s",
            "parameters": "p",
            "code_tree": code,
            "data": {},
            "output_notebook": str(seed),
        },
    }


def test_allowed_devices():
    assert gpu_device_allowed(H200)
    assert gpu_device_allowed({"kind": "cuda", "name": "NVIDIA A100-SXM4-80GB"})
    assert not gpu_device_allowed({"kind": "cuda", "name": "NVIDIA GeForce RTX 4090"})
    assert not gpu_device_allowed({"kind": "cpu", "name": "H100 lookalike CPU"})


def test_gpu_evidence_needs_three_matching_seeds_on_allowed_devices():
    assert gpu_evidence_problems([receipt(s) for s in (1, 2, 3)]) == []
    assert "at least 3" in " ".join(gpu_evidence_problems([receipt(s) for s in (1, 2)]))
    mixed = [receipt(1), receipt(2), receipt(3, code="c2")]
    assert "differ in more than the seed" in " ".join(gpu_evidence_problems(mixed))
    consumer = [receipt(1), receipt(2), receipt(3, device={"kind": "cuda", "name": "RTX 3090"})]
    assert "seeds [3] did not run on an allowed CUDA device" in " ".join(gpu_evidence_problems(consumer))
    failed = [receipt(1), receipt(2), receipt(3, status="failed")]
    assert "seeds [3] failed" in " ".join(gpu_evidence_problems(failed))


def test_gpu_evidence_needs_facts_a_cpu_run_cannot_produce():
    no_cuda_torch = [receipt(1), receipt(2, torch_cuda=None), receipt(3)]
    assert "seeds [2] record no CUDA build of torch" in " ".join(gpu_evidence_problems(no_cuda_torch))
    no_events = [receipt(1, cuda_event_ms=None), receipt(2), receipt(3, cuda_event_ms=0.0)]
    assert "seeds [1, 3] recorded no CUDA event timing" in " ".join(gpu_evidence_problems(no_events))
    adhoc = [receipt(s, kind="ad-hoc") for s in (1, 2, 3)]
    assert "seeds [1, 2, 3] are ad-hoc runs" in " ".join(gpu_evidence_problems(adhoc))


def test_seal_detects_any_edit():
    sealed = seal(receipt(1))
    assert seal(sealed)["receipt_sha256"] == sealed["receipt_sha256"]
    edited = copy.deepcopy(sealed)
    edited["device"]["name"] = "NVIDIA A100"
    assert seal(edited)["receipt_sha256"] != sealed["receipt_sha256"]


def test_parameter_checks_name_the_culprit():
    protocol = chapter("paired-protocol")
    assert check_parameters(protocol, {"n_boot": 10, "train_fraction": 1}, source="t") == {
        "n_boot": 10,
        "train_fraction": 1.0,
    }
    with pytest.raises(UsageError, match="unknown parameter 'nboot'"):
        check_parameters(protocol, {"nboot": 10}, source="t")
    with pytest.raises(UsageError, match="'n_boot' must be int"):
        check_parameters(protocol, {"n_boot": True}, source="t")
    with pytest.raises(UsageError, match="set by the seed list"):
        check_parameters(protocol, {"seed": 3}, source="t")
    assert parse_overrides(["a=1", "b=[1, 2]", "c=text", "d=0.5"]) == {"a": 1, "b": [1, 2], "c": "text", "d": 0.5}
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_overrides(["novalue"])
    assert parse_seeds("1,2", None, "t") == [1, 2]
    with pytest.raises(UsageError, match="empty"):
        parse_seeds(None, [], "t")
    with pytest.raises(UsageError, match="duplicate"):
        parse_seeds("1,1", None, "t")
    assert parse_seeds(None, [0, SEED_RANGE[1]], "t") == [0, 2**32 - 1]
    with pytest.raises(UsageError, match="outside the seed range"):
        parse_seeds(None, [2**32], "t")


@pytest.mark.parametrize(
    "comment,declared",
    [
        ("fraction of articles (range: 0..1)", Declared(0, 1)),
        ("count (range: 1..)", Declared(1, None)),
        ("(range: ..0.5) an upper bound only", Declared(None, 0.5)),
        ("step of the (a, b) grid (range: 0.01..1)", Declared(0.01, 1)),
        ("(range: -2.5..-1)", Declared(-2.5, -1)),
        (
            "gate placement (choices: after_norm | before_norm | none)",
            Declared(choices=("after_norm", "before_norm", "none")),
        ),
        ("no declaration here (a..b)", None),
    ],
)
def test_declarations_in_parameter_comments(comment, declared):
    assert parse_declaration(comment) == declared


def test_declared_values_are_checked_element_by_element():
    assert Declared(0, 1).problem(0) is None and Declared(0, 1).problem(1.0) is None  # inclusive bounds
    assert Declared(0, 1).problem(1.5) == "1.5 is outside its range 0..1"
    assert Declared(1, None).problem([3, 0, 2]) == "0 is outside its range 1.."  # each element of a list
    assert Declared(1, None).problem({"a": 2, "b": -1}) == "-1 is outside its range 1.."  # each value of a mapping
    assert Declared(choices=("a", "b")).problem(["a", "c"]) == "'c' is not one of the choices a | b"
    with pytest.raises(UsageError, match="'x': write its declaration"):
        parse_declaration("(range: 5)", "x")
    with pytest.raises(UsageError, match="the bound 'y'"):
        parse_declaration("(range: y..)", "x")
    protocol = chapter("paired-protocol")
    with pytest.raises(UsageError, match="'train_fraction' = 5: 5 is outside its range 0..1"):
        check_parameters(protocol, {"train_fraction": 5}, source="t")
