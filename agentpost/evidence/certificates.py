"""Re-certification: a batch made with older code counts as current once a sample of its seeds, re-executed on the
current code, reproduces it (README, "Evidence that stays current"; book/receipts.md).

``agentpost recertify CHAPTER --profile P`` re-runs some seeds of the counted configuration as ordinary runs (they
are kept: their receipts are the certificate's evidence) and compares each with the old run at the same seed by
:func:`differences`: every glued value of every cell, per-item outcomes included, by the nbval rule
(:func:`agentpost.evidence.spread.check_value`: within three times the chapter's measured kernel-path spread); arm
facts that are fingerprints compare by the arms they group, not by their text (a fingerprint names *what* an arm
started from; the arms that share one must still share one). Where nothing differs, a sealed certificate
``<runs>/<chapter>/<profile>/certificates/<from>-<to>.json`` links the old configuration to the new one, and
:func:`merge` joins the two in every reader (list, validate, compare, plan, ledger): the batch is current under the
new code, new seeds run on it join the same configuration, and at a re-run seed the newer run is the one counted.
Where anything differs, no certificate is written and the differing values are named.

A certificate is sealed like a receipt (a self-hash that shows an edit, not a signature: book/receipts.md).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from agentpost.evidence import receipt as rc
from agentpost.record.hashing import sha256_json
from agentpost.evidence.spread import check_value, glued_with_kind

CERTIFICATE_DIR = "certificates"
SCHEMA_VERSION = 1
#: An arm fact that names what the arm used rather than measuring it (compared by the arms it groups).
FINGERPRINT_FACT = re.compile(r"^outcomes_\w+\.facts\.[^.]+\.(checkpoint|init|data_version|\w*fingerprint\w*)$")
#: Re-run seeds by default until their recorded wall time reaches this (at least one seed).
DEFAULT_BUDGET_S = 300.0


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class SeedCheck(_Strict):
    seed: int
    old_run: str  # folder name of the run made with the old code
    new_run: str  # folder name of the re-run on the new code (kept beside it)
    values_compared: int  # glued leaves compared, per-item outcomes included
    fingerprints_compared: int  # arm facts compared by the arms they group


class Certificate(_Strict):
    schema_version: Literal[1]
    chapter: str
    profile: str
    from_configuration: str  # receipt.configuration_key of the old runs
    to_configuration: str  # and of the re-runs
    from_code: dict[str, object]  # what differed: the old runs' notebook and imported-code hashes
    to_code: dict[str, object]
    seeds: list[SeedCheck]
    rule: str
    created: str
    certificate_sha256: str


def certificate_dir(chapter: str, profile: str) -> Path:
    return rc.runs_root() / chapter / profile / CERTIFICATE_DIR


def _code_of(receipt: dict) -> dict:
    keys = ("notebook_code", "imported_code") if receipt.get("schema_version", 0) >= 5 else ("imported_code",)
    return {
        "schema_version": receipt["schema_version"],
        "source_notebook": receipt["hashes"]["source_notebook"],
        **{k: receipt.get(k) for k in keys},
    }


def _glued(nb) -> dict[str, tuple[object, str]]:
    return {
        name: vk
        for cell in nb["cells"]
        if cell.get("cell_type") == "code"
        for name, vk in glued_with_kind(cell.get("outputs")).items()
    }


def _groups(values: dict[str, object]) -> list[list[str]]:
    """The arms grouped by equal fingerprint (sorted), the text of the fingerprint forgotten."""
    by_value: dict[str, list[str]] = defaultdict(list)
    for arm, value in sorted(values.items()):
        by_value[json.dumps(value)].append(arm)
    return sorted(by_value.values())


def differences(chapter: str, old_nb, new_nb) -> tuple[list[str], int, int]:
    """Why the re-executed notebook does not reproduce the old one (empty: it does), with the number of values and
    of fingerprint facts compared. Both notebooks as :func:`agentpost.evidence.run_store.inflate` gives them."""
    old, new = _glued(old_nb), _glued(new_nb)
    problems = [
        f"{n}: recorded by the old run, not by the re-run"
        for n in sorted(set(old) - set(new))
        if old[n][1] not in ("timing", "machine")
    ]
    problems += [
        f"{n}: recorded by the re-run, not by the old run"
        for n in sorted(set(new) - set(old))
        if new[n][1] not in ("timing", "machine")
    ]
    facts: dict[tuple[str, str], tuple[dict, dict]] = defaultdict(lambda: ({}, {}))
    compared = 0
    for name in sorted(set(old) & set(new)):
        if FINGERPRINT_FACT.match(name):
            scrap, _, arm, fact = name.split(".", 3)
            facts[(scrap, fact)][0][arm], facts[(scrap, fact)][1][arm] = old[name][0], new[name][0]
            continue
        compared += 1
        if why := check_value(chapter, name, old[name][0], new[name][0], new[name][1]):
            problems.append(why)
    for (scrap, fact), (before, after) in sorted(facts.items()):
        if _groups(before) != _groups(after):
            problems.append(f"{scrap}: the arms sharing a {fact} differ: {_groups(before)} then {_groups(after)}")
    return problems, compared, sum(len(b) for b, _ in facts.values())


def default_seeds(batch: list[dict]) -> list[int]:
    """The batch's seeds in order, as many as fit :data:`DEFAULT_BUDGET_S` of recorded wall time (at least one)."""
    chosen: list[int] = []
    spent = 0.0
    for receipt in sorted(batch, key=lambda r: r["seed"]):
        if chosen and spent + receipt["timing"]["wall_s"] > DEFAULT_BUDGET_S:
            break
        chosen.append(receipt["seed"])
        spent += receipt["timing"]["wall_s"]
    return chosen


