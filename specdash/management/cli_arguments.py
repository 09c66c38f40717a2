"""The arguments of ``manage.py specdash`` and the options they give, declared together:
``add_cli_arguments`` declares them for argparse, ``CliOptions`` is what argparse hands back."""

from __future__ import annotations

import argparse
import os
from typing import TypedDict

from django.core.management.base import CommandError, CommandParser

from benchlib.json_types import JsonObject
from benchlib.loadgen.settings_args import add_load_arguments, given_settings
from benchmarks.experiments.models import DEFAULT_ORDER, DEFAULT_REPEATS, ExperimentOrder


class _CommonOptions(TypedDict):
    url: str
    token: str
    json: bool
    action: str


class CliOptions(_CommonOptions, total=False):
    """What argparse hands ``handle`` (as Django's ``**options``): the common options, and
    those of the subcommand given (each subcommand reads only its own). The load settings'
    flags (``add_load_arguments``) are not listed: only ``given_settings`` reads them."""

    verb: str
    id: int
    wait: bool
    timeout: float
    user: str
    name: str
    expires_days: int | None
    profile: str
    instance: int | None
    endpoint: str | None
    base_url: str
    engine: str
    metrics_url: str
    api: str
    model: str
    readiness_path: str
    speculative: bool
    levels: list[int]
    tag: list[str]
    kind: str
    state: list[str] | None
    sweep: int | None
    experiment: int | None
    all: bool
    profiles: list[str]
    arm_load: list[str]
    repeats: int | None
    order: str
    auto_resume: bool
    margin: float | None
    sweeps: list[int]


def _load_arguments(parser: CommandParser) -> None:
    """The load of a sweep or an experiment: levels, then every load setting with the load
    generator's own flag (benchlib.loadgen.settings); only those given are sent, the server
    fills in the rest."""
    parser.add_argument("--levels", required=True, type=_levels, help="e.g. 1,2,5,10")
    add_load_arguments(parser, defaults=False, aliases={"requests_per_level": ("--requests",)})


def given_load(options: CliOptions) -> JsonObject:
    load: JsonObject = given_settings(argparse.Namespace(**options))
    if "duration" not in load and "requests_per_level" not in load:
        load["requests_per_level"] = 20
    return load


