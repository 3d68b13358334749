"""Prose that cannot go stale (issue 44): a chapter states its results through glued values, and never says that a
profile or a GPU benchmark has (or has not) run against what its runs and receipts show.

Three rules, each a function of the text and of facts handed in (``tests/unit/test_chapter_prose.py`` gathers
the facts and applies them to every chapter):

* **Typed numbers** (:func:`typed_numbers`). In a chapter's *results part*, every section after its Ambiguities
  section (CHAPTER.md sections 6-7: the diagnostic, its results, what it shows), a number written in the prose, in
  digits or as a number word from "four" up, must be one the chapter *declares*: its parameters (notebook defaults,
  every profile's parameters and seeds), its catalogue entry (summary, claims and gaps, which quote the paper, but no
  gap of ours, "Here: ..."; the comparisons' margins, bounds and reasons) or its own paper card and Claims section.
  A count of seeds ("three seeds") states what ran: it must be a profile's seed count. Anything else is a result
  typed by hand: glue it (``{glue:text}`name```), cite the ledger's verdict glue, or say in words where the number
  is read (the evidence page, a receipt). Not counted: glue roles, maths, code spans, link targets, reference labels
  ("eq. 9", "Table 3", "issue 31", "Proposition 1") and confidence or power levels ("95% CI"). A :class:`Quote`
  lets through the numbers inside one reviewed snippet (a data set's own facts, a dated exploratory record), with
  its reason. Matching by value is a net, not a proof: a typed number that happens to equal a declared one passes.
* **Not run** (:func:`not_run_claims`). A sentence saying that something "has not been run" (was not run, not yet
  run, never run, ...) is checked against what exists: if the profile or GPU plan item it speaks of has runs under
  ``book/runs/<chapter>/<profile>/`` or a receipt under ``benchmarks/receipts/``, it is contradicted.
* **Cited evidence exists** (:func:`missing_evidence`): every ``book/runs/<chapter>/<profile>`` and
  ``benchmarks/receipts/<folder>`` the text cites, and every GPU plan item it says "ran", is there; and every
  ``{glue}`` reference names a value that something records (:func:`unknown_glue_references`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentpost.catalogue import Chapter
from agentpost.evidence import receipt as rc
from agentpost.evidence.verdicts import FIELDS, glue_name
from agentpost.project import project_root

#: Where GPU plans leave their receipts and logs (``benchmarks/gpu_all.sh``'s default output folder).
GPU_RECEIPTS_DIR = Path("benchmarks") / "receipts"


@dataclass(frozen=True)
class Quote:
    """A reviewed exception to the typed-number rule: the numbers inside ``text`` (an exact snippet of one line of
    chapter ``chapter``'s results part; with ``block``, the whole paragraph or table holding it) may be typed."""

    chapter: str
    text: str
    reason: str
    block: bool = False


@dataclass(frozen=True)
class Line:
    """One line of a chapter's markdown: its cell, the part of the chapter it lies in, the line as written and the
    same line with everything that is not prose blanked out (same length, same positions)."""

    cell: int
    part: str  # "paper" (title card and Claims), "method" (up to the end of Ambiguities) or "results"
    raw: str
    prose: str


@dataclass(frozen=True)
class Finding:
    cell: int
    number: str
    line: str

    def __str__(self) -> str:
        return f"cell {self.cell}: {self.number!r} in {self.line.strip()!r}"


_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.S)
_MATH = re.compile(r"\$[^$\n]+\$")
_ROLE = re.compile(r"\{[\w:.-]+\}`[^`]*`")  # {glue:text}`name:fmt`, {doc}`...`, ...
_CODE = re.compile(r"`[^`]*`")
_URL = re.compile(r"\]\([^)]*\)|https?://\S+|\b[\w.-]+\.(?:com|org|io|net|ai)/\S*")
_TAG = re.compile(r"<[^>\n]+>")
_REFERENCE = re.compile(
    r"(?i)(?:\b(?:eqs?\.|equations?|tables?|figs?\.|figures?|sections?|sec\.|app\.|appendix|appendices|algorithms?|"
    r"alg\.|propositions?|theorems?|lemmas?|issues?|tests?|ambiguit(?:y|ies)|claims?)|§)\s*\d+"
    r"(?:\s*(?:[–,/+-]|and)\s*\d+)*"
)
_LEVEL = re.compile(r"\b\d+(?:\.\d+)?\s?%\s(?:CI|confidence|power|interval)\b")  # 95% CI, 80% power
_HIDDEN = (_FENCE, _DISPLAY_MATH, _MATH, _ROLE, _CODE, _URL, _TAG, _REFERENCE, _LEVEL)

