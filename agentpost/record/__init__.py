"""What runs inside a chapter's kernel to record evidence: glue (one value, table, figure or paired comparison),
per-item outcomes with each arm's measured facts, the device and packages, content hashes.

The ground floor of the evidence machinery: it imports nothing of :mod:`agentpost.evidence` (receipts, validation,
the ledger) or :mod:`agentpost.run`, so an edit there never stales a run (README, "Evidence that stays current"; the
import-linter layers in pyproject.toml hold it)."""

from agentpost.record.environment import show_device
from agentpost.record.recording import glue, glue_figure, glue_paired, glue_table
from agentpost.record.outcomes import arm_facts, fingerprint, record_outcomes

__all__ = [
    "arm_facts",
    "fingerprint",
    "glue",
    "glue_figure",
    "glue_paired",
    "glue_table",
    "record_outcomes",
    "show_device",
]
