"""A chapter's design checks, declared once in its catalogue entry under ``design:`` beside its comparisons.

A verdict is only as good as its arms. These declarations say what a sound experiment must show before its
headline is read (computed from the runs by :mod:`agentpost.evidence.design_checks`)::

    design:
      reference:                         # the starting point every trained arm must not fall below ("no harm")
        arm: pretrained                  # an arm of the outcomes (paired item by item), or
        scalar: "test_{metric}_prior"    # a per-seed metric ({metric}: the comparison's outcomes metric)
        trained: [opsd, dce]             # the arms trained from it
        checked_on: {jsd: accuracy}      # optional: comparison metric -> the metric its no-harm check reads
                                         # (default: the comparison's own metric)
        why: "..."
      competence:                        # the task is within the model's reach at full resources
        - id: fullkv_names
          metric: fullkv_name_exact      # a per-seed number, or
          outcomes: test_nll             # an outcomes metric: the mean of each of `arms` must clear the floor
          arms: [dense_kv]
          floor: 0.2                     # a number, or
          floor_metric: bigram_nll       # a per-seed number the runs record
          higher_is_better: true
          why: "..."
      tuning:                            # every selected knob: its grid and pick per seed
        - knob: lr
          grid: lr_grid                  # a parameter (a list), or
          grid_key: lr                   # the key of `table` rows holding each tried value
          picks: selected_lr             # a metric: one number (every arm in `arms`) or {arm: number}; may hold
                                         # "{arm}" (one metric per arm)
          arms: [dce, opsd]              # arms whose pick it is (default: the picks' keys)
          metric_prefix: gru_            # optional: the knob bears only on comparisons of metrics named so
          table: lr_selection_validation # optional: rows of the selection ({arm, grid_key, score, selected})
          where: {env: "{minihack_env}"} # rows kept ("{name}": the run's parameter)
          score: validation_train_success
          trials: [group_size, minihack_updates, validation_seeds]  # product of parameters (a list counts its
                                         # length): rollouts behind each row's success rate
          min_successes: 10              # the pick must rest on at least this many successes
        - knob: reading                  # a tuning budget: how many candidates each arm chose among
          candidates: validation_variants  # rows with an `arm` key, one per candidate
          arms: {toolsearcher_selected: toolsearcher, grpo: grpo}  # comparison arm -> rows' arm
      edge_share: 0.34                   # a pick at a grid edge at more than this share of seeds fails
      identity_share: 0.5                # two arms identical item for item at this share of seeds or more fail

Headroom (the spread between the extreme arms against the margin; the baseline off a declared bound) and
identity need no declaration: every comparison gets them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agentpost.catalogue import CATALOGUE_DIR

#: Defaults of the shares (stated in the module docstring and on every page that applies them).
EDGE_SHARE = 1 / 3
IDENTITY_SHARE = 0.5


@dataclass(frozen=True)
class Reference:
    trained: tuple[str, ...]
    why: str
    arm: str | None = None
    scalar: str | None = None
    checked_on: tuple[tuple[str, str], ...] = ()

    def metric_for(self, comparison_metric: str) -> str:
        """The outcomes metric the no-harm check of a comparison on ``comparison_metric`` reads."""
        return dict(self.checked_on).get(comparison_metric, comparison_metric)


@dataclass(frozen=True)
class Competence:
    id: str
    why: str
    higher_is_better: bool
    metric: str | None = None
    outcomes: str | None = None
    arms: tuple[str, ...] = ()
    floor: float | None = None
    floor_metric: str | None = None


@dataclass(frozen=True)
class Tuning:
    knob: str
    grid: str | None = None
    grid_key: str | None = None
    picks: str | None = None
    arms: tuple[str, ...] | dict = ()
    table: str | None = None
    where: dict = field(default_factory=dict)
    score: str | None = None
    trials: tuple[str, ...] = ()
    min_successes: int | None = None
    candidates: str | None = None
    metric_prefix: str = ""


@dataclass(frozen=True)
class Design:
    reference: Reference | None = None
    competence: tuple[Competence, ...] = ()
    tuning: tuple[Tuning, ...] = ()
    edge_share: float = EDGE_SHARE
    identity_share: float = IDENTITY_SHARE


def _keys(where: str, raw, required: set, allowed: set) -> dict:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(raw).__name__}")
    unknown, missing = set(raw) - allowed - required, required - set(raw)
    if unknown or missing:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    return raw


def _reference(where: str, raw) -> Reference:
    raw = _keys(where, raw, {"trained", "why"}, {"arm", "scalar", "checked_on"})
    if ("arm" in raw) == ("scalar" in raw):
        raise ValueError(f"{where}: give exactly one of arm (an outcomes arm) or scalar (a per-seed metric)")
    checked_on = raw.get("checked_on") or {}
    if not isinstance(checked_on, dict):
        raise ValueError(f"{where}: checked_on maps a comparison's metric to the metric its no-harm check reads")
    return Reference(
        tuple(map(str, raw["trained"])),
        str(raw["why"]).strip(),
        raw.get("arm"),
        raw.get("scalar"),
        tuple(sorted((str(k), str(v)) for k, v in checked_on.items())),
    )


def _competence(where: str, raw) -> Competence:
    raw = _keys(where, raw, {"id", "why", "higher_is_better"}, {"metric", "outcomes", "arms", "floor", "floor_metric"})
    if ("metric" in raw) == ("outcomes" in raw):
        raise ValueError(f"{where}: give exactly one of metric (per-seed number) or outcomes (with arms)")
    if ("floor" in raw) == ("floor_metric" in raw):
        raise ValueError(f"{where}: give exactly one of floor (a number) or floor_metric (a recorded number)")
    if "outcomes" in raw and not raw.get("arms"):
        raise ValueError(f"{where}: outcomes needs the arms that must clear the floor")
    floor = raw.get("floor")
    if floor is not None and (isinstance(floor, bool) or not isinstance(floor, (int, float))):
        raise ValueError(f"{where}: floor must be a number")
    return Competence(
        id=str(raw["id"]),
        why=str(raw["why"]).strip(),
        higher_is_better=bool(raw["higher_is_better"]),
        metric=raw.get("metric"),
        outcomes=raw.get("outcomes"),
        arms=tuple(map(str, raw.get("arms", ()))),
        floor=None if floor is None else float(floor),
        floor_metric=raw.get("floor_metric"),
    )


def _tuning(where: str, raw) -> Tuning:
    allowed = {"grid", "grid_key", "picks", "arms", "table", "where", "score", "trials", "min_successes", "candidates"}
    allowed.add("metric_prefix")
    raw = _keys(where, raw, {"knob"}, allowed)
    if "candidates" in raw:
        if not isinstance(raw.get("arms"), dict) or set(raw) - {"knob", "candidates", "arms"}:
            raise ValueError(f"{where}: a tuning budget takes candidates and arms {{comparison arm: rows' arm}} only")
        return Tuning(knob=str(raw["knob"]), candidates=raw["candidates"], arms=dict(raw["arms"]))
    if "picks" not in raw and "table" not in raw:
        raise ValueError(f"{where}: give picks (a metric) or table (selection rows)")
    if ("grid" in raw) == ("grid_key" in raw):
        raise ValueError(f"{where}: give exactly one of grid (a parameter) or grid_key (the rows' key)")
    if "min_successes" in raw and not ("table" in raw and "score" in raw and "trials" in raw):
        raise ValueError(f"{where}: min_successes needs table, score and trials")
    arms = raw.get("arms", ())
    return Tuning(
        knob=str(raw["knob"]),
        grid=raw.get("grid"),
        grid_key=raw.get("grid_key"),
        picks=raw.get("picks"),
        arms=tuple(map(str, arms)),
        table=raw.get("table"),
        where=dict(raw.get("where") or {}),
        score=raw.get("score"),
        trials=tuple(map(str, raw.get("trials", ()))),
        min_successes=None if raw.get("min_successes") is None else int(raw["min_successes"]),
        metric_prefix=str(raw.get("metric_prefix", "")),
    )


def parse(where: str, raw) -> Design:
    """The ``design:`` mapping of one catalogue file (``where`` names it in errors)."""
    if raw is None:
        return Design()
    raw = _keys(where, raw, set(), {"reference", "competence", "tuning", "edge_share", "identity_share"})
    shares = {k: float(raw[k]) for k in ("edge_share", "identity_share") if k in raw}
    if any(not 0 < v <= 1 for v in shares.values()):
        raise ValueError(f"{where}: edge_share and identity_share must lie in (0, 1]")
    return Design(
        reference=_reference(f"{where}: reference", raw["reference"]) if raw.get("reference") else None,
        competence=tuple(_competence(f"{where}: competence {i}", c) for i, c in enumerate(raw.get("competence") or ())),
        tuning=tuple(_tuning(f"{where}: tuning {i}", t) for i, t in enumerate(raw.get("tuning") or ())),
        **shares,
    )


@functools.lru_cache(maxsize=None)
def design(chapter_id: str) -> Design:
    """The declared design checks of ``chapter_id`` (an empty :class:`Design` when it declares none)."""
    path = Path(CATALOGUE_DIR) / f"{chapter_id}.yaml"
    raw = yaml.safe_load(path.read_text()) if path.is_file() else {}
    return parse(f"{path.name}: design", (raw or {}).get("design"))
