from __future__ import annotations

# The load settings on a command line: the load generator's flags (and manage.py specdash's),
# declared from the model in benchlib/loadgen/settings.py and read back into it.
import argparse
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from benchlib.json_types import JsonObject
from benchlib.loadgen.goodput import SLO_FIGURES
from benchlib.loadgen.settings import (
    LoadSettings,
    LoadSettingsError,
    flat_fields,
    validation_messages,
)
from benchlib.loadgen.settings_fields import UNSET, nested_model, number_kind, option


def rate_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected req/s like 2 or 1,2,4: {text!r}") from exc
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise argparse.ArgumentTypeError("request rates must be positive numbers")
    return values


def _cli_help(field: FieldInfo, default: Any) -> str:
    text = field.description or ""
    return f"{text} (default {default})" if default not in (None, "", False) else text


def add_load_arguments(
    parser: argparse.ArgumentParser,
    model: type[LoadSettings] = LoadSettings,
    *,
    defaults: bool = True,
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Declare every setting's flag on ``parser`` (the load generator's command line).

    ``defaults=False``: every flag defaults to None and the amount (requests or duration) is
    optional, for a caller that sends only what was given (``manage.py specdash``, whose
    server fills in the rest); ``aliases``: more flags for a setting, by name."""
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    slo_group = parser.add_argument_group("SLO (goodput in each level summary)")
    for name, field in flat_fields(model):
        opt = option(field)
        target: Any = parser
        if name.startswith("slo_"):
            target = slo_group
        if opt.one_of:
            if opt.one_of not in groups:
                groups[opt.one_of] = parser.add_mutually_exclusive_group(required=defaults)
            target = groups[opt.one_of]
        default = field.get_default() if opt.cli_default is UNSET else opt.cli_default
        if not defaults:
            default = None
        kw: dict[str, object] = {"dest": name, "default": default}  # add_argument's keywords
        flags = [opt.flag, *(aliases or {}).get(name, ())]
        if field.annotation is bool:
            target.add_argument(*flags, action="store_true", help=field.description, **kw)
            continue
        if name == "request_rate":
            kw["type"] = rate_list
        elif opt.choices:
            kw["choices"] = [v for v, _ in opt.choices]
        elif number_kind(field) is not None:
            kw["type"] = int if number_kind(field) == "int" else float
        target.add_argument(*flags, help=_cli_help(field, default), **kw)


def given_settings(
    args: argparse.Namespace, model: type[LoadSettings] = LoadSettings
) -> JsonObject:
    """The settings given on a command line declared with ``defaults=False``, as a request
    body's ``load`` (the nested SLO as an object)."""
    raw: JsonObject = {}
    for name, field in model.model_fields.items():
        nested = nested_model(field)
        if nested is None:
            if getattr(args, name) is not None:
                raw[name] = getattr(args, name)
            continue
        sub = {s: getattr(args, f"{name}_{s}") for s in nested.model_fields}
        sub = {k: v for k, v in sub.items() if v is not None}
        if sub:
            raw[name] = sub
    return raw


def settings_from_args(
    args: argparse.Namespace, model: type[LoadSettings] = LoadSettings
) -> LoadSettings:
    """The settings an argparse namespace holds (built by ``add_load_arguments``). Raises
    LoadSettingsError."""
    raw: JsonObject = {}
    for name, field in model.model_fields.items():
        nested = nested_model(field)
        if nested is None:
            value = getattr(args, name)
            if value is not None:
                raw[name] = value
            continue
        sub = {s: getattr(args, f"{name}_{s}") for s in nested.model_fields}
        if any(sub.get(k) is not None for k in SLO_FIGURES):
            raw[name] = sub
    try:
        return model.model_validate(raw, context={"bounds": False})
    except ValidationError as exc:
        raise LoadSettingsError(validation_messages(exc, raw)) from None
