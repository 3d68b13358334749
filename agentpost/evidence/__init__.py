"""Recording metrics (glue), the device a notebook ran on, receipts, validation and the evidence ledger."""

from agentpost.evidence.environment import show_device
from agentpost.evidence.recording import glue, glue_figure, glue_paired, glue_table

__all__ = ["glue", "glue_figure", "glue_paired", "glue_table", "show_device"]
