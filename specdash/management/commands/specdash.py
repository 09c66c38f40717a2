"""``manage.py specdash``: the REST API from a terminal.

Every subcommand but ``token`` talks HTTP to a running dashboard with an API token
(``--url``/``SPECDASH_URL``, ``--token``/``SPECDASH_TOKEN``); ``token`` creates one in the
local database, for bootstrapping scripts and CI.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from benchlib.loadgen.settings_args import add_load_arguments, given_settings
from benchmarks.experiments.axes import parse_arm_load
from benchmarks.models.experiments import (
    DEFAULT_ORDER,
    DEFAULT_REPEATS,
    ExperimentOrder,
    ExperimentState,
)
from hosts.models import InstanceState
from specdash.api.client import INSTANCE_SETTLED, ApiFailure, SpecdashClient

# The states a stop ends in, what `stop --wait` waits for.
STOP_SETTLED = frozenset(
    {InstanceState.STOPPED, InstanceState.DIRTY, InstanceState.FAILED, InstanceState.LOST}
)


def _load_arguments(parser: CommandParser) -> None:
    """The load of a sweep or an experiment: levels, then every load setting with the load
    generator's own flag (benchlib.loadgen.settings); only those given are sent, the server
    fills in the rest."""
    parser.add_argument("--levels", required=True, type=_levels, help="e.g. 1,2,5,10")
    add_load_arguments(parser, defaults=False, aliases={"requests_per_level": ("--requests",)})


def _load(options: dict[str, Any]) -> dict[str, Any]:
    load = given_settings(argparse.Namespace(**options))
    if "duration" not in load and "requests_per_level" not in load:
        load["requests_per_level"] = 20
    return load


def _levels(text: str) -> list[int]:
    try:
        return [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise CommandError(f"--levels takes comma-separated whole numbers, not {text!r}") from None


class Command(BaseCommand):
    help = "Drive specdash over its REST API: start, sweep, wait, stop, compare."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--url", default=os.environ.get("SPECDASH_URL", "http://127.0.0.1:8000")
        )
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

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "token":
            self._token(options)
            return
        if options["action"] == "audit":
            self._audit(options)
            return
        if not options["token"]:
            raise CommandError("Give --token or set SPECDASH_TOKEN (see `specdash token`).")
        client = SpecdashClient(options["url"], options["token"])
        try:
            getattr(self, f"_{options['action']}")(client, options)
        except ApiFailure as exc:
            raise CommandError(str(exc)) from None
        except TimeoutError as exc:
            raise CommandError(str(exc)) from None
        finally:
            client.close()

    def _out(self, options: dict[str, Any], body: Any, text: str) -> None:
        self.stdout.write(json.dumps(body, indent=1) if options["json"] else text)

    def _token(self, options: dict[str, Any]) -> None:
        from core.tokens import api_token_create

        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"No user {options['user']!r}.")
        days = options["expires_days"]
        expires = timezone.now() + timedelta(days=days) if days else None
        _token, secret = api_token_create(user=user, name=options["name"], expires_at=expires)
        self.stdout.write(secret)

    def _audit(self, options: dict[str, Any]) -> None:
        # Local, like `token`: it reads the database and the records files themselves, so
        # it also works while no dashboard is running (right after a crash, say). The outcome
        # is kept on each audited sweep and experiment, where their pages show it.
        from benchmarks import audit
        from benchmarks.models import Experiment, Sweep

        if options["sweep"] is not None:
            sweep = Sweep.objects.filter(pk=options["sweep"]).first()
            if sweep is None:
                raise CommandError(f"No sweep #{options['sweep']}.")
            report = audit.audit_sweep_store(sweep_id=sweep.pk)
        elif options["experiment"] is not None:
            experiment = Experiment.objects.filter(pk=options["experiment"]).first()
            if experiment is None:
                raise CommandError(f"No experiment #{options['experiment']}.")
            report = audit.audit_experiment_store(experiment_id=experiment.pk)
        else:
            report = audit.audit_all_store()
        body = report.as_dict()
        lines = [
            f"audit of {report.target}: {'ok' if report.ok else 'FAILED'} "
            f"({report.levels_checked} levels, {report.records_checked} records, "
            f"{report.comparisons_checked} comparisons checked)",
            *(f"  {p}" for p in report.problems),
        ]
        self._out(options, body, "\n".join(lines))
        if not report.ok:
            raise CommandError(
                f"audit failed: {len(report.problems)} disagreement(s)", returncode=1
            )

    def _experiment(self, client: SpecdashClient, options: dict[str, Any]) -> None:
        verb = options["verb"]
        if verb == "create":
            load = _load(options)
            try:
                arm_loads = [parse_arm_load(text) for text in options["arm_load"]]
            except ValidationError as exc:
                raise CommandError(f"--arm-load: {'; '.join(exc.messages)}") from None
            body = client.post(
                "/experiments",
                {
                    "profiles": [client.profile_id(p) for p in options["profiles"]],
                    "arm_loads": arm_loads,
                    "levels": options["levels"], "load": load, "name": options["name"],
                    "repeats": options["repeats"], "order": options["order"],
                    "tags": options["tag"], "auto_resume": options["auto_resume"],
                },
            )  # fmt: skip
            experiment = body["experiment"]
        elif verb == "resume":
            experiment = client.post(f"/experiments/{options['id']}/resume")["experiment"]
        elif verb == "cancel":
            experiment = client.post(f"/experiments/{options['id']}/cancel")["experiment"]
        elif verb == "compare":
            self._compare(client, {**options, "experiment": options["id"], "sweeps": []})
            return
        elif verb == "verify":
            self._verify(client, options)
            return
        else:
            experiment = {"id": options["id"]}
        if verb == "wait" or options.get("wait"):
            timeout = options.get("timeout") or 24 * 3600.0
            experiment = client.wait_finished(f"/experiments/{experiment['id']}", timeout=timeout)
        text = f"experiment {experiment['id']} {experiment['state']}"
        if experiment.get("reason"):
            text += f": {experiment['reason']}"
        self._out(options, experiment, text)
        if verb == "wait" and experiment["state"] != ExperimentState.COMPLETED:
            raise CommandError(text, returncode=1)

    def _verify(self, client: SpecdashClient, options: dict[str, Any]) -> None:
        payload = {} if options["repeats"] is None else {"repeats": options["repeats"]}
        experiment = client.post(f"/experiments/{options['id']}/verify", payload)["experiment"]
        if not options["wait"]:
            text = f"experiment {experiment['id']} {experiment['state']}"
            self._out(options, experiment, text)
            return
        path = f"/experiments/{experiment['id']}"
        experiment = client.wait_finished(path, timeout=options["timeout"])
        if experiment["state"] != "completed":
            raise CommandError(f"experiment {experiment['id']} {experiment['state']}", returncode=1)
        query = {} if options["margin"] is None else {"margin": options["margin"]}
        report = client.get(f"{path}/verification", **query)
        lines = [f"experiment {experiment['id']} completed: {report['verdict']}"]
        for row in report["levels"]:
            r = row["ratio"]
            interval = "" if r["low"] is None else f" [{r['low']:.3f}, {r['high']:.3f}]"
            lines.append(
                f"C={row['concurrency']}: tuned / {row['best_fixed']} {r['point']:.3f}x{interval}"
            )
        self._out(options, report, "\n".join(lines))
        if not report["ok"]:
            message = "the schedule is not at least as good as every fixed choice"
            raise CommandError(message, returncode=1)

    def _profiles(self, client: SpecdashClient, options: dict[str, Any]) -> None:
        page = client.get("/profiles", limit=200)
        lines = [
            f"{p['id']:>4}  {p['name']}  (endpoint {p['base_url']}, not started by specdash)"
            if p.get("kind") == "endpoint"
            else f"{p['id']:>4}  {p['name']}  ({p['host']}:{p['port']})"
            for p in page["items"]
        ]
        self._out(options, page, "\n".join(lines))

    def _endpoint(self, client: SpecdashClient, options: dict[str, Any]) -> None:
        profile = client.post(
            "/profiles",
            {
                "name": options["name"], "kind": "endpoint", "base_url": options["base_url"],
                "engine": options["engine"], "metrics_url": options["metrics_url"],
                "api_kind": options["api"], "served_model_name": options["model"],
                "readiness_path": options["readiness_path"],
                "speculative": options["speculative"],
            },
        )  # fmt: skip
        self._out(
            options,
            profile,
            f"endpoint profile {profile['id']} {profile['name']} ({profile['base_url']})",
        )

    def _start(self, client: SpecdashClient, options: dict[str, Any]) -> None:
        body = client.post(f"/profiles/{client.profile_id(options['profile'])}/start")
        instance = body["instance"]
        if options["wait"]:
            instance = client.wait_instance(instance["id"])
            if instance["state"] != InstanceState.READY:
                raise CommandError(
                    f"instance {instance['id']} {instance['state']}: {instance['reason']}"
                )
        self._out(options, instance, f"instance {instance['id']} {instance['state']}")

    def _stop(self, client: SpecdashClient, options: dict[str, Any]) -> None:
        instance = client.post(f"/instances/{options['instance']}/stop")["instance"]
        if options["wait"]:
            instance = client.wait_instance(instance["id"], states=STOP_SETTLED)
        self._out(options, instance, f"instance {instance['id']} {instance['state']}")

    def _sweep(self, client: SpecdashClient, options: dict[str, Any]) -> None:
        load = _load(options)
        target: dict[str, int | None] = (
            {"profile_id": client.profile_id(options["endpoint"])}
            if options["endpoint"]
            else {"instance_id": options["instance"]}
        )
        sweep = client.post(
            "/sweeps",
            {
                **target, "levels": options["levels"], "load": load,
                "name": options["name"], "tags": options["tag"],
            },
        )["sweep"]  # fmt: skip
        if options["wait"]:
            sweep = client.wait_finished(f"/sweeps/{sweep['id']}")
        self._out(options, sweep, f"sweep {sweep['id']} {sweep['state']}")

    def _wait(self, client: SpecdashClient, options: dict[str, Any]) -> None:
        kind, ident, timeout = options["kind"], options["id"], options["timeout"]
        if kind == "instance":
            states = frozenset(options["state"] or INSTANCE_SETTLED)
            body = client.wait_instance(ident, states=states, timeout=timeout)
        else:
            body = client.wait_finished(f"/{kind}s/{ident}", timeout=timeout)
        self._out(options, body, f"{kind} {ident} {body['state']}")

    def _compare(self, client: SpecdashClient, options: dict[str, Any]) -> None:
        if options["experiment"] is not None:
            body = client.get(f"/experiments/{options['experiment']}/comparison")
        elif len(options["sweeps"]) >= 2:
            body = client.request(
                "GET", "/comparisons", params=[("sweep", s) for s in options["sweeps"]]
            )
        else:
            raise CommandError("Give two or more sweep ids, or --experiment ID.")
        lines = []
        for verdict in body["verdicts"]:
            ratios = "  ".join(
                f"C={r['concurrency']}: {r['point']:.2f}x" for r in verdict["ratios"]
            )
            lines.append(f"{verdict['candidate']} vs {verdict['reference']}: {ratios}")
            decision = verdict.get("decision") or {}
            # The decision's own statements, one a line: this command writes none of its own.
            lines += decision.get("statements") or [verdict["text"]]
        lines += [f"warning: {w}" for w in body["warnings"]]
        self._out(options, body, "\n".join(lines))
