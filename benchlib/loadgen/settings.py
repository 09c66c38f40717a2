"""The load settings of a run, checked and converted: ``LoadSettings`` validates each field
(messages for people, per field), gives the stored form (a sweep's ``load``), the workload in
words and the load generator's argv; the rest of the module reads the declaration for the
edges (the API's request schema, the form's flat names, the errors per field).

The fields themselves, with each one's name, type, bounds, help and flag, are declared once in
``settings_fields`` (docs/architecture.md, "Load settings: one model"). Plain pydantic, no
Django: the load generator runs as its own process and as a library.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from benchlib.loadgen.datasets import PROMPT_SETS
from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.ramp import RAMPS
from benchlib.loadgen.settings_fields import (
    APIS,
    MAX_RATE,
    MIN_RATE,
    LoadFields,
    SloSettings,
    bounds,
    nested_model,
    number_kind,
    option,
)
from benchlib.loadgen.traces import TRACE_FORMATS

TRACE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")


class LoadSettings(LoadFields):
    """What a run sends, and how much: everything but the levels (concurrencies) themselves.
    The fields are declared in ``settings_fields.LoadFields``; this class checks them and
    converts them for each edge."""

    ONE_OF_MESSAGE: ClassVar[str] = (
        "Give either requests per level or a duration per level (one of the two)."
    )
    SESSIONS_MESSAGE: ClassVar[str] = (
        "Sessions carry their history as chat messages in a closed loop: use the chat API, and "
        "no request rate or trace."
    )
    RAMP_MESSAGE: ClassVar[str] = "A ramp rises from its start rate to the request rate: give both."
    TRACE_RATE_MESSAGE: ClassVar[str] = (
        "A trace gives the arrival times: leave the request rate empty when replaying one."
    )

    @field_validator("*", mode="before")
    @classmethod
    def _checked(cls, value: Any, info: ValidationInfo) -> Any:
        """Blank is the default; numbers are checked here with messages for people."""
        name = info.field_name
        assert name is not None
        field = cls.model_fields[name]
        if value is None or value == "":
            return field.get_default()
        kind = number_kind(field)
        if kind is not None:
            low, high = bounds(field) if (info.context or {}).get("bounds", True) else (None, None)
            return _number(value, kind, low, high)
        return value

    # The text settings with a fixed set of values (the empty ramp: a steady rate).
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "api": APIS,
        "prompt_set": PROMPT_SETS,
        "ramp": RAMPS,
        "trace_format": TRACE_FORMATS,
    }

    @field_validator(*CHOICES)
    @classmethod
    def _choice(cls, value: str, info: ValidationInfo) -> str:
        assert info.field_name is not None
        choices = cls.CHOICES[info.field_name]
        if info.field_name == "ramp":
            if value and value not in choices:
                raise ValueError(f"Choose one of {', '.join(choices)}, or none.")
        elif value not in choices:
            raise ValueError(f"Choose one of {', '.join(choices)}.")
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        return _argv_text(value, "A model name", 200)

    @field_validator("trace")
    @classmethod
    def _trace(cls, value: str, info: ValidationInfo) -> str:
        _argv_text(value, "A file path", 500)
        # A sweep names a file in the dashboard's trace folder, nothing else on its disk.
        if (
            value
            and (info.context or {}).get("bounds", True)
            and not TRACE_NAME_RE.fullmatch(value)
        ):
            raise ValueError("A file name in the trace folder (letters, digits, . _ -).")
        return value

    @field_validator("request_rate", mode="before")
    @classmethod
    def _rates(cls, value: Any) -> float | list[float] | None:
        return clean_request_rate(value)

    @field_validator("slo", mode="before")
    @classmethod
    def _slo(cls, value: Any) -> Any:
        if isinstance(value, SloSettings):
            value = value.model_dump()
        if value is not None and not isinstance(value, Mapping):
            raise ValueError("SLO must be an object of limits in milliseconds")
        unknown = sorted(set(value or {}) - set(SloSettings.model_fields))
        if unknown:
            raise ValueError(f"Unknown SLO setting(s): {', '.join(unknown)}")
        slo = Slo.from_dict(value)
        return slo.to_dict() if slo is not None else None

    @model_validator(mode="after")
    def _one_amount(self) -> LoadSettings:
        if (self.requests_per_level is None) == (self.duration is None):
            raise ValueError(self.ONE_OF_MESSAGE)
        if self.trace and self.request_rate is not None:
            raise ValueError(self.TRACE_RATE_MESSAGE)
        if self.ramp and (self.request_rate is None or self.ramp_start_rate is None):
            raise ValueError(self.RAMP_MESSAGE)
        open_loop = self.request_rate is not None or bool(self.trace)
        if self.session_turns > 1 and (self.api != "chat" or open_loop):
            raise ValueError(self.SESSIONS_MESSAGE)
        return self

    # -- the stored form (a sweep's ``load``) ---------------------------------------------

    @classmethod
    def clean(cls, raw: Mapping[str, Any]) -> LoadSettings:
        """Settings that people typed, or an API client sent: unknown keys refused, blanks the
        defaults. Raises LoadSettingsError with the messages per field."""
        unknown = sorted(set(raw) - set(cls.model_fields))
        if unknown:
            raise LoadSettingsError({}, f"Unknown load setting(s): {', '.join(unknown)}.")
        try:
            return cls.model_validate(dict(raw))
        except ValidationError as exc:
            raise LoadSettingsError(validation_messages(exc, raw)) from None

    @classmethod
    def from_stored(cls, load: Mapping[str, Any]) -> LoadSettings:
        """A stored ``load`` (keys it does not know, such as ``extra_body``, are not settings);
        only the keys it has count as set (``to_argv`` writes those)."""
        return cls.model_validate({k: v for k, v in load.items() if k in cls.model_fields})

    def to_stored(self) -> dict[str, Any]:
        """The JSON a sweep stores as its ``load``: every setting, the SLO in Slo's form."""
        out = self.model_dump()
        slo = self.slo.slo() if self.slo is not None else None
        out["slo"] = slo.to_dict() if slo is not None else None
        return out

    def rates(self) -> list[float] | None:
        """The request rate(s) as the load generator's list (None: closed loop)."""
        rate = self.request_rate
        if rate is None:
            return None
        return [float(r) for r in rate] if isinstance(rate, list) else [float(rate)]

    def slo_target(self) -> Slo | None:
        return self.slo.slo() if self.slo is not None else None

    def workload(self) -> str:
        """The workload in words, for the pages that put runs side by side: the prompts, the
        arrivals (steady, ramped or a trace's) and the shared prefixes, with their parameters."""
        parts = []
        if self.trace:
            window = f", from {self.trace_start:g} s"
            if self.trace_duration is not None:
                window += f" for {self.trace_duration:g} s"
            parts.append(
                f"trace {self.trace} ({self.trace_format}) at {self.trace_speed:g}x{window}"
            )
        else:
            parts.append(f"{self.prompt_set} prompts")
            rates = self.rates()
            if rates and self.ramp and self.ramp_start_rate is not None:
                ends = ", ".join(f"{r:g}" for r in rates)
                parts.append(
                    f"{self.ramp} ramp from {self.ramp_start_rate:g} to {ends} req/s "
                    f"({self.ramp_slices} slices)"
                )
            elif rates:
                parts.append(f"{', '.join(f'{r:g}' for r in rates)} req/s")
            else:
                parts.append("closed loop")
        if self.session_turns > 1:
            parts.append(
                f"sessions of {self.session_turns} turns ({self.turn_tokens}-token follow-ups, "
                f"{self.think_time:g} s think time)"
            )
        if self.prefix_count:
            parts.append(
                f"{self.prefix_count} shared prefix{'es' if self.prefix_count > 1 else ''} of "
                f"{self.prefix_tokens} tokens on {self.prefix_share:.0%} of requests"
            )
        return " · ".join(parts)

    # -- the command line -------------------------------------------------------------------

    def to_argv(self) -> list[str]:
        """The load generator's flags for the settings that were given (a stored ``load``
        lacking a key leaves that flag to the load generator's default)."""
        argv: list[str] = []
        given = self.model_fields_set
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if name not in given or value is None:
                continue
            if name.startswith("trace_") and not self.trace:
                continue  # a trace's options mean nothing without one
            if name in ("ramp_start_rate", "ramp_slices") and not self.ramp:
                continue  # a steady rate: the ramp's options mean nothing
            if name.startswith(("session_", "turn_", "think_")) and self.session_turns < 2:
                continue  # single requests: a session's options mean nothing
            if name.startswith("prefix_") and not self.prefix_count:
                continue  # no shared prefixes: their length and share mean nothing
            if name == "slo":
                argv += _slo_argv(value)
                continue
            if name == "request_rate":
                argv += [option(field).flag, ",".join(repr(r) for r in self.rates() or ())]
                continue
            argv += _flag_argv(option(field).flag, value, field)
        return argv


