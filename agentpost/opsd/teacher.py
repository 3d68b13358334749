"""Teacher-sync policies (Recursive OPSD, App. D, eq. 9): which weights the privileged teacher holds.

One interface, :class:`TeacherSync`: ``start(student)`` before the first update, ``forward_model()`` gives the
module the teacher runs (under no-grad), ``after_step(k, student)`` runs after optimizer step ``k`` (1-based).
With theta_S^(k) the student after step k:

* ``frozen``   theta_T = theta_0 always (standard OPSD);
* ``live``     theta_T = theta_S^(k) (DCE: the teacher is the current student, no copy is kept);
* ``ema``      theta_T^(k) = d theta_T^(k-1) + (1 - d) theta_S^(k), theta_T^(0) = theta_0;
* ``periodic`` theta_T = theta_S^(k) when k is a multiple of m, else unchanged.
"""

from __future__ import annotations

import copy

import torch

TEACHER_SYNCS: dict[str, type["TeacherSync"]] = {}


def register_sync(name: str):
    def wrap(cls):
        if name in TEACHER_SYNCS:
            raise ValueError(f"teacher sync {name!r} is already registered")
        cls.name = name
        TEACHER_SYNCS[name] = cls
        return cls

    return wrap


class TeacherSync:
    """Base: keeps a frozen copy of the student taken at :meth:`start`."""

    name = "base"

    def start(self, student: torch.nn.Module) -> None:
        self.teacher = copy.deepcopy(student).eval()
        for p in self.teacher.parameters():
            p.requires_grad_(False)

    def forward_model(self) -> torch.nn.Module:
        return self.teacher

    def after_step(self, step: int, student: torch.nn.Module) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def _copy_from(self, student: torch.nn.Module) -> None:
        for t, s in zip(self.teacher.parameters(), student.parameters()):
            t.copy_(s)


@register_sync("frozen")
class Frozen(TeacherSync):
    def after_step(self, step, student):
        pass


@register_sync("live")
class Live(TeacherSync):
    """DCE: the teacher forward runs on the student's own current weights (no copy)."""

    def start(self, student):
        self.student = student

    def forward_model(self):
        return self.student

    def after_step(self, step, student):
        self.student = student


@register_sync("ema")
class EMA(TeacherSync):
    def __init__(self, decay: float):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay d must be in [0, 1), got {decay}")
        self.decay = decay

    @torch.no_grad()
    def after_step(self, step, student):
        for t, s in zip(self.teacher.parameters(), student.parameters()):
            t.mul_(self.decay).add_(s, alpha=1.0 - self.decay)


@register_sync("periodic")
class Periodic(TeacherSync):
    def __init__(self, every: int):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"periodic sync needs an integer period m >= 1, got {every!r}")
        self.every = every

    def after_step(self, step, student):
        if step % self.every == 0:
            self._copy_from(student)


def make_sync(name: str, *, ema_decay: float = 0.3, sync_every: int = 5) -> TeacherSync:
    """The registered policy ``name`` (``ema`` takes ``ema_decay``, ``periodic`` takes ``sync_every``)."""
    if name not in TEACHER_SYNCS:
        raise KeyError(f"unknown teacher sync {name!r}; known: {sorted(TEACHER_SYNCS)}")
    cls = TEACHER_SYNCS[name]
    if cls is EMA:
        return cls(ema_decay)
    if cls is Periodic:
        return cls(sync_every)
    return cls()
