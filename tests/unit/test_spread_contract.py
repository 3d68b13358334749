"""No glued fingerprint is a hash of floats: a fingerprint that differs between CPU kernel paths hashed computed floats.

A fingerprint (an arm's starting checkpoint, its data version, an item-text matrix) names *what* a run used, so every
machine must agree on it; a hash of embeddings or of sampled or trained weights differs in its last bits between
kernel paths and then fails nbval on the next machine (``agentpost.record.outcomes.fingerprint``). The kernel-path
spread files record every string a glued name took on each measured path: a fingerprint with two values is the
defect, caught here before another machine finds it.
"""

import json
import re

import pytest

from agentpost.project import project_root

SPREAD = sorted((project_root() / "book" / "spread").glob("*.json"))
#: Names of glued values that are fingerprints (arm facts of ``arm_facts`` and chapter-specific ones).
FINGERPRINT = re.compile(r"(^|\.)(checkpoint|init|data_version|\w*fingerprint\w*|\w*_fp)$")


@pytest.mark.parametrize("path", SPREAD, ids=lambda p: p.stem)
def test_no_glued_fingerprint_differs_between_kernel_paths(path):
    rows = json.loads(path.read_text())["values"]
    varying = {
        name: row["values"] for name, row in rows.items() if FINGERPRINT.search(name) and len(row.get("values", [])) > 1
    }
    assert not varying, (
        f"{path.stem}: fingerprints that differ between kernel paths (a hash of computed floats; "
        f"fingerprint what determines them instead): {dict(list(varying.items())[:3])}"
    )


def test_the_rule_catches_the_float_hash_it_was_written_for():
    # muser's item-text fingerprint hashed the MiniLM embedding matrix: two AMD paths gave two values
    rows = {
        "outcomes_test_recall10.facts.semantic.item_text_fingerprint": {
            "values": ["32e7bf10a8abe298", "d2df1e64cc253f60"]
        },
        "outcomes_test_recall10.facts.semantic.checkpoint": {"values": ["a1"]},
        "selected_arm": {"values": ["x", "y"]},
    }
    caught = [n for n, r in rows.items() if FINGERPRINT.search(n) and len(r.get("values", [])) > 1]
    assert caught == ["outcomes_test_recall10.facts.semantic.item_text_fingerprint"]
