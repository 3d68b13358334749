"""Recording metrics (glue), receipts, validation and the evidence ledger."""

from agentpost.evidence.recording import glue, glue_figure, glue_paired, glue_table

__all__ = ["glue", "glue_figure", "glue_paired", "glue_table"]
