"""The load settings' fields, declared once: each option's name, type, default, bounds, help
text and command-line flag (``Option``), and how an edge reads them (``option``, ``bounds``,
``number_kind``, ``nested_model``).

Every edge converts from this declaration (docs/architecture.md, "Load settings: one model"):
the load generator's argparse flags and its level configuration, the argv a sweep starts it
with, the sweep service's validation and stored form, the dashboard's form fields and the API's
request schema. A new option is one field here. The declaration is apart from the checks and
conversions (``settings.LoadSettings``, which subclasses ``LoadFields``) so that it reads as one
list; use ``LoadSettings``, never ``LoadFields`` on its own (it checks nothing).

Plain pydantic, no Django: the load generator runs as its own process and as a library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from benchlib.loadgen.apis import Api
from benchlib.loadgen.goodput import Slo

APIS = tuple(a.value for a in Api)
MIN_RATE = 0.001  # req/s: one request in about 17 minutes
MAX_RATE = 1_000_000.0
UNSET: Any = object()


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


class LoadFields(BaseModel):
    """The fields of ``settings.LoadSettings``, in the order every edge shows them."""

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


def nested_model(field: FieldInfo) -> type[BaseModel] | None:
    for arg in (*get_args(field.annotation), field.annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None
