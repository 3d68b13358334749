"""The catalogue: one YAML file per chapter, the single source of truth for ids, titles, notebooks, profiles,
claims and gaps. The ledger, the runner, the table of contents and ``agentpost list`` all read it.

Schema of ``<id>.yaml``::

    id: actkv                          # also the notebook stem and the params folder
    title: "ActKV: ..."                # paper title (or chapter title for the protocol chapter)
    arxiv: "2609.31395"                # null for the protocol chapter
    spec: actkv.md                     # method specification in ../shared/papers/
    order: 20                          # position in the book
    datasets: [wikitext-2]             # public data sets the diagnostic reads (hashed into receipts)
    synthetic: false                   # true when the diagnostic's data is synthetic: never counts as diagnostic
    claims:
      - id: C1
        text: "A claim an experiment could support or contradict."
        metrics: [name, ...]           # glued metric names that carry the diagnostic evidence for this claim
        synthetic: false               # true when this claim's metrics come from synthetic data in a public chapter
    gaps: ["What a reproduction would still need", ...]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from agentpost.project import project_root

CATALOGUE_DIR = Path(__file__).parent


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    metrics: tuple[str, ...] = ()
    synthetic: bool = False  # its metrics come from synthetic data, even in a chapter on public data


@dataclass(frozen=True)
class Chapter:
    id: str
    title: str
    arxiv: str | None
    spec: str | None
    order: int
    datasets: tuple[str, ...]
    synthetic: bool
    claims: tuple[Claim, ...]
    gaps: tuple[str, ...]
    summary: str = ""

    @property
    def notebook(self) -> Path:
        return project_root() / "notebooks" / f"{self.id}.ipynb"

    @property
    def started(self) -> bool:
        return self.notebook.is_file()

    @property
    def profiles(self) -> list[str]:
        folder = project_root() / "params" / self.id
        return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []

    def profile_path(self, profile: str) -> Path:
        return project_root() / "params" / self.id / f"{profile}.yaml"

    def claim(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"chapter {self.id} has no claim {claim_id!r}")


def _load(path: Path) -> Chapter:
    raw = yaml.safe_load(path.read_text())
    missing = {"id", "title", "claims"} - set(raw)
    if missing:
        raise ValueError(f"{path.name}: missing keys {sorted(missing)}")
    if raw["id"] != path.stem:
        raise ValueError(f"{path.name}: id {raw['id']!r} must equal the file name")
    claims = tuple(Claim(c["id"], c["text"].strip(), tuple(c.get("metrics", [])), bool(c.get("synthetic", False)))
                   for c in raw["claims"])
    return Chapter(
        id=raw["id"],
        title=raw["title"],
        arxiv=raw.get("arxiv"),
        spec=raw.get("spec"),
        order=int(raw.get("order", 100)),
        datasets=tuple(raw.get("datasets", [])),
        synthetic=bool(raw.get("synthetic", False)),
        claims=claims,
        gaps=tuple(g.strip() for g in raw.get("gaps", [])),
        summary=(raw.get("summary") or "").strip(),
    )


@functools.lru_cache(maxsize=None)
def chapters() -> tuple[Chapter, ...]:
    """All chapters, in book order."""
    return tuple(sorted((_load(p) for p in CATALOGUE_DIR.glob("*.yaml")), key=lambda c: (c.order, c.id)))


def chapter(chapter_id: str) -> Chapter:
    for c in chapters():
        if c.id == chapter_id:
            return c
    raise KeyError(f"unknown chapter {chapter_id!r}; known: {', '.join(c.id for c in chapters())}")
