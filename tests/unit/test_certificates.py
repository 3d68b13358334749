"""Re-certification's rule on real committed runs and on edited copies: every per-item outcome is compared (read back
from outcomes.parquet), fingerprints by the arms they group, and certificates join configurations in every reader
(agentpost.evidence.certificates, agentpost.run.recertify)."""

import copy
import json
from pathlib import Path

from agentpost.evidence import certificates
from agentpost.evidence import receipt as rc
from agentpost.evidence.levels import Run, configurations
from agentpost.evidence.run_store import OUTCOMES_NAME
from agentpost.evidence.spread import glued_with_kind
from agentpost.record.recording import SCRAP_MIME
from agentpost.run.recertify import run_notebook


def _committed_run(chapter: str) -> Path:
    return next(d for d in rc.run_dirs(rc.runs_root() / chapter) if (d / OUTCOMES_NAME).is_file())


def _outcomes_scrap(nb) -> dict:
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            scrap = (out.get("data") or {}).get(SCRAP_MIME)
            if scrap and isinstance(scrap["data"], dict) and scrap["data"].get("kind") == "outcomes":
                return scrap
    raise AssertionError("no outcomes scrap")


def test_the_compared_notebook_holds_every_per_item_outcome():
    run = _committed_run("graft")
    nb = run_notebook(run)
    n_items = sum(len(v) for v in _outcomes_scrap(nb)["data"]["arms"].values())
    leaves = {name for cell in nb.cells for name in glued_with_kind(cell.get("outputs"))}
    assert n_items > 0 and sum(1 for name in leaves if ".arms." in name and name.endswith("]")) >= n_items


def test_a_moved_per_item_outcome_is_named_and_a_renamed_fingerprint_is_not():
    run = _committed_run("graft")
    old = run_notebook(run)
    same, compared, facts = certificates.differences("graft", old, copy.deepcopy(old))
    assert same == [] and compared > 100 and facts > 0, same[:3]
    moved = copy.deepcopy(old)
    scrap = _outcomes_scrap(moved)
    arm = sorted(scrap["data"]["arms"])[0]
    scrap["data"]["arms"][arm][0] += 0.5
    found, _, _ = certificates.differences("graft", old, moved)
    assert len(found) == 1 and f"{scrap['name']}.arms.{arm}[0]" in found[0]
    renamed = copy.deepcopy(old)
    for facts_of_arm in _outcomes_scrap(renamed)["data"]["facts"].values():
        facts_of_arm["checkpoint"] = "another-text-" + str(facts_of_arm["checkpoint"])  # same grouping
    assert certificates.differences("graft", old, renamed)[0] == []
    regrouped = copy.deepcopy(old)
    arms = sorted(_outcomes_scrap(regrouped)["data"]["facts"])
    _outcomes_scrap(regrouped)["data"]["facts"][arms[0]]["checkpoint"] = "a start no other arm shares"
    assert any(
        "the arms sharing a checkpoint differ" in p for p in certificates.differences("graft", old, regrouped)[0]
    )


def _run(seed, code, end, stale=()):
    receipt = {
        "chapter": "kite",
        "profile": "cpu",
        "kind": "profile",
        "seed": seed,
        "status": "ok",
        "schema_version": 4,
        "hashes": {"source_notebook": "s", "parameters": "p", "code_tree": code, "data": {}},
        "timing": {"end": end},
    }
    return Run(Path(f"seed-{seed}-{code}"), receipt, [], list(stale))


def test_a_certificate_joins_the_configurations_and_the_re_run_counts_at_its_seed(tmp_path, monkeypatch):
    monkeypatch.setattr(rc, "runs_root", lambda: tmp_path)
    old = [_run(s, "old", f"2026-11-0{1 + s}T00:00:00", stale=["imported_code"]) for s in range(4)]
    new = [_run(0, "new", "2026-12-07T00:00:00")]
    assert [len(g) for g in configurations(old + new)] == [4, 1]  # no certificate: apart, the old batch stale
    check = certificates.SeedCheck(
        seed=0, old_run=old[0].path.name, new_run=new[0].path.name, values_compared=9, fingerprints_compared=2
    )
    path = certificates.write("kite", "cpu", old[0].receipt, new[0].receipt, [check])
    (group,) = configurations(old + new)
    assert sorted(r.receipt["seed"] for r in group) == [0, 1, 2, 3] and new[0] in group and old[0] not in group
    assert all(r.certified_by == [path.name] for r in old) and all(not r.current_stale for r in group)
    body = json.loads(path.read_text()) | {"to_configuration": "0" * 64}
    path.write_text(json.dumps(body))  # an edited certificate links nothing
    assert certificates.problems(path) == ["the certificate was edited after sealing"]
    assert [len(g) for g in configurations(old + new)] == [4, 1]


def test_a_batch_an_earlier_certificate_linked_is_re_certified_configuration_by_configuration(monkeypatch):
    """Seed 42 is a re-run (its own configuration), seeds 43-45 the old runs: each configuration is certified on its
    own seeds (before, the default seeds [42, 43] were refused as coming from several configurations)."""
    from agentpost.run import recertify as rz

    def stale_run(seed: int, config: str) -> Run:
        receipt = {"seed": seed, "timing": {"wall_s": 60.0}, "config": config}
        return Run(Path(f"seed-{seed}"), receipt, stale=["imported_code.x"])

    batch = [stale_run(42, "rerun"), *(stale_run(s, "old") for s in (43, 44, 45))]
    certified: list[list[int]] = []
    monkeypatch.setattr(rz, "_stale_batch", lambda chapter, profile: batch)
    monkeypatch.setattr(rz.rc, "configuration_key", lambda receipt: receipt["config"])
    monkeypatch.setattr(rz, "_check_certifiable", lambda chapter, profile, old: None)

    def certify(chapter, profile, old, *, jobs, backend):
        certified.append(sorted(old))
        return rz.Outcome(Path(f"cert-{min(old)}.json"), message=f"certified {sorted(old)}")

    monkeypatch.setattr(rz, "_certify", certify)
    outcome = rz.recertify("x", "cpu")
    assert certified == [[42], [43, 44, 45]]
    assert outcome.certificate == Path("cert-43.json") and "certified [42]" in outcome.message
    certified.clear()
    assert rz.recertify("x", "cpu", [42, 44]).certificate is not None and certified == [[42], [44]]
