"""Tool-use traces for the project's tool LM (trained by :mod:`agentpost.models.train_tool_lm`; the ActKV chapter
evaluates on held-out ones): a **synthetic trace format over real StableToolBench API docs**, built on
the validated loaders of :mod:`agentpost.data.stabletoolbench`.

What is real and what is synthetic (label every display of these traces so):

* real: the user's task is a StableToolBench query (``queries.jsonl``); every observation is documentation text of
  real RapidAPI endpoints (``apis.jsonl``: name, category, description, method, parameters), truncated to
  ``max_doc_chars`` characters;
* synthetic: the round structure, the templated reasoning and the choice of which documented API each action
  calls. No API is executed and no API response appears.

Each trace is a protected prefix (system prompt + the query) followed by observation–reasoning–action (ORA)
rounds (spec ``actkv.md``, "Action regions"). Round ``r``'s observation documents ``distractors`` distractor APIs
plus the targets introduced in that round; round ``r``'s action calls target ``r``, which was introduced in round
0 for ``r = 0`` and otherwise in a round drawn uniformly from ``0..r-1``, i.e. one or more rounds earlier and behind
later distractor observations. The reasoning names the target's *tool*; the action must copy the API's
qualified name ``"<tool>.<api>"`` from the observation that documented it. Tool names are unique within a trace,
so evicting the target's observation from the KV cache makes the action unrecoverable — the property the ActKV
chapter measures.

Held-out evaluation is by whole StableToolBench query groups (:data:`SPLIT_GROUPS`,
:func:`agentpost.data.stabletoolbench.split_by_held_out_groups`; ToolSearcher's within-group split would put test
APIs into the tool LM's training traces). The training groups
(G1_category, G1_instruction, G2_category, G3_instruction) share no API with G1_tool (validation) and share 33
APIs from 14 tools with G2_instruction (test); a held-out split's API pool drops every tool that occurs in the
training pool, so held-out actions always name APIs the model never saw in training. G2_instruction is the test
group because it is the larger held-out multi-tool group (106 queries, ~316 usable tools), G1_tool (158 queries,
99 tools) selects checkpoints.
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass, field

from agentpost.data.stabletoolbench import Api, Query, api_index, load_queries, split_by_held_out_groups

TRACE_LABEL = "synthetic trace format over real StableToolBench API docs"

SPLIT_GROUPS: dict[str, tuple[str, ...]] = {
    "train": ("G1_category", "G1_instruction", "G2_category", "G3_instruction"),
    "validation": ("G1_tool",),
    "test": ("G2_instruction",),
}

SYSTEM_PROMPT = (
    "You are an assistant that solves the user's task with tools. Tool documentation arrives in tool responses; "
    "call a documented API by its name."
)

_REASONING = (
    'Step {k}: the task needs the "{tool}" tool documented above.',
    'Step {k}: next I call the "{tool}" tool from the documentation.',
    'Step {k}: to continue, I use the "{tool}" tool.',
)
#: Text that would be read as a chat or tool delimiter by the tokenizer; APIs and queries containing it are skipped.
_FORBIDDEN = ("<|", "|>", "<tool_", "</tool_")


@dataclass(frozen=True)
class TraceRound:
    """One ORA round of a synthetic trace over real API docs."""

    observation: str  # "<tool_response>\n<doc>\n...\n</tool_response>": real API documentation text
    reasoning: str  # short templated reasoning naming the target's tool
    action: str  # '<tool_call>{"name": "<tool>.<api>", "arguments": {}}</tool_call>'
    api_name: str = ""  # the qualified name the action calls
    source_round: int = 0  # the round whose observation documented the called API


@dataclass(frozen=True)
class ToolTrace:
    """A synthetic-format trace (real query, real API docs); ``text()`` renders it with Qwen chat markers."""

    query_id: str
    group: str
    prefix: str  # system prompt + task: the protected prefix
    rounds: tuple[TraceRound, ...]

    def round_texts(self) -> list[tuple[str, str, str]]:
        """Per round: (text before the action, the action, text after it); their concatenation is the round."""
        out = []
        for r in self.rounds:
            before = f"<|im_start|>tool\n{r.observation}<|im_end|>\n<|im_start|>assistant\n{r.reasoning}\n"
            out.append((before, r.action, "<|im_end|>\n"))
        return out

    def text(self) -> str:
        return self.prefix + "".join(b + a + c for b, a, c in self.round_texts())


@dataclass(frozen=True)
class TokenizedTrace:
    input_ids: list[int]
    prefix_len: int  # tokens of the protected prefix
    round_spans: list[tuple[int, int]]  # [start, end) of each round (observation + reasoning + action)
    action_mask: list[bool]  # True on tokens from <tool_call> through </tool_call> inclusive
    name_mask: list[bool] = field(default_factory=list)  # True on the action tokens that spell the API name
    #: True on the assistant turn of every round (reasoning + action + <|im_end|>): the tokens a model generates;
    #: False on the prefix and on the tool turn (the observation and the chat markers around it)
    generated_mask: list[bool] = field(default_factory=list)


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def tokenize_trace(trace: ToolTrace, tokenizer) -> TokenizedTrace:
    """Tokenize piecewise so spans are exact. Every piece boundary touches a special token (``<|im_start|>``,
    ``<tool_call>``, ``</tool_call>``), so the pieces tokenize exactly as ``trace.text()`` does as a whole."""
    ids = _encode(tokenizer, trace.prefix)
    prefix_len = len(ids)
    action_mask = [False] * prefix_len
    name_mask = [False] * prefix_len
    generated = [False] * prefix_len
    spans = []
    head = "<|im_start|>assistant\n"
    for (before, action, after), rnd in zip(trace.round_texts(), trace.rounds):
        start = len(ids)
        b = _encode(tokenizer, before)
        n_tool = len(_encode(tokenizer, before[: before.index(head) + len(head)]))  # the tool turn + assistant header
        enc = tokenizer(action, add_special_tokens=False, return_offsets_mapping=True)
        a = list(enc.input_ids)
        c = _encode(tokenizer, after)
        lo = action.index(json.dumps(rnd.api_name, ensure_ascii=False)) + 1
        hi = lo + len(rnd.api_name)
        ids += b + a + c
        action_mask += [False] * len(b) + [True] * len(a) + [False] * len(c)
        name_mask += [False] * len(b) + [s < hi and e > lo for s, e in enc.offset_mapping] + [False] * len(c)
        generated += [False] * n_tool + [True] * (len(ids) - start - n_tool)
        spans.append((start, len(ids)))
    return TokenizedTrace(ids, prefix_len, spans, action_mask, name_mask, generated)


def _check_split(split: str) -> None:
    if split not in SPLIT_GROUPS:
        raise ValueError(f"unknown split {split!r}; use one of {sorted(SPLIT_GROUPS)}")


def split_groups(seed: int = 0) -> dict[str, list[str]]:
    """Query ids per split; whole StableToolBench groups are held out (:data:`SPLIT_GROUPS`).

    Membership does not depend on ``seed``; ``seed`` only shuffles the order of ids within each split."""
    out = {}
    for split, queries in split_by_held_out_groups(load_queries(), SPLIT_GROUPS).items():
        ids = sorted((str(q.query_id) for q in queries), key=int)
        random.Random(f"split-order/{seed}/{split}").shuffle(ids)
        out[split] = ids
    return out


def _record(api: Api) -> dict:
    """The API's fields as in ``apis.jsonl`` (for the delimiter check over all of its text)."""
    params = [
        [{"name": p.name, "type": p.type, "description": p.description, "default": json.loads(p.default)} for p in ps]
        for ps in (api.required, api.optional)
    ]
    return {
        "category_name": api.category,
        "tool_name": api.tool,
        "api_name": api.api,
        "api_description": api.description,
        "method": api.method,
        "required_parameters": params[0],
        "optional_parameters": params[1],
    }


