"""The REST API at /api/v1/: django-ninja over the apps' services and selectors.

Every operation authenticates with a bearer token or the browser session (see auth.py) and
applies the UI's role checks; errors have one shape (errors.py). Documented in docs/api.md.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, URLResolver
from ninja import NinjaAPI

from specdash.api import errors
from specdash.api.auth import api_auth
from specdash.api.docs import LocalSwagger, docs_guard

API_PREFIX = "/api/v1"


def build_api() -> NinjaAPI:
    from specdash.api import (
        audit,
        breakeven,
        experiments,
        hosts,
        instances,
        jobs,
        sweeps,
        traces,
        tuning,
    )

    api = NinjaAPI(
        title="specdash API",
        version="1",
        description="Start and stop inference servers, run concurrency sweeps and A/B "
        "experiments. Authenticate with `Authorization: Bearer <token>` (create one under "
        'Account → API tokens). Errors: `{"error": {"code", "message", "fields"}}`.',
        urls_namespace="api-v1",
        auth=api_auth(),
        docs=LocalSwagger(),
        docs_decorator=docs_guard,
    )
    errors.install(api)
    # tuning before experiments: POST /experiments/matrix is not /experiments/{id}.
    for module in (hosts, instances, sweeps, traces, tuning, breakeven, experiments, jobs, audit):
        api.add_router("", module.router)
    return api


api = build_api()


def api_patterns() -> tuple[list[URLPattern | URLResolver], str, str]:
    """The API's URL patterns, exempt from LoginRequiredMiddleware's redirect: API clients
    get 401 JSON from the API's own authentication instead."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            login_not_required(pattern.callback)
    return patterns, app_name, namespace