def stored_workload(load: Mapping[str, Any] | None) -> str:
    """A stored ``load``'s workload in words (``LoadSettings.workload``); "" for one the model
    no longer reads (written by an older release)."""
    try:
        return LoadSettings.from_stored(load or {}).workload()
    except ValidationError:
        return ""


class LoadSettingsError(ValueError):
    """Settings refused: ``errors`` per field name, or one ``message`` for the whole."""

    def __init__(self, errors: dict[str, list[str]], message: str = "") -> None:
        super().__init__(message or "; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors
        self.message = message


# -- the fields, read from the model ----------------------------------------------------------


def flat_fields(model: type[BaseModel] = LoadSettings) -> Iterator[tuple[str, FieldInfo]]:
    """Every setting as the flat edges name it (the form, the CLI): nested settings (the
    SLO) as ``slo_<name>``."""
    for name, field in model.model_fields.items():
        nested = nested_model(field)
        if nested is None:
            yield name, field
        else:
            for sub, sub_field in nested.model_fields.items():
                yield f"{name}_{sub}", sub_field


def _number(value: Any, kind: str, low: float | None, high: float | None) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("Enter a number.")
    if kind == "int" and not float(value).is_integer():
        raise ValueError("Enter a whole number.")
    if not math.isfinite(value):
        raise ValueError("Enter a finite number.")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"Must be between {low:g} and {high:g}.")
    return int(value) if kind == "int" else float(value)


