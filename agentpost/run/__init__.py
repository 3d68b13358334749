"""Papermill execution of chapter notebooks: parameter checks, cache keys, backends, batches."""

from agentpost.run.params import RunSpec, UsageError, plan_runs

__all__ = ["RunSpec", "UsageError", "plan_runs"]