def write(chapter: str, profile: str, old: dict, new: dict, seeds: list[SeedCheck]) -> Path:
    """Seal and write the certificate linking ``old``'s configuration to ``new``'s (receipts of one seed each)."""
    body: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "chapter": chapter,
        "profile": profile,
        "from_configuration": rc.configuration_key(old),
        "to_configuration": rc.configuration_key(new),
        "from_code": _code_of(old),
        "to_code": _code_of(new),
        "seeds": [s.model_dump() for s in seeds],
        "rule": "every glued value and per-item outcome within 3 x the chapter's kernel-path spread "
        "(agentpost.evidence.spread.check_value); fingerprint facts by the arms they group",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "certificate_sha256": "",
    }
    sealed = {**body, "certificate_sha256": sha256_json({k: v for k, v in body.items() if k != "certificate_sha256"})}
    Certificate.model_validate(sealed)
    folder = certificate_dir(chapter, profile)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{sealed['from_configuration'][:12]}-{sealed['to_configuration'][:12]}.json"
    rc.write_atomic(path, json.dumps(sealed, indent=2, sort_keys=True) + "\n")
    return path


def problems(path: Path) -> list[str]:
    """Why a certificate file is not one (empty: it reads, its schema holds and its seal is intact)."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        Certificate.model_validate(raw)
    except (OSError, ValueError, ValidationError) as err:
        return [f"unreadable certificate: {str(err)[:200]}"]
    if sha256_json({k: v for k, v in raw.items() if k != "certificate_sha256"}) != raw["certificate_sha256"]:
        return ["the certificate was edited after sealing"]
    return []


def load(chapter: str, profile: str) -> list[tuple[Path, dict]]:
    """The valid certificates of a chapter and profile (an invalid one links nothing; ``validate`` names it)."""
    folder = certificate_dir(chapter, profile)
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        if not problems(path):
            found.append((path, json.loads(path.read_text(encoding="utf-8"))))
    return found


def merge(groups: dict[str, list]) -> list[list]:
    """``{configuration key: runs}`` joined along the certificates that link them (their seeds' runs present in both),
    one run per seed: at a seed with several, the current one, then the newest. A stale run of a group that a
    chain of certificates links to a current run gets ``certified_by`` (the certificate files' names)."""
    parent = {key: key for key in groups}

    def root(key: str) -> str:
        while parent[key] != key:
            key = parent[key]
        return key

    used: dict[str, list[str]] = defaultdict(list)
    pairs = {(r.receipt["chapter"], r.receipt["profile"]) for runs in groups.values() for r in runs}
    for chapter, profile in sorted(pairs):
        for path, cert in load(chapter, profile):
            a, b = cert["from_configuration"], cert["to_configuration"]
            if a not in groups or b not in groups:
                continue
            names = {r.path.name for r in groups[a]} | {r.path.name for r in groups[b]}
            if not all(s["old_run"] in names and s["new_run"] in names for s in cert["seeds"]):
                continue
            parent[root(a)] = root(b)
            used[a].append(path.name)
    joined: dict[str, list] = defaultdict(list)
    for key, runs in groups.items():
        joined[root(key)].extend(runs)
    merged = []
    for key, runs in joined.items():
        certs = sorted({c for k in groups if root(k) == key for c in used.get(k, [])})
        current = any(not r.stale for r in runs)
        by_seed: dict[int, object] = {}
        for r in sorted(runs, key=lambda r: (not r.stale, r.receipt["timing"]["end"])):
            r.certified_by = certs if (certs and current and r.stale) else []
            by_seed[r.receipt["seed"]] = r  # the last written wins: current over stale, then the newest
        merged.append([r for r in runs if by_seed[r.receipt["seed"]] is r])
    return merged
