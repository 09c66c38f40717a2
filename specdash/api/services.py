"""Registry writes from the API: the model's own validation (``full_clean``) decides, as in
the admin, so the API accepts exactly what the admin accepts."""

from __future__ import annotations

from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import models, transaction

from hosts.masking import MASK, unmask_argv, unmask_env

M = TypeVar("M", bound=models.Model)


def _check_references(model: type[models.Model], data: dict[str, Any]) -> None:
    # A missing host or container is a field error, not a crash inside the model's clean().
    errors: dict[str, str] = {}
    for field in model._meta.concrete_fields:
        if isinstance(field, models.ForeignKey) and data.get(field.attname) is not None:
            related = field.related_model
            assert isinstance(related, type)
            if not related._default_manager.filter(pk=data[field.attname]).exists():
                errors[field.attname] = f"No {related._meta.verbose_name} #{data[field.attname]}."
    if errors:
        raise ValidationError(errors)


def _refuse_nulls(model: type[models.Model], data: dict[str, Any]) -> None:
    # full_clean() skips blank-able fields whose value is empty, None included, so an explicit
    # null would reach the NOT NULL column and fail there: it is a field error here instead.
    errors = {
        field.attname: "This field cannot be null"
        + ('; send "" to clear it.' if isinstance(field, models.CharField) and field.blank else ".")
        for field in model._meta.concrete_fields
        if not field.null and field.attname in data and data[field.attname] is None
    }
    if errors:
        raise ValidationError(errors)


def registry_create(*, model: type[M], data: dict[str, Any]) -> M:
    """Create a Host, Container or ServerProfile; raises ValidationError keyed by field."""
    _refuse_nulls(model, data)
    _check_references(model, data)
    obj = model(**data)
    obj.full_clean()
    with transaction.atomic():
        obj.save()
    return obj


def _keep_masked_secrets(obj: models.Model, data: dict[str, Any]) -> None:
    # The API shows secrets as "***" (hosts.masking): a body read and sent back carries the
    # mask, which must leave the stored secret as it is, never replace it.
    errors: dict[str, str] = {}
    for name in ("env", "command_env"):
        if isinstance(data.get(name), dict):
            data[name], unknown = unmask_env(data[name], getattr(obj, name))
            if unknown:
                errors[name] = (
                    f"{', '.join(unknown)}: {MASK} stands for a stored secret that is not "
                    "there; send the value itself"
                )
    if isinstance(data.get("launch_argv"), list):
        data["launch_argv"], positions = unmask_argv(data["launch_argv"], obj.launch_argv)  # type: ignore[attr-defined]
        if positions:
            errors["launch_argv"] = (
                f"item {', '.join(str(i) for i in positions)}: {MASK} stands for a stored "
                "secret that is not there; send the value itself"
            )
    if errors:
        raise ValidationError(errors)


def registry_update(*, obj: M, data: dict[str, Any]) -> M:
    """Apply the given fields, validate the whole object, save. A secret sent back as its
    mask (``***``) keeps its stored value."""
    _refuse_nulls(type(obj), data)
    _check_references(type(obj), data)
    _keep_masked_secrets(obj, data)
    for name, value in data.items():
        setattr(obj, name, value)
    obj.full_clean()
    with transaction.atomic():
        obj.save()
    return obj
