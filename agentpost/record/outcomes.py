"""One seed, one replication: a run records every arm's per-item outcomes once, with the facts of what it did.

A papermill run trains and evaluates every arm once at its ``seed``. :func:`record_outcomes` is the one call
through which a chapter notebook records, for one metric, each arm's value on every evaluated item (keyed by a
stable item id) together with each arm's facts (:func:`arm_facts`: the starting checkpoint's and the data's
fingerprints, the updates actually made, the token cap, budgets). The declared comparisons of the chapter's
catalogue entry are then computed *across* the seed runs of a profile configuration by
:mod:`agentpost.evidence.comparisons` (``agentpost compare``); a notebook opened alone shows its seed's per-arm
means and says where the across-seed verdict lives.

The scrap is named ``outcomes_<metric>``; its data is::

    {"kind": "outcomes", "metric": str, "items": [item id, ...],
     "arms": {arm: [value per item, ...]}, "facts": {arm: {"checkpoint": ..., "data_version": ...,
                                                          "updates": int, "max_new_tokens": int | None, ...}}}
"""

from __future__ import annotations

import hashlib
import html
import math
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from agentpost.record.recording import SCRAP_MIME, TEXT_DIGITS, _display, _jsonable

KIND = "outcomes"
PREFIX = "outcomes_"
#: Facts every arm must record: what the paired protocol requires both arms of a comparison to share
#: (:class:`agentpost.stats.ArmMeta`).
REQUIRED_FACTS = ("checkpoint", "data_version", "updates", "max_new_tokens")
#: Marks the HTML rendering of an outcomes scrap, so the rendering check knows how its text was made.
HTML_CLASS = "agentpost-outcomes"


def fingerprint(*objects: Any) -> str:
    """A short content hash of tensors, arrays, state dicts, strings or (nested) lists of them.

    Used for arm facts that must be *measured*, not typed: the item list or data a run read, the configuration and
    seed that determine a starting checkpoint, weights loaded from a file. Equal content gives an equal fingerprint
    on every machine; but computed floats (embeddings, trained or even freshly sampled weights: torch's vectorised
    ``normal_``) differ in their last bits between CPU kernel paths, so a glued hash of them cannot be compared
    across machines: fingerprint what determines such floats instead (the weights' file hash, the input texts, the
    configuration and seed). ``tests/unit/test_spread_contract.py`` fails on a glued fingerprint that differs
    between the measured kernel paths.
    """
    digest = hashlib.sha256()

    def feed(obj: Any) -> None:
        if isinstance(obj, Mapping):
            for key in sorted(obj, key=str):
                digest.update(str(key).encode())
                feed(obj[key])
        elif isinstance(obj, (list, tuple)):
            digest.update(b"[")
            for x in obj:
                feed(x)
            digest.update(b"]")
        elif hasattr(obj, "detach"):  # torch tensor
            feed(obj.detach().cpu().contiguous().numpy())
        elif isinstance(obj, np.ndarray):
            digest.update(str((obj.dtype.str, obj.shape)).encode())
            digest.update(np.ascontiguousarray(obj).tobytes())
        elif isinstance(obj, bytes):
            digest.update(obj)
        else:
            digest.update(repr(obj).encode())

    for obj in objects:
        feed(obj)
    return digest.hexdigest()[:16]


def init_fingerprint(model: Any, seed: int) -> str:
    """What determines a freshly built model's weights: its parameters' and buffers' names, shapes and dtypes, and
    the seed set before it was built (the initialisation code itself is pinned by the run's code hash). Two arms
    built alike from one seed share it, as their weights do; unlike a hash of the sampled floats, it is the same on
    every CPU kernel path."""
    layout = [[name, list(t.shape), str(t.dtype)] for name, t in model.state_dict().items()]
    return fingerprint(layout, int(seed))


def arm_facts(
    *, checkpoint: str, data_version: str, updates: int, max_new_tokens: int | None = None, **extra: Any
) -> dict:
    """The facts of one arm as the run measured them (pass fingerprints and counters, never literals).

    ``checkpoint``: fingerprint of the weights the arm *started* from (both arms of a paired comparison start from
    the same one); ``data_version``: fingerprint of the training/evaluation data; ``updates``: optimiser steps the
    arm actually made; ``max_new_tokens``: generation cap (None when nothing is generated). ``extra`` holds further
    facts a chapter reports (budgets, selected learning rate, acceptance rates, ...).
    """
    if not isinstance(updates, (int, np.integer)) or isinstance(updates, bool) or updates < 0:
        raise ValueError(f"arm_facts: updates must be a non-negative int (the steps actually made), got {updates!r}")
    return _jsonable(
        {
            "checkpoint": str(checkpoint),
            "data_version": str(data_version),
            "updates": int(updates),
            "max_new_tokens": max_new_tokens,
            **extra,
        }
    )


