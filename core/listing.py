"""Query filters the apps' list selectors share: a tag in a JSON list, and the state and
creation-time window of run-like rows (instances, sweeps, experiments)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TypeVar

from django.db import connection
from django.db.models import Model, Q, QuerySet

M = TypeVar("M", bound=Model)


def tag_q(field: str, tag: str) -> Q:
    """Rows whose JSON list ``field`` holds ``tag``."""
    if connection.vendor == "postgresql":
        return Q(**{f"{field}__contains": [tag]})
    # SQLite has no JSON containment lookup: match the element's JSON text, quotes included,
    # so "base" does not match "baseline". Tags are short lists, so this stays cheap.
    return Q(**{f"{field}__icontains": json.dumps(tag)})


def run_filters(
    qs: QuerySet[M],
    *,
    state: str | None,
    tag_field: str,
    tag: str | None,
    created_after: datetime | None,
    created_before: datetime | None,
) -> QuerySet[M]:
    """The filters every run-like list shares: state, a tag, and a creation-time window."""
    if state:
        qs = qs.filter(state=state)
    if tag:
        qs = qs.filter(tag_q(tag_field, tag))
    if created_after is not None:
        qs = qs.filter(created_at__gte=created_after)
    if created_before is not None:
        qs = qs.filter(created_at__lt=created_before)
    return qs
