"""The multi-turn tool-search protocol over StableToolBench (toolsearcher.md, "Task" and pseudo-code step 1).

Each assistant turn either calls the search tool, ``<tool_call>{"name": "api_doc_search_tool", "arguments":
{"query": ..., "category": ...}}</tool_call>``, or ends the episode with ``<tool_list>name\\nname</tool_list>``.
A search returns the top-``topk`` API docs (optionally filtered to one category) as a ``<tool_response>`` whose
text is truncated to ``max_response_tokens`` tokens of the project's shared tokenizer. At most ``max_turns``
assistant turns; parsing is strict and a malformed turn is a search event that retrieves nothing (its tool
response is an error message), never a crash.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np

SEARCH_TOOL = "api_doc_search_tool"
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_SENT = re.compile(r"(?<=[.?!])\s+")


@dataclass(frozen=True)
class Turn:
    """A parsed assistant turn: ``kind`` in {search, answer, malformed}."""

    kind: str
    query: str = ""
    category: str | None = None
    error: str = ""


def search_call(query: str, category: str | None = None) -> str:
    """The assistant text of one search turn."""
    args = {"query": query} if category in (None, "all") else {"query": query, "category": category}
    return "<tool_call>" + json.dumps({"name": SEARCH_TOOL, "arguments": args}, ensure_ascii=False) + "</tool_call>"


def answer_text(names) -> str:
    """The assistant text of the final turn (one name per line: API names may contain commas)."""
    return "<tool_list>\n" + "".join(n + "\n" for n in names) + "</tool_list>"


def parse_turn(text: str, categories) -> Turn:
    """Strict parse of one assistant turn; anything but one well-formed call or one answer block is malformed."""
    calls = _CALL.findall(text)
    has_list = "<tool_list>" in text or "</tool_list>" in text
    if has_list and not calls:
        return Turn("answer")
    if len(calls) != 1 or has_list:
        return Turn("malformed", error="expected exactly one <tool_call> or one <tool_list>")
    try:
        call = json.loads(calls[0])
        args = call["arguments"]
        query = args["query"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return Turn("malformed", error="tool call is not JSON with name/arguments.query")
    if call.get("name") != SEARCH_TOOL or not isinstance(query, str) or not query.strip():
        return Turn("malformed", error=f"unknown tool or empty query; the tool is {SEARCH_TOOL}")
    category = args.get("category")
    if category not in (None, "all") and category not in categories:
        return Turn("malformed", error=f"unknown category {category!r}")
    return Turn("search", query=query, category=category)


def clauses(text: str, min_words: int = 3) -> tuple[str, ...]:
    """Candidate search queries of a request: the whole request, then each sentence with >= ``min_words`` words."""
    parts = [p.strip() for p in _SENT.split(text.strip()) if len(p.split()) >= min_words]
    return tuple(dict.fromkeys([text] + parts))


@dataclass
class Rollout:
    """One episode: messages, per-search results (API names) and the final answer (None if the turn cap hit)."""

    messages: list[dict] = field(default_factory=list)
    results: list[list[str]] = field(default_factory=list)
    answer: str | None = None

    @property
    def has_answer(self) -> bool:
        return self.answer is not None


class SearchEnv:
    """The search tool over a retriever (``agentpost.toolsearcher.retrieval``)."""

    def __init__(
        self, retriever, docs, *, topk: int = 5, max_turns: int = 8, max_response_tokens: int = 768, tokenizer=None
    ):
        if topk < 1 or max_turns < 1 or max_response_tokens < 1:
            raise ValueError("topk, max_turns and max_response_tokens must be >= 1")
        self.retriever, self.docs = retriever, list(docs)
        self.topk, self.max_turns, self.max_response_tokens = topk, max_turns, max_response_tokens
        self._tok = tokenizer
        self._doc_ids: dict[int, list[int]] = {}

    @property
    def categories(self):
        return self.retriever.category_set

    def _ids(self, i: int) -> list[int]:
        if i not in self._doc_ids:
            self._doc_ids[i] = self._tok.encode(self.docs[i] + "\n", add_special_tokens=False)
        return self._doc_ids[i]

    def respond(self, turn: Turn) -> tuple[list[int], str]:
        """Execute a parsed turn: (document indices, tool-response text truncated to the token cap)."""
        if turn.kind == "malformed":
            return [], f"<tool_response>error: {turn.error}</tool_response>"
        idx = self.retriever.search(turn.query, self.topk, category=turn.category)
        if self._tok is None:
            from agentpost.models.tokenizer import load_tokenizer

            self._tok = load_tokenizer()
        ids: list[int] = []
        for i in idx:
            ids += self._ids(i)
        text = self._tok.decode(ids[: self.max_response_tokens])
        return idx, f"<tool_response>{text}</tool_response>"


def category_centroids(doc_emb: np.ndarray, categories: np.ndarray, names) -> np.ndarray:
    """L2-normalised mean document embedding of each category in ``names`` order (the policy's category feature)."""
    out = np.stack([doc_emb[categories == c].mean(0) for c in names])
    return out / np.linalg.norm(out, axis=1, keepdims=True)
