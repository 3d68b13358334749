"""Teacher-sync policies (Recursive OPSD, App. D, eq. 9): which weights the privileged teacher holds.

The policies act on the student's **trainable** tensors (``requires_grad``); frozen tensors are shared by student
and teacher. For the project's small LM every tensor is trainable, so the teacher is a full set of weights; for a
LoRA-wrapped hub model only the adapter tensors are trainable, so the teacher is the frozen base plus its own copy
of the adapters (the paper leaves the sync open). With theta_S^(k) the student's trainable tensors after optimizer step
k (1-based) and theta_0 those at :meth:`TeacherSync.start`:

* ``frozen``   theta_T = theta_0 always (standard OPSD; with LoRA the initial adapters, B = 0, i.e. the base model
  with adapters off);
* ``live``     theta_T = theta_S^(k) (DCE: the teacher forward runs on the student's current weights, no copy);
* ``ema``      theta_T^(k) = d theta_T^(k-1) + (1 - d) theta_S^(k), theta_T^(0) = theta_0;
* ``periodic`` theta_T = theta_S^(k) when k is a multiple of m, else unchanged.

Interface: ``start(student)`` before the first update; ``after_step(k, student)`` after step k; ``weights()`` the
teacher's trainable tensors by name; ``as_teacher()`` a context in which the student module carries the teacher's
tensors (swapped in under no-grad and swapped back on exit), so one module plays both roles and nothing but the
trainable tensors is ever copied.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from agentpost.registry import Registry

#: name -> teacher-sync policy class.
TEACHER_SYNCS = Registry("teacher sync")


def register_sync(name: str):
    """Register a :class:`TeacherSync` subclass under ``name`` (also its ``name`` attribute)."""

    def wrap(cls):
        cls.name = name
        return TEACHER_SYNCS.register(name)(cls)

    return wrap


def trainable(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The tensors the optimizer updates (``requires_grad``), by name; the teacher policies act on these."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if not params:
        raise ValueError("the model has no trainable parameters (requires_grad); nothing for a teacher to track")
    return params


class TeacherSync:
    """Base: keeps its own copy of the student's trainable tensors, taken at :meth:`start`."""

    name = "base"

    def start(self, student: torch.nn.Module) -> None:
        self.student = student
        self.state = {n: p.detach().clone() for n, p in trainable(student).items()}

    def weights(self) -> dict[str, torch.Tensor]:
        """The teacher's trainable tensors by name (read-only use)."""
        return self.state

    @contextmanager
    def as_teacher(self):
        """The student module with the teacher's tensors swapped in for the duration of the block (no-grad)."""
        params = trainable(self.student)
        with torch.no_grad():
            saved = {n: p.detach().clone() for n, p in params.items()}
            for n, p in params.items():
                p.copy_(self.state[n])
            try:
                yield self.student
            finally:
                for n, p in params.items():
                    p.copy_(saved[n])

    def after_step(self, step: int, student: torch.nn.Module) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def _copy_from(self, student: torch.nn.Module) -> None:
        for n, p in trainable(student).items():
            self.state[n].copy_(p)


@register_sync("frozen")
class Frozen(TeacherSync):
    def after_step(self, step, student):
        pass


@register_sync("live")
class Live(TeacherSync):
    """DCE: the teacher forward runs on the student's own current weights (no copy is kept)."""

    def start(self, student):
        trainable(student)
        self.student = student

    def weights(self):
        return {n: p.detach() for n, p in trainable(self.student).items()}

    @contextmanager
    def as_teacher(self):
        with torch.no_grad():
            yield self.student

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
        for n, p in trainable(student).items():
            self.state[n].mul_(self.decay).add_(p, alpha=1.0 - self.decay)


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
    cls = TEACHER_SYNCS.lookup(name)
    if cls is EMA:
        return cls(ema_decay)
    if cls is Periodic:
        return cls(sync_every)
    return cls()
