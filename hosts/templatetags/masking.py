"""Template filters hiding secrets where a page shows an argv, a message or a stored snapshot
(hosts.masking)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import template

from hosts import masking

register = template.Library()


@register.filter
def masked_argv(argv: Sequence[str] | None) -> list[str]:
    return masking.masked_argv(list(argv or []))


@register.filter
def masked_text(text: str | None) -> str:
    return masking.masked_text(text or "")


@register.filter
def masked_tree(tree: Any) -> Any:
    return masking.masked_tree(tree)
