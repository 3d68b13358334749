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
