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
    comparisons:                       # declared once; computed across the seed runs by agentpost compare
      - id: sst_vs_dense_flops         # identifier (snake_case)
        claim: C4                      # the claim it bears on
        metric: test_nll               # an outcomes metric the notebook records with record_outcomes
        a: dense_flops                 # baseline arm
        b: sst                         # method arm; the difference is b - a
        higher_is_better: false
        min_effect: 0.02               # smallest effect of interest (metric units): the equivalence margin
        why: "one line: why this is the smallest difference that matters"
        items: crossed                 # crossed: the same items in every seed; nested: each seed its own items
        headline: true                 # one of the chapter's headline comparisons (sized by agentpost plan)
        bounds: [0, 1]                 # optional: the metric's range (0/1 or bounded outcomes near a floor)
        may_differ: []                 # arm facts allowed to differ between a and b (say why in `why`)
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
class Comparison:
    """A comparison declared once in the catalogue and computed across a profile's seed runs."""

    id: str
    claim: str
    metric: str
    a: str
    b: str
    higher_is_better: bool
    min_effect: float
    why: str
    items: str = "crossed"
    headline: bool = False
    bounds: tuple[float, float] | None = None
    may_differ: tuple[str, ...] = ()

    @property
    def shared_items(self) -> bool:
        return self.items == "crossed"


COMPARISON_KEYS = {f for f in Comparison.__dataclass_fields__}


def _comparison(path: Path, raw: dict, claim_ids: set[str]) -> Comparison:
    where = f"{path.name}: comparison {raw.get('id')!r}"
    unknown = set(raw) - COMPARISON_KEYS
    missing = {"id", "claim", "metric", "a", "b", "higher_is_better", "min_effect", "why"} - set(raw)
    if unknown or missing:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    if not str(raw["id"]).isidentifier() or not str(raw["metric"]).isidentifier():
        raise ValueError(f"{where}: id and metric must be snake_case identifiers")
    if raw["claim"] not in claim_ids:
        raise ValueError(f"{where}: claim {raw['claim']!r} is not one of {sorted(claim_ids)}")
    if not isinstance(raw["higher_is_better"], bool):
        raise ValueError(f"{where}: higher_is_better must be true or false")
    effect = raw["min_effect"]
    if isinstance(effect, bool) or not isinstance(effect, (int, float)) or not 0 < effect < float("inf"):
        raise ValueError(f"{where}: min_effect must be a finite positive number")
    if raw.get("items", "crossed") not in ("crossed", "nested"):
        raise ValueError(f"{where}: items must be crossed or nested")
    bounds = raw.get("bounds")
    if bounds is not None and (len(bounds) != 2 or not bounds[0] < bounds[1]):
        raise ValueError(f"{where}: bounds must be [low, high] with low < high")
    return Comparison(
        id=raw["id"],
        claim=raw["claim"],
        metric=raw["metric"],
        a=str(raw["a"]),
        b=str(raw["b"]),
        higher_is_better=raw["higher_is_better"],
        min_effect=float(effect),
        why=raw["why"].strip(),
        items=raw.get("items", "crossed"),
        headline=bool(raw.get("headline", False)),
        bounds=tuple(map(float, bounds)) if bounds is not None else None,  # type: ignore[arg-type]  # two elements: checked above
        may_differ=tuple(raw.get("may_differ", ())),
    )


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
    comparisons: tuple[Comparison, ...] = ()

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
    claims = tuple(
        Claim(c["id"], c["text"].strip(), tuple(c.get("metrics", [])), bool(c.get("synthetic", False)))
        for c in raw["claims"]
    )
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
        comparisons=_comparisons(path, raw, {c.id for c in claims}),
    )


def _comparisons(path: Path, raw: dict, claim_ids: set[str]) -> tuple[Comparison, ...]:
    declared = tuple(_comparison(path, c, claim_ids) for c in raw.get("comparisons") or ())
    ids = [c.id for c in declared]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path.name}: comparison ids repeat: {sorted(i for i in ids if ids.count(i) > 1)}")
    return declared


@functools.lru_cache(maxsize=None)
def chapters() -> tuple[Chapter, ...]:
    """All chapters, in book order."""
    return tuple(sorted((_load(p) for p in CATALOGUE_DIR.glob("*.yaml")), key=lambda c: (c.order, c.id)))


def chapter(chapter_id: str) -> Chapter:
    for c in chapters():
        if c.id == chapter_id:
            return c
    raise KeyError(f"unknown chapter {chapter_id!r}; known: {', '.join(c.id for c in chapters())}")
