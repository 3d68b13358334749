"""A pytest plugin that records the outcome of every test tied to a catalogue claim.

Tests carry ``@pytest.mark.claim("<chapter>", "C<n>")``. With ``--claims-report FILE`` the plugin writes
``{"<chapter>/<claim>": {"passed": n, "failed": n, "skipped": n, "tests": [...]}}``; the ledger reads it to
derive mechanism-level evidence (it never runs the tests itself). Without ``--claims-report``, a run of the whole
test suite (``pytest tests``, as ``make test`` does, with no ``-k``/``-m`` selection) writes the report to its
default place, :data:`agentpost.evidence.levels.CLAIMS_REPORT`; a partial run writes nothing, so it cannot
replace the outcomes of the full suite. Enabled for every test run through ``tests/conftest.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

_RESULTS: dict[str, dict] = {}


def pytest_addoption(parser):
    parser.addoption("--claims-report", default=None, help="write outcomes of claim-marked tests to this JSON file")


def pytest_collection_modifyitems(config, items):
    from agentpost.catalogue import chapter

    for item in items:
        for mark in item.iter_markers("claim"):
            if len(mark.args) != 2:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.claim takes (chapter, claim_id)")
            try:
                chapter(mark.args[0]).claim(mark.args[1])
            except KeyError as err:
                raise pytest.UsageError(f"{item.nodeid}: {err.args[0]}") from None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
        return
    for mark in item.iter_markers("claim"):
        entry = _RESULTS.setdefault(
            f"{mark.args[0]}/{mark.args[1]}", {"passed": 0, "failed": 0, "skipped": 0, "tests": []}
        )
        entry[report.outcome] += 1
        entry["tests"].append(item.nodeid)


def _default_report(config) -> Path | None:
    """The default report path when this session runs the whole suite unselected, else None."""
    from agentpost.evidence.levels import CLAIMS_REPORT
    from agentpost.project import project_root

    if config.getoption("keyword") or config.getoption("markexpr"):
        return None
    tests = (project_root() / "tests").resolve()
    args = [Path(a.split("::")[0]).resolve() for a in config.args] or [Path(config.rootpath).resolve()]
    covers = any(a == tests or a in tests.parents for a in args)
    return project_root() / CLAIMS_REPORT if covers else None


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--claims-report") or _default_report(session.config)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(_RESULTS, indent=2, sort_keys=True) + "\n")
