"""The run cache: a run is reused only when a run with the same key exists, succeeded and validates."""

from __future__ import annotations

from agentpost.evidence.receipt import RECEIPT_NAME
from agentpost.evidence.validate import check_run
from agentpost.project import project_root
from agentpost.run.params import RunSpec


def cached_result(spec: RunSpec):
    """The reusable run of ``spec`` (same run key, status ok, no validation problem) as a ``cached`` result, or None."""
    from agentpost.run.execute import RunResult

    if not (spec.folder / RECEIPT_NAME).is_file():
        return None
    report = check_run(spec.folder)
    if report.problems or report.receipt.get("status") != "ok":
        return None
    return RunResult(
        spec,
        "cached",
        spec.folder.relative_to(project_root()).as_posix(),
        0.0,
        metrics=len(report.receipt.get("metrics", {})),
    )
