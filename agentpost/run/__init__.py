"""Papermill execution of chapter notebooks: parameter checks, cache keys, backends, batches."""

from agentpost.errors import UsageError
from agentpost.run.params import RunSpec, plan_runs

__all__ = ["RunSpec", "UsageError", "plan_runs"]
