"""Action regions and observe-reason-act (ORA) rounds on a token stream (actkv.md, "Action regions").

An action region is the text between a tool-call open delimiter and its close delimiter, matched on the
*decoded* stream so that a delimiter split across several tokens is still found. A token belongs to the action
region when its character span ``[s, e)`` overlaps ``(open_end, close_end]``: it ends after the open delimiter
ends and starts before the close delimiter ends. So the close delimiter's tokens count as action tokens (the
model generates them as part of the call) and the open delimiter's tokens do not (they announce the call).

A round ends with the token that completes an action's close delimiter; the next round starts right after it.
The protected prefix (system prompt + task) is the first ``prefix_len`` tokens and belongs to no round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Delimiters:
    """The open/close strings of a tool call."""

    name: str
    open: str
    close: str

    def __post_init__(self) -> None:
        if not self.open or not self.close:
            raise ValueError(f"delimiters {self.name!r}: open and close must be non-empty strings")


QWEN = Delimiters("qwen", "<tool_call>", "</tool_call>")
HARMONY = Delimiters("harmony", "<|channel|>commentary to=", "<|call|>")
DELIMITERS = {d.name: d for d in (QWEN, HARMONY)}


def get_delimiters(name_or_delims: str | Delimiters) -> Delimiters:
    if isinstance(name_or_delims, Delimiters):
        return name_or_delims
    if name_or_delims not in DELIMITERS:
        raise ValueError(f"unknown delimiters {name_or_delims!r}; known: {sorted(DELIMITERS)}")
    return DELIMITERS[name_or_delims]


@dataclass(frozen=True)
class TokenEvent:
    """What the detector says about one pushed token."""

    in_action: bool
    opened: bool  # an action region opened inside this token (the accumulator must reset)
    closed: bool  # an action region closed inside this token (the ORA round ends after it)


class ActionRegionDetector:
    """Streaming detector: push decoded token texts one by one, get :class:`TokenEvent` s.

    The decision for a token only uses text up to its end, so it can run inside a generation loop.
    """

    def __init__(self, delimiters: str | Delimiters = "qwen") -> None:
        self.delims = get_delimiters(delimiters)
        self.text = ""
        self._search_from = 0  # where the next delimiter search starts
        self._open_end: int | None = None  # char index where the open region's content starts

    @property
    def inside(self) -> bool:
        return self._open_end is not None

    def push(self, token_text: str) -> TokenEvent:
        s = len(self.text)
        self.text += token_text
        e = len(self.text)
        in_action = self._open_end is not None and e > self._open_end
        opened = closed = False
        while True:
            if self._open_end is None:
                i = self.text.find(self.delims.open, self._search_from)
                if i < 0 or i + len(self.delims.open) > e:
                    break
                self._open_end = i + len(self.delims.open)
                self._search_from = self._open_end
                opened = True
                in_action = in_action or e > self._open_end
            else:
                i = self.text.find(self.delims.close, self._search_from)
                if i < 0 or i + len(self.delims.close) > e:
                    break
                close_end = i + len(self.delims.close)
                in_action = in_action or (e > self._open_end and s < close_end)
                self._open_end = None
                self._search_from = close_end
                closed = True
        return TokenEvent(in_action=in_action, opened=opened, closed=closed)


@dataclass(frozen=True)
class RoundLayout:
    """Where the prefix, the rounds and the action tokens are in a token sequence."""

    prefix_len: int
    round_spans: tuple[tuple[int, int], ...]  # [start, end) per round, covering prefix_len..len
    action_mask: tuple[bool, ...]
    region_starts: tuple[int, ...]  # token indices where an action region opens
    #: True on the tokens the model generates (reasoning and actions); empty = every token after the prefix.
    #: Observations (tool-returned text) are not generated: Algorithm 2 records no confidence on them.
    generated_mask: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.action_mask)
        if self.generated_mask:
            if len(self.generated_mask) != n:
                raise ValueError(f"generated_mask covers {len(self.generated_mask)} tokens, action_mask {n}")
            if any(self.generated_mask[: self.prefix_len]):
                raise ValueError("the protected prefix is not generated: generated_mask must be False on it")
            if any(a and not g for a, g in zip(self.action_mask, self.generated_mask)):
                raise ValueError("every action token is generated: generated_mask must cover action_mask")
        if not 0 <= self.prefix_len <= n:
            raise ValueError(f"prefix_len {self.prefix_len} outside [0, {n}]")
        pos = self.prefix_len
        for a, b in self.round_spans:
            if a != pos or b <= a:
                raise ValueError(f"round spans must tile [prefix_len, len) without gaps: got {self.round_spans}")
            pos = b
        if self.round_spans and pos != n:
            raise ValueError(f"round spans end at {pos}, sequence has {n} tokens")
        if any(self.action_mask[: self.prefix_len]):
            raise ValueError("the protected prefix must not contain action tokens")

    @property
    def generated(self) -> tuple[bool, ...]:
        """The generated-token mask (``generated_mask``, or every token after the prefix when it is empty)."""
        if self.generated_mask:
            return self.generated_mask
        n = len(self.action_mask)
        return (False,) * self.prefix_len + (True,) * (n - self.prefix_len)

    @property
    def mean_round_len(self) -> float:
        """:math:`\\bar L`, the mean FullKV ORA-round length (baselines' mid-round trigger)."""
        return sum(b - a for a, b in self.round_spans) / max(len(self.round_spans), 1)


def detect_rounds(token_texts: Sequence[str], prefix_len: int, delimiters: str | Delimiters = "qwen") -> RoundLayout:
    """Action mask and ORA round spans of a token sequence given as decoded token texts.

    Rounds end at the token that completes a close delimiter; the tail after the last action forms a final
    round when non-empty. Delimiters inside the prefix are ignored (the prefix is never scored).
    """
    if prefix_len < 0 or prefix_len > len(token_texts):
        raise ValueError(f"prefix_len {prefix_len} outside [0, {len(token_texts)}]")
    det = ActionRegionDetector(delimiters)
    mask: list[bool] = [False] * prefix_len
    starts: list[int] = []
    spans: list[tuple[int, int]] = []
    start = prefix_len
    for t in range(prefix_len, len(token_texts)):
        ev = det.push(token_texts[t])
        mask.append(ev.in_action)
        if ev.opened:
            starts.append(t)
        if ev.closed:
            spans.append((start, t + 1))
            start = t + 1
    if start < len(token_texts):
        spans.append((start, len(token_texts)))
    return RoundLayout(prefix_len, tuple(spans), tuple(mask), tuple(starts))


def token_texts(input_ids: Sequence[int], tokenizer) -> list[str]:
    """Per-token decoded texts (special tokens kept) for :func:`detect_rounds`."""
    return [tokenizer.decode([int(i)], skip_special_tokens=False) for i in input_ids]
