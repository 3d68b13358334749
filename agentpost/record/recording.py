"""Record a value once so that scrapbook, the receipts and the book's ``{glue:text}`` all read it.

One ``display_data`` output per value (README, "How to add a paper", step 3): its bundle carries scrapbook's scrap
payload under ``application/scrapbook.scrap.json+json`` next to a ``text/plain`` rendering, and its metadata
marks it as a scrapbook scrap so that myst-nb registers it for ``{glue:text}``/``{glue:figure}``.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from typing import Any

SCRAP_MIME = "application/scrapbook.scrap.json+json"

#: What a glued value is, declared when it is glued and kept in the output's metadata (``metadata.agentpost.kind``,
#: beside scrapbook's own ``metadata.scrapbook``; the scrap data is untouched, so scrapbook readers see no change):
#:
#: * ``result`` (default): a result of training, sampling or evaluation; another machine reproduces it within the
#:   spread measured over torch's kernel paths;
#: * ``deterministic``: a value every machine computes the same (counts, a formula's worked example);
#: * ``timing``: a wall-clock or throughput measurement, and anything decided by one;
#: * ``machine``: a fact of the machine itself (its device and packages).
#:
#: The notebook regression check (tests/notebooks/glue_regression.py) compares the first two and never the others.
KINDS = ("result", "deterministic", "timing", "machine")

#: Significant digits in the text rendering of floats. The JSON payload keeps full precision; the text is what
#: the book shows and what nbval compares, so it is rounded enough to be stable across BLAS builds.
TEXT_DIGITS = 4


def _jsonable(value: Any) -> Any:
    """Convert numpy/torch scalars and arrays to plain JSON types, refusing anything else by name."""
    if isinstance(value, (str, bool)) or value is None:
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist"):  # numpy / torch scalars and arrays
        return _jsonable(value.tolist())
    raise TypeError(f"glue: cannot record a value of type {type(value).__name__}; use numbers, strings, lists or dicts")


def format_value(value: Any) -> str:
    """Text rendering used by the book and compared by nbval."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.{TEXT_DIGITS}g}"
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _split_top(inner: str) -> list[str]:
    """Split a rendering's inside at the ``, `` separators that are not nested in brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch in "{[(" and 1 or 0
        depth -= ch in "}])" and 1 or 0
        if depth == 0 and inner.startswith(", ", i):
            parts.append(inner[start:i])
            start = i + 2
    parts.append(inner[start:])
    return parts


def _order_like(value: Any, text: str) -> Any:
    """``value`` with its dict keys in the order they appear in ``text`` (notebook JSON stores keys sorted)."""
    if isinstance(value, dict) and text.startswith("{") and text.endswith("}") and value:
        items = _split_top(text[1:-1])
        keyed = {item.split(": ", 1)[0]: item.split(": ", 1)[1] for item in items if ": " in item}
        if set(keyed) != set(value) or len(items) != len(value):
            return value
        return {k: _order_like(value[k], keyed[k]) for k in keyed}
    if isinstance(value, list) and text.startswith("[") and text.endswith("]") and value:
        items = _split_top(text[1:-1])
        return [_order_like(v, t) for v, t in zip(value, items)] if len(items) == len(value) else value
    return value


def value_html(name: str, text: str) -> str:
    return f'<code class="agentpost-glue">{html.escape(name)}</code> = {html.escape(text)}'


def table_text(frame: Any) -> str:
    return frame.to_string(index=False, float_format=lambda x: f"{x:.{TEXT_DIGITS}g}")


def glue_metadata(output: dict) -> dict:
    """What :func:`glue` recorded about a glued output beyond its data (``kind``, a table's ``columns``)."""
    return (output.get("metadata") or {}).get("agentpost") or {}


def glue_kind(output: dict) -> str:
    """The declared kind of a glued output (``result`` for outputs recorded before kinds were declared)."""
    return glue_metadata(output).get("kind", "result")


#: How :func:`_jsonable` stores non-finite floats, back to the floats a table showed (as NaN, inf, -inf).
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _html_columns(shown_html: str) -> list[str]:
    """The header cells of a table's HTML rendering, unescaped (for tables glued before ``columns`` was recorded)."""
    from html.parser import HTMLParser

    class Header(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.cells: list[str] = []
            self.inside = False

        def handle_starttag(self, tag, attrs):
            if tag == "th":
                self.inside = True
                self.cells.append("")

        def handle_endtag(self, tag):
            self.inside = self.inside and tag != "th"

        def handle_data(self, data):
            if self.inside:
                self.cells[-1] += data

    parser = Header()
    parser.feed(shown_html.split("</thead>", 1)[0])
    return [c.strip() for c in parser.cells]


def rendering_problem(bundle: dict, metadata: dict | None = None) -> str | None:
    """Why a glued output's visible text does not render its scrap data (None when it does, or for a paired
    comparison, whose one-line summary is made by ``agentpost.stats`` from more than the data shows).

    ``metadata`` is the output's metadata: a table's column order is the ``columns`` list :func:`glue_table`
    recorded there (the notebook's JSON stores each row's keys sorted, so the data alone has lost it); a table
    glued before that list existed takes the order of its HTML rendering's header cells.
    """
    scrap = bundle[SCRAP_MIME]
    scrap = json.loads(scrap) if isinstance(scrap, str) else scrap
    name, data = scrap["name"], scrap["data"]
    text = "".join(bundle.get("text/plain", ""))
    shown_html = "".join(bundle.get("text/html", ""))
    if shown_html.startswith(f'<code class="agentpost-glue">{html.escape(name)}</code>: '):
        return None  # glue_paired
    if shown_html.startswith('<pre class="agentpost-outcomes">'):
        from agentpost.record.outcomes import outcomes_html, outcomes_text

        if text != outcomes_text(data) or shown_html != outcomes_html(data):
            return "its per-arm summary differs from its recorded outcomes"
        return None
    if shown_html.startswith('<code class="agentpost-glue">'):
        expected = format_value(_order_like(data, text))
        if text != expected:
            return f"shows {text[:60]!r} but its data renders as {expected[:60]!r}"
        if shown_html != value_html(name, expected):
            return "its HTML rendering differs from its data"
        return None
    import pandas as pd

    keys = sorted({str(k) for row in data or [] for k in row})
    columns = list(
        (metadata or {}).get("agentpost", {}).get("columns") or [c for c in _html_columns(shown_html) if c in keys]
    )  # (a columns' name is a header cell too)
    if data and sorted(columns) != keys:
        return f"its recorded columns {columns[:8]} are not its data's {keys[:8]}"
    rows = [{k: _NON_FINITE.get(v, v) if isinstance(v, str) else v for k, v in row.items()} for row in data or []]
    frame = pd.DataFrame.from_records(rows, columns=columns) if rows else pd.DataFrame(columns=columns)
    if table_text(frame) != text:
        return "the table shown differs from its data"
    return None


def _check_kind(function: str, kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"{function}: kind must be one of {', '.join(KINDS)}, got {kind!r}")


def _display(bundle: dict, name: str, *, data: bool, **recorded: Any) -> None:
    from IPython.display import display

    metadata = {"scrapbook": {"name": name, "data": data, "display": True, "mime_prefix": ""}}
    if recorded:
        metadata["agentpost"] = recorded
    display(bundle, raw=True, metadata=metadata)


def glue(name: str, value: Any, kind: str = "result") -> None:
    """Record ``value`` under ``name`` and show it; ``kind`` says what it is (one of :data:`KINDS`).

    ``scrapbook.read_notebook(nb).scraps[name].data`` returns it, the runner copies it into the receipt,
    and a book page can cite it with the ``glue:text`` role.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"glue: metric name must be a snake_case identifier, got {name!r}")
    _check_kind("glue", kind)
    payload = _jsonable(value)
    scrap = {"name": name, "data": payload, "encoder": "json", "version": 1}
    text = format_value(payload)
    # The cell shows "name = value"; {glue:text} in prose uses the bare text/plain value.
    _display({SCRAP_MIME: scrap, "text/plain": text, "text/html": value_html(name, text)}, name, data=True, kind=kind)


def glue_table(name: str, frame: Any, kind: str = "result") -> None:
    """Record a pandas DataFrame as a list of row dicts and show it as an HTML table; ``kind`` as in :func:`glue`.

    The column order is recorded beside the data (``metadata.agentpost.columns``): the notebook's JSON sorts
    each row's keys, and the rendering check must not recover the order from the text it checks.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"glue_table: table name must be a snake_case identifier, got {name!r}")
    _check_kind("glue_table", kind)
    records = _jsonable(frame.reset_index(drop=True).to_dict(orient="records"))
    scrap = {"name": name, "data": records, "encoder": "json", "version": 1}
    html = frame.to_html(index=False, float_format=lambda x: f"{x:.{TEXT_DIGITS}g}", border=0)
    plain = table_text(frame)
    _display(
        {SCRAP_MIME: scrap, "text/html": html, "text/plain": plain},
        name,
        data=True,
        kind=kind,
        columns=[str(c) for c in frame.columns],
    )


def glue_figure(name: str, figure: Any) -> None:
    """Show a matplotlib figure as PNG under ``name`` so a book page can place it with ``{glue:figure}``."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    png = base64.b64encode(buffer.getvalue()).decode("ascii")
    _display({"image/png": png, "text/plain": f"<figure {name}>"}, name, data=False)


def read_scraps(notebook: dict) -> dict[str, Any]:
    """All data scraps of an executed notebook (as nbformat JSON), by name, in output order."""
    scraps: dict[str, Any] = {}
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []) or []:
            bundle = output.get("data") or {}
            if SCRAP_MIME in bundle:
                scrap = bundle[SCRAP_MIME]
                if isinstance(scrap, str):
                    scrap = json.loads(scrap)
                scraps[scrap["name"]] = scrap["data"]
    return scraps


def glue_paired(name: str, result: Any) -> None:
    """Record one paired comparison (a :class:`agentpost.stats.paired.PairedResult`) under ``name``.

    The one way a chapter records a comparison: the scrap holds ``result.as_dict()`` (estimate, CI, MDE, smallest
    effect of interest, verdict, variance components, seeds and items), which the evidence pages and the ledger
    render in one table form; the cell shows the result's one-line summary.
    """
    if not hasattr(result, "as_dict") or not hasattr(result, "summary"):
        raise TypeError(
            f"glue_paired: {name!r} needs a PairedResult from agentpost.stats.paired.compare, "
            f"got {type(result).__name__}"
        )
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"glue_paired: comparison name must be a snake_case identifier, got {name!r}")
    scrap = {"name": name, "data": _jsonable(result.as_dict()), "encoder": "json", "version": 1}
    text = result.summary()
    labelled = f'<code class="agentpost-glue">{html.escape(name)}</code>: {html.escape(text)}'
    _display({SCRAP_MIME: scrap, "text/plain": text, "text/html": labelled}, name, data=True, kind="result")
