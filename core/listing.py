"""A tag in a JSON list as a query filter, on SQLite and PostgreSQL alike (the API's list
filters use it)."""

from __future__ import annotations

import json

from django.db import connection
from django.db.models import Q


def tag_q(field: str, tag: str) -> Q:
    """Rows whose JSON list ``field`` holds ``tag``."""
    if connection.vendor == "postgresql":
        return Q(**{f"{field}__contains": [tag]})
    # SQLite has no JSON containment lookup: match the element's JSON text, quotes included,
    # so "base" does not match "baseline". Tags are short lists, so this stays cheap.
    return Q(**{f"{field}__icontains": json.dumps(tag)})
