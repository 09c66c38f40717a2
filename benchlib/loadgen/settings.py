from __future__ import annotations

# The load settings of a run, declared once: each option's name, type, default, bounds, help text
# and command-line flag. Every edge converts from this model (docs/architecture.md, "Load
# settings: one model"): the load generator's argparse flags and its level configuration, the
# argv a sweep starts it with, the sweep service's validation and stored form, the dashboard's
# form fields and the API's request schema. A new option is one field here.
#
# Plain pydantic, no Django: the load generator runs as its own process and as a library.
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from benchlib.loadgen.apis import Api
from benchlib.loadgen.datasets import PROMPT_SETS
from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.ramp import RAMPS
from benchlib.loadgen.traces import TRACE_FORMATS

APIS = tuple(a.value for a in Api)
MIN_RATE = 0.001  # req/s: one request in about 17 minutes
MAX_RATE = 1_000_000.0
UNSET: Any = object()
TRACE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")


@dataclass(frozen=True, slots=True)
class Option:
    """How one setting appears at the edges (the model's field carries the rest)."""

    flag: str  # the load generator's command-line flag
    label: str = ""  # the form's label ("" : Django's, from the name)
    form_initial: Any = UNSET  # the form's initial value where it is not the default
    cli_default: Any = UNSET  # the CLI's default where it is not the model's
    choices: tuple[tuple[str, str], ...] = ()  # labelled choices (value, label)
    # requests_per_level and duration: exactly one of the two (a required group on the CLI)
    one_of: str = ""
    # What a sweep accepts (the dashboard, the API); the load generator run by hand takes
    # any value of the type.
    low: float | None = None
    high: float | None = None


