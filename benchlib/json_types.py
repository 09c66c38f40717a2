"""Names for JSON whose shape nobody here declares.

A record with known keys gets its own ``TypedDict`` in the module that owns it; these aliases
are for what stays free-form: an engine's raw answer, a user's extra request body, a JSON
field's contents of unknown shape. Values are ``object`` rather than ``Any`` so that mypy makes
every use narrow them (``isinstance``) before relying on a type.
"""

from __future__ import annotations

from typing import Any, TypedDict

# A JSON object as parsed (``json.loads``) or about to be dumped, keys not declared anywhere.
JsonObject = dict[str, object]


class PlotlyFigure(TypedDict):
    """A figure as Plotly takes it (built as a dict, dumped for ``Plotly.newPlot`` or
    ``plotly.io.to_html``): its traces and its layout. Their contents follow Plotly's own
    schema (plotly.js's plot-schema.json), which is not restated here."""

    data: list[dict[str, Any]]
    layout: dict[str, Any]
