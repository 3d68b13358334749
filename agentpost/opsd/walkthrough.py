"""Recursive OPSD turned by hand: the teacher's weight under each sync policy as the updates go on.

A one-parameter student is set to theta_S = k + 1 after update k (theta_0 = 1), the chapter's two-parameter example
reduced to its first tensor; each policy of :func:`agentpost.opsd.teacher.make_sync` tracks it. :func:`teacher_weights`
is what the chapter's "Turn it by hand" section renders, through :func:`agentpost.book.walkthrough.turn_by_hand`.
"""

from __future__ import annotations

import pandas as pd
import torch

from agentpost.book.walkthrough import fixed_figure
from agentpost.opsd.teacher import make_sync


class _OneParam(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.tensor(1.0, dtype=torch.float64))


def teacher_weights(updates: int, ema_decay: float, sync_every: int) -> pd.DataFrame:
    """theta_T after updates 0..``updates`` for frozen, live (DCE), EMA (decay ``ema_decay``, eq. 9) and periodic
    (every ``sync_every``) teachers, next to the student's theta_S."""
    if updates < 1:
        raise ValueError(f"updates must be >= 1, got {updates}")
    policies = {
        "frozen": {},
        "live": {},
        f"ema d={ema_decay:g}": {"ema_decay": ema_decay},
        f"periodic m={sync_every}": {"sync_every": sync_every},
    }
    columns = {"update": list(range(updates + 1)), "student": [float(k + 1) for k in range(updates + 1)]}
    for label, kw in policies.items():
        student, sync = _OneParam(), make_sync(label.split()[0], **kw)
        sync.start(student)
        trace = [float(sync.weights()["theta"])]
        for k in range(1, updates + 1):
            with torch.no_grad():
                student.theta.fill_(k + 1.0)
            sync.after_step(k, student)
            trace.append(float(sync.weights()["theta"]))
        columns[label] = trace
    return pd.DataFrame(columns).round(4)


def render(updates: int, ema_decay: float, sync_every: int) -> list:
    """The teacher's weight per policy against the update count, and the last five rows of the table."""
    table = teacher_weights(updates, ema_decay, sync_every)
    fig = fixed_figure(5.2, 2.8, left=0.11, right=0.98, bottom=0.16, top=0.97)
    ax = fig.add_subplot()
    for column in table.columns[1:]:
        ax.plot(
            table["update"],
            table[column],
            drawstyle="steps-post" if column.startswith("periodic") else "default",
            lw=2.5 if column == "student" else 1.5,
            ls=":" if column == "student" else "-",
            label=column,
        )
    ax.set_xlabel("update k")
    ax.set_ylabel("teacher weight θ_T")
    ax.legend(fontsize=7)
    return [fig, table.tail(5)]