def _text_choices(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    return tuple((v, v) for v in values)


class SloSettings(BaseModel):
    """Latency targets: goodput per level (benchlib.loadgen.goodput.Slo)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: Annotated[float | None, Option("--slo-ttft-ms", label="SLO: TTFT (ms)")] = None
    tpot_ms: Annotated[float | None, Option("--slo-tpot-ms", label="SLO: TPOT (ms)")] = None
    itl_ms: Annotated[
        float | None,
        Field(description="A request's mean inter-token latency (its mean token gap)"),
        Option("--slo-itl-ms", label="SLO: mean ITL per request (ms)"),
    ] = None
    max_gap_ms: Annotated[
        float | None,
        Field(description="A request's longest gap between two deliveries"),
        Option("--slo-max-gap-ms", label="SLO: longest gap per request (ms)"),
    ] = None
    e2e_ms: Annotated[float | None, Option("--slo-e2e-ms", label="SLO: E2E (ms)")] = None
    scope: Annotated[
        str,
        Field(description="p99 (of the level) or request (per request)"),
        Option(
            "--slo-scope",
            label="SLO applies to",
            choices=(("p99", "p99 of the level within each limit"), ("request", "per request")),
        ),
    ] = "p99"
    attainment: Annotated[
        float,
        Field(description="Share of requests (scope request)"),
        Option("--slo-attainment", label="SLO attainment"),
    ] = 0.99

    def slo(self) -> Slo | None:
        return Slo.from_dict(self.model_dump())


class LoadSettings(BaseModel):
    """What a run sends, and how much: everything but the levels (concurrencies) themselves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api: Annotated[
        str, Option("--api", choices=_text_choices(APIS)), Field(description="Which HTTP API")
    ] = "completions"
    model: Annotated[
        str,
        Field(description="The served model name (empty: the server's, from /v1/models)"),
        Option("--model", label="Model name"),
    ] = ""
    requests_per_level: Annotated[
        int | None,
        Field(description="Requests per level (or duration)"),
        Option("--requests-per-level", form_initial=100, one_of="amount", low=1, high=1_000_000),
    ] = None
    duration: Annotated[
        float | None,
        Field(description="Seconds per level (or requests_per_level)"),
        Option("--duration", label="Duration per level (s)", one_of="amount", low=0.1, high=86_400),
    ] = None
    warmup_requests: Annotated[
        int,
        Field(description="Requests per level before measuring (not measured)"),
        Option("--warmup-requests", label="Warm-up requests", low=0, high=100_000),
    ] = 0
    input_tokens: Annotated[
        int,
        Field(description="Synthetic prompt length"),
        Option("--input-tokens", low=1, high=131_072),
    ] = 128
    max_tokens: Annotated[
        int,
        Field(
            description="Output tokens per request (the load generator run by hand, without "
            "the flag: the dataset's, else 128)"
        ),
        # The CLI alone leaves it to the dataset (its prompts' own lengths, else 128).
        Option("--max-tokens", label="Max output tokens", cli_default=None, low=1, high=65_536),
    ] = 128
    temperature: Annotated[
        float | None,
        Field(description="Sampling temperature"),
        Option("--temperature", low=0, high=2),
    ] = None
    request_timeout: Annotated[
        float,
        Field(description="Seconds per request before it is cut"),
        Option("--request-timeout", label="Request timeout (s)", low=1, high=3_600),
    ] = 600.0
    ignore_eos: Annotated[
        bool,
        Field(description="Generate max_tokens whatever the model says"),
        Option("--ignore-eos", label="Ignore EOS", form_initial=True),
    ] = False
    prompt_set: Annotated[
        str,
        Field(description="synthetic (default), sharegpt (chat), humaneval (code), mixed"),
        Option(
            "--prompt-set",
            label="Prompts",
            choices=(
                ("synthetic", "synthetic (random words of the input length)"),
                ("sharegpt", "ShareGPT (chat)"),
                ("humaneval", "HumanEval (code)"),
                ("mixed", "ShareGPT + HumanEval alternating (chat, code)"),
            ),
        ),
    ] = "synthetic"
    request_rate: Annotated[
        float | list[float] | None,
        Field(
            description="Open-loop arrivals in req/s: one rate for every level (each level's "
            "concurrency caps in-flight), or a list of several for a rate sweep (one level per "
            "rate, levels then one concurrency: the cap); each above 0"
        ),
        Option("--request-rate", label="Request rates (req/s)"),
    ] = None
    # The gamma shape of open-loop arrival gaps (1: Poisson); the rates are sweeps.plan's.
    burstiness: Annotated[
        float,
        Field(description="Gamma shape of arrival gaps (1: Poisson)"),
        Option("--burstiness", low=0.01, high=100),
    ] = 1.0
    ramp: Annotated[
        str,
        Field(
            description="Within each level, the arrival rate rises from ramp_start_rate to the "
            "request rate: linear or exponential (empty: a steady rate)"
        ),
        Option(
            "--ramp",
            label="Rate ramp within a level",
            choices=(
                ("", "none (a steady rate)"),
                ("linear", "linear"),
                ("exponential", "exponential"),
            ),
        ),
    ] = ""
    ramp_start_rate: Annotated[
        float | None,
        Field(description="The ramp's first rate in req/s (it ends at the request rate)"),
        Option("--ramp-start-rate", label="Ramp start rate (req/s)", low=MIN_RATE, high=MAX_RATE),
    ] = None
    ramp_slices: Annotated[
        int,
        Field(description="Time slices a ramped level's figures are given for"),
        Option("--ramp-slices", label="Ramp slices", low=1, high=1000),
    ] = 10
    controller_tracking: Annotated[
        bool,
        Field(
            description="Scrape the server's /metrics once a second during each level: the "
            "speculation controller's draft length, tokens per step, acceptance and throughput "
            "per second, and its switches with their cost (docs/measurement.md, 'Controller "
            "tracking')"
        ),
        Option("--controller-tracking", label="Track the speculation controller per second"),
    ] = False
    session_turns: Annotated[
        int,
        Field(
            description="Multi-turn sessions (chat, closed loop): turns per session, each "
            "carrying the history so far (0: single requests)"
        ),
        Option("--session-turns", label="Turns per session", low=0, high=1000),
    ] = 0
    turn_tokens: Annotated[
        int,
        Field(description="Length of a session's follow-up messages (its first is the prompt)"),
        Option("--turn-tokens", label="Follow-up message length", low=1, high=131_072),
    ] = 32
    think_time: Annotated[
        float,
        Field(description="Seconds between a session's answer and its next turn"),
        Option("--think-time", label="Think time (s)", low=0, high=3_600),
    ] = 0.0
    prefix_count: Annotated[
        int,
        Field(description="Shared prefixes (system prompts) ahead of the prompts; 0: none"),
        Option("--prefix-count", label="Shared prefixes", low=0, high=10_000),
    ] = 0
    prefix_tokens: Annotated[
        int,
        Field(description="Length of each shared prefix (tokens)"),
        Option("--prefix-tokens", label="Shared prefix length", low=1, high=131_072),
    ] = 512
    prefix_share: Annotated[
        float,
        Field(description="Share of requests that carry a shared prefix"),
        Option("--prefix-share", label="Share with a prefix", low=0, high=1),
    ] = 1.0
    trace: Annotated[
        str,
        Field(
            description="Replay this trace file's arrivals and lengths (a sweep: a file name in "
            "the dashboard's trace folder); empty: no trace"
        ),
        Option("--trace", label="Trace file"),
    ] = ""
    trace_format: Annotated[
        str,
        Field(description="mooncake (JSONL), burstgpt (CSV) or jsonl (ours)"),
        Option(
            "--trace-format",
            choices=(
                ("mooncake", "Mooncake JSONL (timestamp ms, lengths, hash_ids)"),
                ("burstgpt", "BurstGPT CSV"),
                ("jsonl", "specdash JSONL (t s, input_tokens, output_tokens)"),
            ),
        ),
    ] = "mooncake"
    trace_speed: Annotated[
        float,
        Field(description="Replay speed (2: arrivals twice as fast)"),
        Option("--trace-speed", low=0.01, high=1000),
    ] = 1.0
    trace_start: Annotated[
        float,
        Field(description="Seconds into the trace where the replay starts"),
        Option("--trace-start", label="Trace window start (s)", low=0, high=1e7),
    ] = 0.0
    trace_duration: Annotated[
        float | None,
        Field(description="Seconds of the trace replayed from its start (empty: to its end)"),
        Option("--trace-duration", label="Trace window (s)", low=0.001, high=1e7),
    ] = None
    slo: Annotated[
        SloSettings | None,
        Field(description="Latency targets: goodput per level"),
        Option("--slo-*"),
    ] = None

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

    @field_validator("api")
    @classmethod
    def _api(cls, value: str) -> str:
        if value not in APIS:
            raise ValueError(f"Choose one of {', '.join(APIS)}.")
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        if len(value) > 200 or value.startswith("-") or any(ord(c) < 32 for c in value):
            raise ValueError("A model name of up to 200 characters, not starting with '-'.")
        return value

    @field_validator("prompt_set")
    @classmethod
    def _prompt_set(cls, value: str) -> str:
        if value not in PROMPT_SETS:
            raise ValueError(f"Choose one of {', '.join(PROMPT_SETS)}.")
        return value

    @field_validator("trace")
    @classmethod
    def _trace(cls, value: str, info: ValidationInfo) -> str:
        if len(value) > 500 or value.startswith("-") or any(ord(c) < 32 for c in value):
            raise ValueError("A file path of up to 500 characters, not starting with '-'.")
        # A sweep names a file in the dashboard's trace folder, nothing else on its disk.
        if (
            value
            and (info.context or {}).get("bounds", True)
            and not TRACE_NAME_RE.fullmatch(value)
        ):
            raise ValueError("A file name in the trace folder (letters, digits, . _ -).")
        return value

    @field_validator("ramp")
    @classmethod
    def _ramp(cls, value: str) -> str:
        if value and value not in RAMPS:
            raise ValueError(f"Choose one of {', '.join(RAMPS)}, or none.")
        return value

    @field_validator("trace_format")
    @classmethod
    def _trace_format(cls, value: str) -> str:
        if value not in TRACE_FORMATS:
            raise ValueError(f"Choose one of {', '.join(TRACE_FORMATS)}.")
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


def option(field: FieldInfo) -> Option:
    return next(m for m in field.metadata if isinstance(m, Option))


def bounds(field: FieldInfo) -> tuple[float | None, float | None]:
    opt = option(field)
    return opt.low, opt.high


def number_kind(field: FieldInfo) -> Literal["int", "float"] | None:
    """ "int" or "float" for a plain number field (not a list of rates, not a flag)."""
    args = set(get_args(field.annotation)) or {field.annotation}
    args.discard(type(None))
    if args == {int}:
        return "int"
    if args == {float}:
        return "float"
    return None


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


def nested_model(field: FieldInfo) -> type[BaseModel] | None:
    for arg in (*get_args(field.annotation), field.annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


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