_DIGITS = r"\d+(?:,\d{3})*(?:\.\d+)?"
#: A number in prose: digits (not part of a word such as "Qwen3", "4B", "GPT-5" or a version such as "1.0.2"),
#: with an optional percent sign or multiplier; or a number word from four up.
_NUMBER = re.compile(
    rf"(?<![\w.])(?<![A-Za-z]-)(?P<digits>{_DIGITS})(?P<unit>%|x(?![A-Za-z]))?(?![\w]|\.\d)"
    r"|(?i:\b(?P<word>four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen"
    r"|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand)\b)"
)
_SEED_COUNT = re.compile(
    rf"(?i)(?<![\w.])(?:(?P<digits>{_DIGITS})|(?P<word>two|three|four|five|six|seven|eight|nine|ten|twelve|sixteen"
    r"|twenty|thirty|forty|fifty|hundred))(?=[\s-]seeds?\b)"
)
_WORDS = dict(
    two=2, three=3, four=4, five=5, six=6, seven=7, eight=8, nine=9, ten=10, eleven=11, twelve=12, thirteen=13,
    fourteen=14, fifteen=15, sixteen=16, seventeen=17, eighteen=18, nineteen=19, twenty=20, thirty=30, forty=40, fifty=50,
    sixty=60, seventy=70, eighty=80, ninety=90, hundred=100, thousand=1000,
)  # fmt: skip


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def prose_only(markdown: str) -> str:
    """``markdown`` with glue roles, maths, code, link targets, tags, reference labels and confidence levels blanked
    (each character replaced by a space, line breaks kept, so positions still match the text as written)."""
    for pattern in _HIDDEN:
        markdown = pattern.sub(_blank, markdown)
    return markdown


def numbers(prose: str) -> list[tuple[re.Match, float]]:
    """Each number of ``prose`` (already :func:`prose_only`) with its value; "25%" has the value 25."""
    return [(m, _value(m)) for m in _NUMBER.finditer(prose)]


def _value(m: re.Match) -> float:
    return float(_WORDS[m["word"].lower()] if m["word"] else m["digits"].replace(",", ""))


def markdown_lines(cells: Iterable[Mapping[str, Any]]) -> list[Line]:
    """The lines of a notebook's markdown cells, each with its part: "paper" up to the first level-2 heading other
    than Claims, "results" from the first level-2 heading after the Ambiguities section, "method" between."""
    out, part, after_ambiguities = [], "paper", False
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        for raw, prose in zip(source.splitlines(), prose_only(source).splitlines()):
            if raw.startswith("## "):
                title = raw[3:].strip()
                if part == "paper" and not title.startswith("Claims"):
                    part = "method"
                if part == "method" and after_ambiguities:
                    part = "results"
                after_ambiguities = after_ambiguities or title.startswith("Ambiguities")
            out.append(Line(i, part, raw, prose))
    return out


def _values_in(value: Any) -> set[float]:
    """Every number in a parameter value: numbers, numbers inside strings ("Room-15x15" gives 15), nested."""
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, (int, float)):
        return {float(value)}
    if isinstance(value, str):
        return {float(m.replace(",", "")) for m in re.findall(_DIGITS, value)}
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    return set().union(*(_values_in(v) for v in items))


def declared_numbers(chapter: Chapter, lines: list[Line], parameters: Iterable[Any]) -> set[float]:
    """The numbers chapter ``chapter`` declares: in ``parameters`` (its notebook defaults, profiles' parameters and
    seeds), its catalogue entry (summary, claims, gaps other than ours, comparisons) and its paper part."""
    texts = [chapter.summary, *(c.text for c in chapter.claims), *(g for g in chapter.gaps if not g.startswith("Here"))]
    texts += [c.why for c in chapter.comparisons]
    declared = {value for t in texts for _, value in numbers(prose_only(t))}
    declared |= {value for line in lines if line.part == "paper" for _, value in numbers(line.prose)}
    declared |= {c.min_effect for c in chapter.comparisons} | {b for c in chapter.comparisons for b in c.bounds or ()}
    return declared | set().union(*(_values_in(p) for p in parameters))


def _blocks(lines: list[Line]) -> list[list[int]]:
    """Indices of ``lines`` grouped into paragraphs and tables (runs of non-blank lines of one cell)."""
    blocks: list[list[int]] = []
    for i, line in enumerate(lines):
        if not line.raw.strip():
            continue
        if blocks and blocks[-1][-1] == i - 1 and lines[i - 1].cell == line.cell:
            blocks[-1].append(i)
        else:
            blocks.append([i])
    return blocks


