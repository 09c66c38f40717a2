"""The page of a form whose valid submission calls one service (a new sweep, a new experiment):
the service's ``ValidationError`` is shown on the form, next to the fields it names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

Created = TypeVar("Created")


class ServiceForm(Protocol):
    @property
    def is_bound(self) -> bool: ...

    def is_valid(self) -> bool: ...

    def add_service_error(self, error: ValidationError) -> None: ...


def service_form_page(
    request: HttpRequest,
    form: ServiceForm,
    *,
    create: Callable[[], Created],
    created: Callable[[Created], HttpResponse],
    template: str,
    context: Mapping[str, object],
) -> HttpResponse:
    """``create()`` once the posted form is valid, then ``created(result)`` (a redirect to what
    it made); otherwise the page again, with the form's or the service's errors (400)."""
    if request.method == "POST" and form.is_valid():
        try:
            result = create()
        except ValidationError as exc:
            form.add_service_error(exc)
        else:
            return created(result)
    status = 400 if form.is_bound else 200
    return render(request, template, {"form": form, **context}, status=status)