def _item_ids(items: Sequence[Hashable], n: int | None) -> list[str]:
    ids = [str(i) for i in items]
    if n is not None and len(ids) != n:
        raise ValueError(f"record_outcomes: {len(ids)} item ids for {n} values")
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]  # add() is None: a first sighting is False
        raise ValueError(f"record_outcomes: item ids must be unique (as strings); {dup!r} repeats")
    return ids


def outcomes_payload(
    metric: str,
    outcomes: Mapping[str, Any],
    *,
    items: Sequence[Hashable] | None,
    facts: Mapping[str, Mapping[str, Any]],
) -> dict:
    """Checked scrap data for :func:`record_outcomes` (see the module docstring for its form)."""
    if not isinstance(metric, str) or not metric.isidentifier():
        raise ValueError(f"record_outcomes: metric must be a snake_case identifier, got {metric!r}")
    if not isinstance(outcomes, Mapping) or not outcomes:
        raise ValueError("record_outcomes: outcomes must map each arm name to its per-item values")
    if set(facts) != set(outcomes):
        raise ValueError(
            f"record_outcomes: facts are needed for exactly the recorded arms; arms "
            f"{sorted(outcomes)} vs facts {sorted(facts)}"
        )
    ids: list[str] | None = None if items is None else _item_ids(items, None)
    arms: dict[str, list[float]] = {}
    for arm, values in outcomes.items():
        if not isinstance(arm, str) or not arm:
            raise ValueError(f"record_outcomes: arm names must be non-empty strings, got {arm!r}")
        if isinstance(values, Mapping):  # {item id: value}
            keyed = {str(k): v for k, v in values.items()}
            if ids is None:
                ids = _item_ids(list(values), None)
            if set(keyed) != set(ids):
                raise ValueError(f"record_outcomes: arm {arm!r} scored other items than the first arm")
            values = [keyed[i] for i in ids]
        array = np.asarray(values, dtype=np.float64)
        if array.ndim != 1 or array.size == 0:
            raise ValueError(
                f"record_outcomes: arm {arm!r} needs a non-empty 1-D list of per-item values, got shape {array.shape}"
            )
        if not np.isfinite(array).all():
            raise ValueError(f"record_outcomes: arm {arm!r} has non-finite values")
        if ids is None:
            raise ValueError("record_outcomes: pass items= (one id per value) or {item id: value} mappings")
        if array.size != len(ids):
            raise ValueError(f"record_outcomes: arm {arm!r} has {array.size} values for {len(ids)} items")
        arms[arm] = array.tolist()
    arms = dict(sorted(arms.items()))
    arm_facts_ = {}
    for arm, f in facts.items():
        missing = [k for k in REQUIRED_FACTS if k not in f]
        if missing:
            raise ValueError(f"record_outcomes: facts of arm {arm!r} lack {missing}; build them with arm_facts()")
        arm_facts_[arm] = _jsonable(dict(f))
    return {"kind": KIND, "metric": metric, "items": ids, "arms": arms, "facts": arm_facts_}


def is_outcomes(value: Any) -> bool:
    return isinstance(value, dict) and value.get("kind") == KIND and {"metric", "items", "arms", "facts"} <= set(value)


def outcomes_text(data: dict) -> str:
    """The visible summary of an outcomes scrap: each arm's mean over this seed's items (made from the data)."""
    n = len(data["items"])
    width = max(len(a) for a in data["arms"])
    lines = [f"{data['metric']} at this seed ({n} items; across-seed verdicts: agentpost compare)"]
    for arm, values in sorted(data["arms"].items()):  # notebook JSON stores keys sorted
        mean = math.fsum(values) / len(values)
        lines.append(f"  {arm:<{width}}  mean {mean:.{TEXT_DIGITS}g}")
    return "\n".join(lines)


def outcomes_html(data: dict) -> str:
    return f'<pre class="{HTML_CLASS}">{html.escape(outcomes_text(data))}</pre>'


def record_outcomes(
    metric: str,
    outcomes: Mapping[str, Any],
    *,
    facts: Mapping[str, Mapping[str, Any]],
    items: Sequence[Hashable] | None = None,
) -> None:
    """Record this run's per-item outcomes of every arm on ``metric`` (one seed = one replication).

    ``outcomes`` maps each arm to its per-item values, either a sequence aligned with ``items`` (stable item ids:
    the same id must name the same item in every seed that scores it) or a ``{item id: value}`` mapping.
    ``facts`` maps each arm to :func:`arm_facts`. The chapter's declared comparisons pair the arms item by item
    across the seed runs; the cell shows each arm's mean at this seed.
    """
    data = outcomes_payload(metric, outcomes, items=items, facts=facts)
    name = PREFIX + metric
    scrap = {"name": name, "data": data, "encoder": "json", "version": 1}
    _display(
        {SCRAP_MIME: scrap, "text/plain": outcomes_text(data), "text/html": outcomes_html(data)},
        name,
        data=True,
        kind="result",
    )
