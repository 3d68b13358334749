"""Statistics shared by every chapter: the paired public comparison protocol and its planner."""

from agentpost.stats.paired import (
    CONCLUSIVE,
    VERDICT_CLASSES,
    ArmMeta,
    PairedResult,
    ProtocolError,
    Split,
    compare,
    select_on_validation,
)
from agentpost.stats.planner import Plan, plan

__all__ = [
    "CONCLUSIVE",
    "VERDICT_CLASSES",
    "ArmMeta",
    "PairedResult",
    "Plan",
    "ProtocolError",
    "Split",
    "compare",
    "plan",
    "select_on_validation",
]