def typed_numbers(
    lines: list[Line], declared: set[float], quotes: Iterable[Quote] = (), seed_counts: Iterable[int] | None = None
) -> tuple[list[Finding], list[Quote]]:
    """The numbers of the results part that are neither declared nor inside a quote, and the quotes that let
    nothing through (a stale exception is itself a finding). With ``seed_counts`` (how many seeds each profile
    lists or ran), a count of seeds ("three seeds", "a 5-seed batch") is a statement of what ran: it must be one
    of them, whatever else the chapter declares."""
    quotes = list(quotes)
    blocks = _blocks(lines)
    used: set[Quote] = set()
    findings = []
    for i, line in enumerate(lines):
        if line.part != "results":
            continue
        counts = {m.start(): m for m in _SEED_COUNT.finditer(line.prose)} if seed_counts is not None else {}
        for m, value in [*numbers(line.prose), *((c, _value(c)) for c in counts.values())]:
            covering = {q for q in quotes if _covers(q, lines, blocks, i, m)}
            used |= covering
            if m.re is _SEED_COUNT:
                ok = value in set(map(float, seed_counts))
            else:
                ok = m.start() in counts or value in declared or (m["unit"] == "%" and value / 100 in declared)
            if not (covering or ok):
                findings.append(Finding(line.cell, m.group(0), line.raw))
    return findings, [q for q in quotes if q not in used]


def _covers(q: Quote, lines: list[Line], blocks: list[list[int]], i: int, m: re.Match) -> bool:
    """Whether quote ``q`` lets through number ``m`` of line ``i``."""
    line = lines[i]
    if q.block:
        return any(q.text in lines[j].raw for b in blocks if i in b for j in b)
    start = line.raw.find(q.text)
    while start != -1:
        if start <= m.start() and m.end() <= start + len(q.text):
            return True
        start = line.raw.find(q.text, start + 1)
    return False


# --- statements of what ran -------------------------------------------------------------------------------------

