""" "Turn it by hand": a mechanism a reader moves with ipywidgets controls, one home for every chapter.

A chapter supplies a ``render(**values)`` callback (pure: the control values in, a matplotlib figure, a pandas
DataFrame, a string, or a list of them out) and named controls; :func:`turn_by_hand` wires them together:

* with a live kernel (JupyterLab, ``make lab``) the controls and an HTML view render as widgets, and every change
  of a control calls ``render`` again and replaces the view's HTML (an ``HTML`` widget, not an ``Output`` one: no
  display routing, and nbclient's ``Output`` handling fails when the widget state is not stored);
* in the built book, where no kernel runs, the same display carries a static ``text/html`` view: ``render`` at the
  controls' current (default) values, with the values named. The book drops the widget view
  (``nb_mime_priority_overrides`` in ``_config.yml``), so a page shows the static view and needs no widget
  JavaScript from a CDN.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from typing import Any

import pandas as pd

#: Text under the static view: how to get the live controls.
LIVE_HINT = "Static view at the values above; open this notebook in JupyterLab (`make lab`) to move the controls."


def _html(item: Any) -> str:
    """One rendered item as HTML: a figure as an inline PNG, a DataFrame as its table (no index column), anything
    else as escaped text."""
    from matplotlib.figure import Figure

    if isinstance(item, Figure):
        buf = io.BytesIO()
        item.savefig(buf, format="png", dpi=100)
        data = base64.b64encode(buf.getvalue()).decode("ascii")
        return f'<img alt="{html.escape(item.get_label() or "figure")}" src="data:image/png;base64,{data}"/>'
    if isinstance(item, pd.DataFrame):
        return item.to_html(index=False)
    return f"<pre>{html.escape(str(item))}</pre>"


def _items(rendered: Any) -> list:
    return list(rendered) if isinstance(rendered, (list, tuple)) else [rendered]


class Walkthrough:
    """Named controls, a render callback and its output; ``values()`` reads the controls, ``update()`` re-renders.

    Displayed, it is the widget box (controls above the view) plus the static HTML of the current rendering."""

    def __init__(self, render: Callable[..., Any], controls: dict):
        import ipywidgets as widgets

        if not controls:
            raise ValueError("turn_by_hand needs at least one control")
        bad = [name for name, c in controls.items() if not hasattr(c, "observe") or not hasattr(c, "value")]
        if bad:
            raise TypeError(f"controls {bad} are not ipywidgets value widgets")
        self.render, self.controls = render, dict(controls)
        self.view = widgets.HTML()
        self.box = widgets.VBox(
            [widgets.HBox(list(self.controls.values()), layout={"flex_flow": "row wrap"}), self.view]
        )
        for control in self.controls.values():
            control.observe(self.update, names="value")
        self.rendered: list = []
        self.body = ""
        self.update()

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def update(self, change=None) -> list:
        """Render at the controls' current values into the view; returns the rendered items."""
        self.rendered = _items(self.render(**self.values()))
        self.body = "\n".join(_html(item) for item in self.rendered)
        self.view.value = self.body
        return self.rendered

    def static_html(self) -> str:
        """The current rendering as one HTML fragment, headed by the control values (what the book shows)."""
        setting = ", ".join(
            f"<code>{html.escape(name)}</code> = {html.escape(repr(value))}" for name, value in self.values().items()
        )
        hint = html.escape(LIVE_HINT).replace("`make lab`", "<code>make lab</code>")
        return f'<div class="agentpost-walkthrough"><p>{setting}</p>\n{self.body}\n<p><em>{hint}</em></p></div>'

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.box._repr_mimebundle_(include=include, exclude=exclude) or {}
        return {"text/html": self.static_html(), **bundle}


def fixed_figure(width: float, height: float, **margins: float):
    """A matplotlib figure of ``width`` x ``height`` inches with fixed margins (``subplots_adjust`` keywords): a
    layout engine would double the drawing time of every moved control."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(**margins)
    return fig


def turn_by_hand(render: Callable[..., Any], **controls) -> Walkthrough:
    """A :class:`Walkthrough` of ``render`` over the named ipywidgets ``controls`` (keyword = ``render``'s argument)."""
    return Walkthrough(render, controls)
