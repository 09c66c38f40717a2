"""Roles as Django groups: viewers read everything, operators also act.

Staff (``is_staff``) manage the registry in the admin; that is Django's own flag.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.models import Group, Permission
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

VIEWERS = "viewers"
OPERATORS = "operators"

VIEW_PERMISSION = "hosts.view_serverinstance"
OPERATE_PERMISSION = "hosts.operate_serverinstance"
RUN_SWEEPS_PERMISSION = "benchmarks.run_sweep"

# (app_label, codename) pairs; view_* of every model so viewers "read everything".
_VIEW_MODELS = {
    "hosts": ["host", "container", "serverprofile", "serverinstance", "instanceevent"],
    "core": ["job"],
    "benchmarks": ["sweep", "sweeplevel", "experiment"],
}
_OPERATOR_EXTRA = [("hosts", "operate_serverinstance"), ("benchmarks", "run_sweep")]


def _permissions(pairs: list[tuple[str, str]]) -> list[Permission]:
    found = []
    for app_label, codename in pairs:
        perm = Permission.objects.filter(
            content_type__app_label=app_label, codename=codename
        ).first()
        if perm is not None:
            found.append(perm)
    return found


def ensure_roles(**_: Any) -> None:
    """Create or update the two groups (idempotent; runs after every migrate)."""
    view_pairs = [
        (app, f"view_{model}") for app, models in _VIEW_MODELS.items() for model in models
    ]
    viewers, _created = Group.objects.get_or_create(name=VIEWERS)
    viewers.permissions.set(_permissions(view_pairs))
    operators, _created = Group.objects.get_or_create(name=OPERATORS)
    operators.permissions.set(_permissions(view_pairs + _OPERATOR_EXTRA))


def can_view(user: Any) -> bool:
    return bool(user.is_authenticated and user.has_perm(VIEW_PERMISSION))


def can_operate(user: Any) -> bool:
    return bool(user.is_authenticated and user.has_perm(OPERATE_PERMISSION))


def can_run_sweeps(user: Any) -> bool:
    return bool(user.is_authenticated and user.has_perm(RUN_SWEEPS_PERMISSION))


def can_manage_registry(user: Any) -> bool:
    """Staff allowed to edit server profiles: they may set any launch flag."""
    return bool(
        user is not None
        and user.is_authenticated
        and user.is_staff
        and user.has_perm("hosts.change_serverprofile")
    )


F = TypeVar("F", bound=Callable[..., Any])


def require(check: Callable[[Any], bool]) -> Callable[[F], F]:
    """View decorator: 403 unless ``check(request.user)``. Login itself is enforced globally
    by LoginRequiredMiddleware, so anonymous users never get this far."""

    def decorator(view: F) -> F:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            if not check(request.user):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


viewer_required = require(can_view)
operator_required = require(can_operate)
sweep_operator_required = require(can_run_sweeps)