def _usable(api: Api) -> bool:
    name = qualified_name(api)
    text = json.dumps(_record(api), ensure_ascii=False)
    return not any(ch in name for ch in '"\\\n\r\t') and not any(f in text for f in _FORBIDDEN)


def qualified_name(api: Api) -> str:
    """The name an action calls: ``"<tool>.<api>"``."""
    return f"{api.tool}.{api.api}"


def _key(api: Api) -> tuple[str, str, str]:
    return api.category, api.tool, api.api


@functools.lru_cache(maxsize=None)
def _pool(split: str) -> tuple[Api, ...]:
    """The split's APIs: candidate APIs of its queries; held-out splits drop every tool of the training pool."""
    apis = api_index()
    splits = split_by_held_out_groups(load_queries(), SPLIT_GROUPS)

    def candidates(s):
        return {apis[n] for q in splits[s] for n in q.candidates if n in apis}

    keys = candidates(split)
    if split != "train":
        train_tools = {a.tool for a in candidates("train")}
        keys = {a for a in keys if a.tool not in train_tools}
    return tuple(sorted((a for a in keys if _usable(a)), key=_key))


def render_doc(api: Api, max_doc_chars: int) -> str:
    """One API's documentation as a JSON line, cut to ``max_doc_chars`` (never inside the leading name field)."""
    doc = {
        "name": qualified_name(api),
        "category": api.category,
        "description": api.description,
        "method": api.method,
        "required_parameters": [{"name": p.name, "type": p.type, "description": p.description} for p in api.required],
        "optional_parameters": [{"name": p.name, "type": p.type} for p in api.optional],
    }
    text = json.dumps(doc, ensure_ascii=False)
    header = len(json.dumps({"name": doc["name"]}, ensure_ascii=False)) - 1
    return text if len(text) <= max_doc_chars else text[: max(max_doc_chars, header)] + " ..."


