"""Statistics shared by every chapter: the paired public comparison protocol."""

from agentpost.stats.paired import (
    ArmMeta,
    PairedResult,
    Split,
    compare,
    select_on_validation,
)

__all__ = ["ArmMeta", "PairedResult", "Split", "compare", "select_on_validation"]