def clean_request_rate(value: Any) -> float | list[float] | None:
    """None (closed loop), one rate, or several rates (a rate sweep), each a finite number of
    requests per second; a one-element list is one rate. Raises ValueError."""
    if value is None or value == "":
        return None
    values = value if isinstance(value, list | tuple) else [value]
    if not values:
        raise ValueError("Give at least one request rate, or none for a closed loop.")
    rates: list[float] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"{v!r} is not a number of requests per second.")
        if not MIN_RATE <= v <= MAX_RATE:
            raise ValueError(
                f"Request rate {v:g} is outside {MIN_RATE:g} to {MAX_RATE:g} req/s "
                "(it must be above 0)."
            )
        rates.append(float(v))
    return rates[0] if len(rates) == 1 else rates


def validation_messages(exc: ValidationError, raw: Mapping[str, Any]) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for item in exc.errors():
        loc = item.get("loc") or ()
        ctx = item.get("ctx") or {}
        message = str(ctx.get("error", item.get("msg", "invalid")))
        # The model's own rules: the one-of-two amount, a rate beside a trace, a ramp's rates.
        whole = "requests_per_level"
        if message == LoadSettings.TRACE_RATE_MESSAGE:
            whole = "request_rate"
        elif message == LoadSettings.RAMP_MESSAGE:
            whole = "ramp_start_rate"
        elif message == LoadSettings.SESSIONS_MESSAGE:
            whole = "session_turns"
        name = str(loc[0]) if loc else whole
        errors.setdefault(name, []).append(message)
    # The amount rule runs only on valid fields: say it beside the other errors as well.
    amount = ("requests_per_level", "duration")
    if not set(amount) & set(errors):
        given = [raw.get(n) not in (None, "") for n in amount]
        if given[0] == given[1]:
            errors.setdefault("requests_per_level", []).append(LoadSettings.ONE_OF_MESSAGE)
    return errors


def _flag_argv(flag: str, value: Any, field: FieldInfo) -> list[str]:
    if isinstance(value, bool):
        return [flag] if value else []
    if number_kind(field) == "int":
        return [flag, str(int(value))]
    if number_kind(field) == "float":
        return [flag, repr(float(value))]
    if isinstance(value, str) and value == "" and field.default == "":
        return []  # an empty model name: the load generator asks the server
    return [flag, str(value)]


def _slo_argv(slo: SloSettings) -> list[str]:
    argv: list[str] = []
    for name, field in SloSettings.model_fields.items():
        value = getattr(slo, name)
        if value is not None:
            argv += _flag_argv(option(field).flag, value, field)
    return argv


def _argv_text(value: str, what: str, longest: int) -> str:
    """A text that goes on the load generator's command line as a flag's value: bounded, no
    control characters, and not read as a flag itself."""
    if len(value) > longest or value.startswith("-") or any(ord(c) < 32 for c in value):
        raise ValueError(f"{what} of up to {longest} characters, not starting with '-'.")
    return value


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def input_fields(
    model: type[BaseModel] = LoadSettings, *, nested: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Each setting as an optional field of a request body (``pydantic.create_model``
    arguments): its type or None, its help and bounds in the description. The service checks
    the values (errors per field); ``nested`` gives the type of a nested setting (the SLO)."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        opt = option(field)
        text = field.description or ""
        if opt.low is not None and opt.high is not None:
            text += f" ({_plain(opt.low)} to {_plain(opt.high)})"
        default = field.get_default()
        if default not in (None, "", False):
            text += f"; default {default}"
        annotation: Any = field.annotation
        if nested and name in nested:
            annotation = nested[name]
        if field.annotation is bool:
            out[name] = (bool, Field(False, description=text))
        else:
            out[name] = (annotation | None, Field(None, description=text))
    return out