def _one_trace(
    query: Query, pool: tuple[Api, ...], rng: random.Random, rounds: int, distractors: int, max_doc_chars: int
):
    apis = api_index()
    used_tools: set[str] = set()
    targets: list[Api] = []
    preferred = [apis[n] for n in query.targets + query.candidates if n in apis]
    pool_set = set(pool)
    shuffled = list(pool)
    rng.shuffle(shuffled)
    for api in [a for a in preferred if a in pool_set] + shuffled:
        if len(targets) == rounds:
            break
        if api.tool not in used_tools:
            targets.append(api)
            used_tools.add(api.tool)
    distractor_apis = []  # type: ignore[var-annotated]
    for api in shuffled:
        if len(distractor_apis) == rounds * distractors:
            break
        if api.tool not in used_tools:
            distractor_apis.append(api)
            used_tools.add(api.tool)
    if len(targets) < rounds or len(distractor_apis) < rounds * distractors:
        raise ValueError(
            f"API pool of {len(pool)} APIs has too few distinct tools for {rounds} rounds x "
            f"(1 + {distractors}) documented APIs"
        )
    source = [0] + [rng.randrange(r) for r in range(1, rounds)]
    out = []
    for r in range(rounds):
        docs = [targets[j] for j in range(rounds) if source[j] == r] + distractor_apis[
            r * distractors : (r + 1) * distractors
        ]
        rng.shuffle(docs)
        observation = "<tool_response>\n" + "\n".join(render_doc(a, max_doc_chars) for a in docs) + "\n</tool_response>"
        target = targets[r]
        reasoning = rng.choice(_REASONING).format(k=r + 1, tool=target.tool)
        call = json.dumps({"name": qualified_name(target), "arguments": {}}, ensure_ascii=False)
        out.append(
            TraceRound(observation, reasoning, f"<tool_call>{call}</tool_call>", qualified_name(target), source[r])
        )
    return tuple(out)


def build_traces(
    split: str,
    *,
    n_traces: int | None = None,
    rounds: int = 4,
    distractors: int = 2,
    max_doc_chars: int = 300,
    seed: int = 0,
) -> list[ToolTrace]:
    """Traces (synthetic trace format over real StableToolBench API docs) for the queries of ``split``.

    One trace per query by default; ``n_traces`` cycles through the split's queries. Deterministic for a seed."""
    _check_split(split)
    if rounds < 1 or distractors < 0 or max_doc_chars < 1:
        raise ValueError(
            f"need rounds >= 1, distractors >= 0, max_doc_chars >= 1; got {rounds}, {distractors}, {max_doc_chars}"
        )
    if n_traces is not None and n_traces < 0:
        raise ValueError(f"n_traces must be >= 0, got {n_traces}")
    by_id = {str(q.query_id): q for q in load_queries()}
    ids = [i for i in split_groups(seed)[split] if not any(f in by_id[i].text for f in _FORBIDDEN)]
    pool = _pool(split)
    n = len(ids) if n_traces is None else n_traces
    traces = []
    for i in range(n):
        q = by_id[ids[i % len(ids)]]
        rng = random.Random(f"trace/{seed}/{split}/{i}")
        prefix = f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{q.text.strip()}<|im_end|>\n"
        rounds_ = _one_trace(q, pool, rng, rounds, distractors, max_doc_chars)
        traces.append(ToolTrace(str(q.query_id), q.group, prefix, rounds_))
    return traces