def _levels(text: str) -> list[int]:
    try:
        return [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise CommandError(f"--levels takes comma-separated whole numbers, not {text!r}") from None


def add_cli_arguments(parser: CommandParser) -> None:
    parser.add_argument("--url", default=os.environ.get("SPECDASH_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("SPECDASH_TOKEN", ""))
    parser.add_argument("--json", action="store_true", help="Print the API's JSON")
    sub = parser.add_subparsers(dest="action", required=True)

    token = sub.add_parser("token", help="Create an API token in the local database")
    token.add_argument("--user", required=True)
    token.add_argument("--name", default="cli")
    token.add_argument("--expires-days", type=int, default=None)

    sub.add_parser("profiles", help="List server profiles")
    start = sub.add_parser("start", help="Start a profile (name or id)")
    start.add_argument("profile")
    start.add_argument("--wait", action="store_true", help="Wait until ready (or failed)")
    stop = sub.add_parser("stop", help="Stop an instance")
    stop.add_argument("instance", type=int)
    stop.add_argument("--wait", action="store_true", help="Wait until stopped (or dirty)")

    endpoint = sub.add_parser(
        "endpoint",
        help="Register a server already running (outside specdash) as an endpoint profile",
    )
    endpoint.add_argument("name")
    endpoint.add_argument("base_url", help="e.g. http://10.0.0.5:30000")
    endpoint.add_argument("--engine", default="custom")
    endpoint.add_argument("--metrics-url", default="")
    endpoint.add_argument("--api", default="", choices=["", "completions", "chat", "generate"])
    endpoint.add_argument("--model", default="", help="Its served model name")
    endpoint.add_argument("--readiness-path", default="/health")
    endpoint.add_argument("--speculative", action="store_true")

    sweep = sub.add_parser("sweep", help="Sweep a ready instance or an endpoint profile")
    target = sweep.add_mutually_exclusive_group(required=True)
    target.add_argument("instance", type=int, nargs="?", help="A ready instance's id")
    target.add_argument("--endpoint", help="An endpoint profile (name or id)")
    _load_arguments(sweep)
    sweep.add_argument("--name", default="")
    sweep.add_argument("--tag", action="append", default=[])
    sweep.add_argument("--wait", action="store_true", help="Wait until it finishes")

    wait = sub.add_parser("wait", help="Wait for an instance, sweep, experiment or job")
    wait.add_argument("kind", choices=["instance", "sweep", "experiment", "job"])
    wait.add_argument("id", type=int)
    wait.add_argument("--state", action="append", help="Instance states to wait for")
    wait.add_argument("--timeout", type=float, default=3600.0)

    audit = sub.add_parser(
        "audit",
        help="Recompute stored summaries and comparisons from the raw records "
        "(local database and records files; exit status 1 when anything disagrees)",
    )
    target = audit.add_mutually_exclusive_group(required=True)
    target.add_argument("--sweep", type=int)
    target.add_argument("--experiment", type=int)
    target.add_argument("--all", action="store_true")

    experiment = sub.add_parser("experiment", help="A/B experiments: create, wait, ...")
    verbs = experiment.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="Queue an experiment (profiles: first is A)")
    create.add_argument(
        "profiles", nargs="+",
        help="Profile names or ids, A first (one twice: two arms of one server, each with "
        "its own --arm-load)",
    )  # fmt: skip
    _load_arguments(create)
    create.add_argument(
        "--arm-load", action="append", default=[], metavar="SETTINGS",
        help="One per profile, in order: that arm's own api and temperature over the load, "
        "e.g. --arm-load temperature=0 --arm-load temperature=1 ('' for none)",
    )  # fmt: skip
    create.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"Sweeps per arm (default {DEFAULT_REPEATS}; 1 = single run, within-run interval)",
    )
    create.add_argument(
        "--order", choices=ExperimentOrder.values, default=DEFAULT_ORDER.value,
        help="interleaved: A B B A (default); sequential: A A B B",
    )  # fmt: skip
    create.add_argument("--name", default="")
    create.add_argument("--tag", action="append", default=[])
    create.add_argument(
        "--auto-resume", action="store_true", help="Resume by itself after a worker restart"
    )
    create.add_argument("--wait", action="store_true", help="Wait until it finishes")
    for verb, text in (
        ("wait", "Wait until it finishes"),
        ("resume", "Resume an interrupted experiment"),
        ("cancel", "Cancel it (its server gets a verified stop)"),
        ("compare", "Print its comparison"),
    ):
        parser_ = verbs.add_parser(verb, help=text)
        parser_.add_argument("id", type=int)
        if verb in {"wait", "resume"}:
            parser_.add_argument("--timeout", type=float, default=24 * 3600.0)
        if verb == "resume":
            parser_.add_argument("--wait", action="store_true", help="Wait until it finishes")

    verify = verbs.add_parser(
        "verify",
        help="Verify the speculation schedule of a completed matrix experiment: queue the "
        "tuned arm against every fixed variant",
    )
    verify.add_argument("id", type=int, help="The matrix experiment")
    verify.add_argument(
        "--repeats", type=int, default=None, help="Sweeps per arm (default 3, or more)"
    )
    verify.add_argument("--margin", type=float, default=None, help="Verdict margin (default 0)")
    verify.add_argument("--wait", action="store_true", help="Wait, then print the verdict")
    verify.add_argument("--timeout", type=float, default=24 * 3600.0)

    compare = sub.add_parser("compare", help="Compare sweeps (first = reference)")
    compare.add_argument("sweeps", nargs="*", type=int)
    compare.add_argument("--experiment", type=int, help="Or an experiment's comparison")