_NOT_RUN = re.compile(r"(?i)\b(?:not|never)\s+(?:yet\s+)?(?:been\s+)?run\b|\bnot\s+run\s+yet\b")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*`(])|\n\s*\n|\n(?=\s*[-*|#] )")
_GPU_ITEM = re.compile(r"\b(?:bench|profile|tests?)-[a-z0-9][\w-]*[a-z0-9]\b")


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences (and list items, table rows, paragraphs), whitespace folded."""
    return [" ".join(s.split()) for s in _SENTENCE_END.split(text) if s.strip()]


def profiles_with_runs(chapter_id: str, root: Path | None = None) -> dict[str, int]:
    """``{profile: seeds that ran ok}`` for each profile of ``chapter_id`` with at least one ok run under the runs
    root (ad-hoc runs are not a profile's)."""
    folder = (rc.runs_root() if root is None else Path(root)) / chapter_id
    seeds: dict[str, set[int]] = {}
    for run in rc.run_dirs(folder):
        try:
            r = rc.load_raw(run / rc.RECEIPT_NAME)
        except (OSError, ValueError):
            continue
        if r.get("status") == "ok" and r.get("kind") == "profile" and r.get("chapter") == chapter_id:
            seeds.setdefault(str(r.get("profile")), set()).add(r.get("seed"))
    return {p: len(s) for p, s in sorted(seeds.items())}


def gpu_receipt_items(root: Path | None = None) -> dict[str, str]:
    """``{plan item: receipt folder}`` for every GPU plan item that left a receipt under ``benchmarks/receipts/``:
    marked done in a folder's ``gpu_all.json``, or with its own log ``<item>.log`` there (an item stopped by the
    plan's budget and re-run by hand)."""
    base = project_root() / GPU_RECEIPTS_DIR if root is None else Path(root)
    found: dict[str, str] = {}
    for folder in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else ():
        where = folder.relative_to(project_root()).as_posix() if root is None else folder.as_posix()
        plan = folder / "gpu_all.json"
        items = json.loads(plan.read_text(encoding="utf-8")).get("items", []) if plan.is_file() else []
        names = {i["name"] for i in items if i.get("status") == "done"} | {p.stem for p in folder.glob("*.log")}
        found.update(dict.fromkeys(sorted(names), where))
    return found


def not_run_claims(
    text: str,
    profiles: Iterable[str],
    ran: Mapping[str, int],
    gpu_items: Mapping[str, str],
    chapter_id: str,
    itself: str | None = None,
) -> list[str]:
    """Why each sentence of ``text`` that says something has not run is contradicted by what exists: a profile of
    ``profiles`` it names (as `` `cpu` ``, "the cpu profile" or ``params/<chapter>/cpu.yaml``; ``itself`` when it
    names none, as a profile's own description does) has runs (``ran``), or a GPU plan item it names has a
    receipt (``gpu_items``)."""
    problems = []
    for sentence in sentences(text):
        for negation in _NOT_RUN.finditer(sentence):
            p, item = _subject(sentence, negation.start(), profiles, chapter_id) or (itself, None)
            if p is not None and ran.get(p):
                problems.append(
                    f"says the {p} profile has not run, but book/runs/{chapter_id}/{p}/ holds {ran[p]} ok seeds: "
                    f"{sentence!r}"
                )
            if item is not None and item in gpu_items:
                problems.append(f"says {item} has not run, but {gpu_items[item]} holds its receipt: {sentence!r}")
    return problems


def _subject(sentence: str, at: int, profiles: Iterable[str], chapter_id: str) -> tuple[str | None, str | None] | None:
    """``(profile, None)`` or ``(None, GPU plan item)``: what the negation at ``at`` speaks of, the last one named
    before it, else the first named after it; None when the sentence names none."""
    mentions = [(m.start(), None, m.group(0)) for m in _GPU_ITEM.finditer(sentence)]
    for p in profiles:
        name = re.escape(p)
        pattern = rf"`{name}`|\b{name} profile\b|params/{re.escape(chapter_id)}/{name}\.yaml"
        mentions += [(m.start(), p, None) for m in re.finditer(pattern, sentence)]
    before = sorted((m for m in mentions if m[0] < at), key=lambda m: m[0])
    after = sorted((m for m in mentions if m[0] >= at), key=lambda m: m[0])
    chosen = before[-1] if before else after[0] if after else None
    return None if chosen is None else chosen[1:]


_RUNS_PATH = re.compile(r"book/runs/([\w-]+)/([\w-]+)")
_RECEIPTS_PATH = re.compile(r"benchmarks/receipts/([\w.-]+)")
_RAN = re.compile(r"(?i)\bran\b")


def missing_evidence(text: str, ran: Mapping[str, int], gpu_items: Mapping[str, str], chapter_id: str) -> list[str]:
    """What ``text`` cites as having run that does not exist: a ``book/runs/<chapter>/<profile>`` folder of this
    chapter without ok runs, a ``benchmarks/receipts/<folder>`` that is not there, or a GPU plan item said to have
    "ran" in a sentence that does not negate it, without a receipt."""
    problems = []
    receipts = project_root() / GPU_RECEIPTS_DIR
    for sentence in sentences(text):
        for chapter, profile in _RUNS_PATH.findall(sentence):
            if chapter == chapter_id and not ran.get(profile):
                problems.append(f"cites book/runs/{chapter}/{profile}/, which holds no ok run: {sentence!r}")
        for folder in _RECEIPTS_PATH.findall(sentence):
            if not (receipts / folder).is_dir():
                problems.append(f"cites benchmarks/receipts/{folder}/, which does not exist: {sentence!r}")
        if _RAN.search(sentence) and not _NOT_RUN.search(sentence):
            for item in _GPU_ITEM.findall(sentence):
                if item not in gpu_items:
                    problems.append(f"says {item} ran, but no receipt under {GPU_RECEIPTS_DIR} has it: {sentence!r}")
    return problems


# --- glue references ----------------------------------------------------------------------------------------------

_GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`]*)`")


def unknown_glue_references(markdown: str, glued: set[str], chapter: Chapter) -> list[str]:
    """The ``{glue}`` references of ``markdown`` that nothing records: a plain name must be glued by the notebook
    itself (``glued``: the names in its committed outputs); a ``path::key`` must cite this chapter's verdicts
    notebook (``agentpost ledger`` writes it) with a key naming one of its profiles, declared comparisons and
    verdict fields."""
    own = f"../book/generated/verdicts/{chapter.id}.ipynb"
    verdict_keys = {glue_name(p, c.id, f) for p in chapter.profiles for c in chapter.comparisons for f in FIELDS}
    unknown = []
    for reference in _GLUE_ROLE.findall(markdown):
        if "::" in reference:
            path, key = reference.split("::", 1)
            if path != own or key.rsplit(":", 1)[0] not in verdict_keys:
                unknown.append(reference)
        elif reference.split(":", 1)[0] not in glued:
            unknown.append(reference)
    return unknown
