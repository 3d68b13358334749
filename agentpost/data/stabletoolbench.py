"""StableToolBench solvable test queries and their API docs (Apache-2.0; see ../shared/data/stabletoolbench/SOURCE.md).

``apis.jsonl``: 2,490 APIs (47 categories); ``queries.jsonl``: 765 queries in six groups (G1_category,
G1_instruction, G1_tool, G2_category, G2_instruction, G3_instruction), each with 1-6 ground-truth APIs.
An API is named ``category.tool.api`` as in ToolSearcher's ``<tool_list>`` (toolsearcher.md, "Task").
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

from agentpost.data.hf import local_rows
from agentpost.data.registry import data_file

NAME = "stabletoolbench"
GROUPS = ("G1_category", "G1_instruction", "G1_tool", "G2_category", "G2_instruction", "G3_instruction")


@dataclass(frozen=True)
class Param:
    """One documented API parameter; ``default`` is kept as its JSON text (defaults are numbers, strings, lists)."""

    name: str
    type: str
    description: str
    default: str


@dataclass(frozen=True)
class Api:
    category: str
    tool: str
    api: str
    description: str
    method: str
    required: tuple[Param, ...] = ()
    optional: tuple[Param, ...] = ()

    @property
    def parameters(self) -> tuple[str, ...]:
        """Parameter names, required first."""
        return tuple(p.name for p in self.required + self.optional)

    @property
    def name(self) -> str:
        """``category.tool.api`` (the name the policy writes in ``<tool_list>``)."""
        return f"{self.category}.{self.tool}.{self.api}"

    def doc(self) -> str:
        """The document text a search returns and the retrievers index."""
        params = ", ".join(self.parameters) if self.parameters else "none"
        return f"{self.name}: {self.description.strip() or '(no description)'} [{self.method}; parameters: {params}]"


@dataclass(frozen=True)
class Query:
    group: str
    query_id: int
    text: str
    targets: tuple[str, ...]  # ground-truth API names, in file order
    candidates: tuple[str, ...]  # the query's api_list (not used by retrieval)

    @property
    def uid(self) -> str:
        return f"{self.group}/{self.query_id}"


def _name(triple) -> str:
    if not (isinstance(triple, list) and len(triple) == 3):
        raise ValueError(f"expected [category, tool, api], got {triple!r}")
    return ".".join(triple)


@functools.lru_cache(maxsize=None)
def load_apis() -> tuple[Api, ...]:
    """All API docs in file order. Read with ``json``, not ``datasets``: a parameter's ``default`` is a number, a
    string or a list, which one Arrow column cannot hold unchanged (``datasets``' Json feature reads the string
    ``"1"`` back as the number 1, so ``Param.default`` would change)."""
    out = []
    with open(data_file(NAME, "apis.jsonl"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            r = json.loads(line)
            try:
                req, opt = (
                    tuple(Param(p["name"], p["type"], p["description"], json.dumps(p["default"])) for p in r[k])
                    for k in ("required_parameters", "optional_parameters")
                )
                out.append(
                    Api(
                        r["category_name"],
                        r["tool_name"],
                        r["api_name"],
                        r["api_description"] or "",
                        r["method"],
                        req,
                        opt,
                    )
                )
            except KeyError as e:
                raise ValueError(f"apis.jsonl line {n}: missing field {e}") from None
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise ValueError("apis.jsonl: duplicate category.tool.api names")
    return tuple(out)


@functools.lru_cache(maxsize=None)
def load_queries() -> tuple[Query, ...]:
    """All queries in file order (read through ``datasets``); every target is checked to be a known API."""
    known = {a.name for a in load_apis()}
    out = []
    for n, r in enumerate(local_rows(data_file(NAME, "queries.jsonl"), "json").to_list(), 1):
        if r["group"] not in GROUPS:
            raise ValueError(f"queries.jsonl line {n}: unknown group {r['group']!r}")
        targets = tuple(dict.fromkeys(_name(t) for t in r["relevant_apis"]))
        missing = [t for t in targets if t not in known]
        if missing:
            raise ValueError(f"queries.jsonl line {n}: targets not in apis.jsonl: {missing}")
        out.append(
            Query(r["group"], int(r["query_id"]), r["query"], targets, tuple(_name(t) for t in r["candidate_apis"]))
        )
    return tuple(out)


def api_index() -> dict[str, Api]:
    """Every API by its ``category.tool.api`` name."""
    return {a.name: a for a in load_apis()}


def split_by_held_out_groups(queries, split_groups: dict[str, tuple[str, ...]]) -> dict[str, tuple[Query, ...]]:
    """Whole StableToolBench groups per split (``{"train": (...groups), "validation": ..., "test": ...}``), in
    file order: no query of a held-out group is seen in training. ``split_by_group`` cuts *within* groups."""
    named = [g for gs in split_groups.values() for g in gs]
    unknown = sorted(set(named) - set(GROUPS))
    if unknown or len(set(named)) != len(named):
        raise ValueError(f"split groups must be distinct StableToolBench groups {GROUPS}; got {split_groups}")
    return {split: tuple(q for q in queries if q.group in groups) for split, groups in split_groups.items()}


def split_by_group(queries, fractions: tuple[float, float, float] = (0.6, 0.2, 0.2), salt: str = "ts-split-v1"):
    """Deterministic train/validation/test split stratified by StableToolBench group.

    Within each group, queries are ordered by sha256(salt + uid) and cut by ``fractions``; the split does not
    depend on any training seed, so all arms and seeds see the same test items.
    """
    if len(fractions) != 3 or abs(sum(fractions) - 1.0) > 1e-9 or min(fractions) <= 0:
        raise ValueError(f"fractions must be three positive numbers summing to 1, got {fractions}")
    splits = {"train": [], "validation": [], "test": []}  # type: ignore[var-annotated]
    for group in GROUPS:
        qs = [q for q in queries if q.group == group]
        qs.sort(key=lambda q: hashlib.sha256(f"{salt}{q.uid}".encode()).hexdigest())
        n_train = round(fractions[0] * len(qs))
        n_val = round(fractions[1] * len(qs))
        splits["train"] += qs[:n_train]
        splits["validation"] += qs[n_train : n_train + n_val]
        splits["test"] += qs[n_train + n_val :]
    return {k: tuple(v) for k, v in splits.items()}
