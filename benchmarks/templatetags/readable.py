"""How a server's configuration reads on the comparison page and in its HTML report: the
launch command one flag per line, the environment and what the engine reported as name/value
rows (never a Python dict's repr). Values arrive masked (selectors mask the snapshots)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from django import template

register = template.Library()

# A value longer than this is cut in the table (the full snapshot is in the sweep's export).
MAX_VALUE_CHARS = 160


@register.filter
def argv_lines(argv: Iterable[str] | None) -> list[str]:
    """The program (``python3 -m sglang.launch_server``) on one line, then each ``--flag``
    with its value, or alone, on its own."""
    items = [str(a) for a in argv or []]
    first_flag = next((i for i, a in enumerate(items) if a.startswith("--")), len(items))
    lines = [" ".join(items[:first_flag])] if first_flag else []
    for item in items[first_flag:]:
        if item.startswith("--") or " " in lines[-1] or not lines[-1].startswith("--"):
            lines.append(item)
        else:  # the value of the flag before it
            lines[-1] = f"{lines[-1]} {item}"
    return lines


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


@register.filter
def name_value_rows(mapping: Mapping[str, Any] | None, prefix: str = "") -> list[tuple[str, str]]:
    """A mapping as sorted (name, value) rows; nested mappings become dotted names."""
    rows: list[tuple[str, str]] = []
    for name, value in sorted((mapping or {}).items()):
        key = f"{prefix}{name}"
        if isinstance(value, Mapping) and value:
            rows.extend(name_value_rows(value, prefix=f"{key}."))
        else:
            rows.append((key, _text(value)))
    return rows
