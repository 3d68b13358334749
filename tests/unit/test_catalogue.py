"""The catalogue lists every paper of the book from the start, each with claims and gaps."""

from agentpost.catalogue import chapters
from agentpost.project import project_root

PAPERS = {"toolsearcher", "actkv", "kite", "opsd", "madrl", "graft", "deltas", "codeskills", "muser"}


def test_all_nine_papers_and_the_protocol_chapter():
    ids = {c.id for c in chapters()}
    assert ids == PAPERS | {"paired-protocol"}


def test_every_entry_is_complete_and_points_at_its_spec():
    specs = project_root().parent / "shared" / "papers"
    for c in chapters():
        assert c.claims and c.gaps, c.id
        assert len({cl.id for cl in c.claims}) == len(c.claims), c.id
        if c.spec and specs.is_dir():
            assert (specs / c.spec).is_file(), (c.id, c.spec)
        if c.started:
            assert "smoke" in c.profiles, c.id


def test_a_synthetic_claim_in_a_public_chapter_never_reaches_diagnostic(monkeypatch):
    from pathlib import Path

    from agentpost.catalogue import Chapter, Claim
    from agentpost.evidence import levels

    public, synthetic = Claim("C1", "on public data", ("m",)), Claim("C2", "on a synthetic MDP", ("m",), synthetic=True)
    chapter = Chapter("demo", "Demo", None, None, 1, (), False, (public, synthetic), ())
    runs = {
        ("demo", "smoke"): [
            levels.Run(Path(f"r{s}"), {"seed": s, "status": "ok", "kind": "profile", "metrics": {"m": s / 100}})
            for s in (42, 43, 44)
        ]
    }
    monkeypatch.setattr(levels, "counted_configuration", lambda group: group)
    monkeypatch.setattr(levels, "gpu_evidence_problems", lambda receipts: ["cpu"])
    assert levels.claim_status(chapter, public, {}, runs).levels["diagnostic"] is True
    status = levels.claim_status(chapter, synthetic, {}, runs)
    assert status.levels["diagnostic"] is False and "synthetic" in status.notes["diagnostic"]
