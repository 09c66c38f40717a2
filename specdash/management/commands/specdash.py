"""``manage.py specdash``: the REST API from a terminal.

Every subcommand but ``token`` talks HTTP to a running dashboard with an API token
(``--url``/``SPECDASH_URL``, ``--token``/``SPECDASH_TOKEN``); ``token`` creates one in the
local database, for bootstrapping scripts and CI.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, cast

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from benchmarks.experiments.axes import parse_arm_load
from benchmarks.experiments.models import ExperimentState
from hosts.models import InstanceState
from specdash.api.client import INSTANCE_SETTLED, ApiFailure, SpecdashClient
from specdash.management.cli_arguments import CliOptions, add_cli_arguments, given_load

# The states a stop ends in, what `stop --wait` waits for.
STOP_SETTLED = frozenset(
    {InstanceState.STOPPED, InstanceState.DIRTY, InstanceState.FAILED, InstanceState.LOST}
)


class Command(BaseCommand):
    help = "Drive specdash over its REST API: start, sweep, wait, stop, compare."

    def add_arguments(self, parser: CommandParser) -> None:
        add_cli_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        # Declared by add_arguments above; argparse itself hands them over untyped.
        cli_options = cast(CliOptions, options)
        if options["action"] == "token":
            self._token(cli_options)
            return
        if options["action"] == "audit":
            self._audit(cli_options)
            return
        if not options["token"]:
            raise CommandError("Give --token or set SPECDASH_TOKEN (see `specdash token`).")
        client = SpecdashClient(options["url"], options["token"])
        try:
            getattr(self, f"_{options['action']}")(client, cli_options)
        except ApiFailure as exc:
            raise CommandError(str(exc)) from None
        except TimeoutError as exc:
            raise CommandError(str(exc)) from None
        finally:
            client.close()

    def _out(self, options: CliOptions, body: Any, text: str) -> None:
        self.stdout.write(json.dumps(body, indent=1) if options["json"] else text)

    def _token(self, options: CliOptions) -> None:
        from core.tokens import api_token_create

        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"No user {options['user']!r}.")
        days = options["expires_days"]
        expires = timezone.now() + timedelta(days=days) if days else None
        _token, secret = api_token_create(user=user, name=options["name"], expires_at=expires)
        self.stdout.write(secret)

    def _audit(self, options: CliOptions) -> None:
        # Local, like `token`: it reads the database and the records files themselves, so
        # it also works while no dashboard is running (right after a crash, say). The outcome
        # is kept on each audited sweep and experiment, where their pages show it.
        from benchmarks import audit
        from benchmarks.experiments.models import Experiment
        from benchmarks.sweeps.models import Sweep

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

    def _experiment(self, client: SpecdashClient, options: CliOptions) -> None:
        verb = options["verb"]
        if verb == "create":
            load = given_load(options)
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
            self._compare(client, options, experiment=options["id"], sweeps=[])
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

    def _verify(self, client: SpecdashClient, options: CliOptions) -> None:
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

    def _profiles(self, client: SpecdashClient, options: CliOptions) -> None:
        page = client.get("/profiles", limit=200)
        lines = [
            f"{p['id']:>4}  {p['name']}  (endpoint {p['base_url']}, not started by specdash)"
            if p.get("kind") == "endpoint"
            else f"{p['id']:>4}  {p['name']}  ({p['host']}:{p['port']})"
            for p in page["items"]
        ]
        self._out(options, page, "\n".join(lines))

    def _endpoint(self, client: SpecdashClient, options: CliOptions) -> None:
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

    def _start(self, client: SpecdashClient, options: CliOptions) -> None:
        body = client.post(f"/profiles/{client.profile_id(options['profile'])}/start")
        instance = body["instance"]
        if options["wait"]:
            instance = client.wait_instance(instance["id"])
            if instance["state"] != InstanceState.READY:
                raise CommandError(
                    f"instance {instance['id']} {instance['state']}: {instance['reason']}"
                )
        self._out(options, instance, f"instance {instance['id']} {instance['state']}")

    def _stop(self, client: SpecdashClient, options: CliOptions) -> None:
        instance = client.post(f"/instances/{options['instance']}/stop")["instance"]
        if options["wait"]:
            instance = client.wait_instance(instance["id"], states=STOP_SETTLED)
        self._out(options, instance, f"instance {instance['id']} {instance['state']}")

    def _sweep(self, client: SpecdashClient, options: CliOptions) -> None:
        load = given_load(options)
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

    def _wait(self, client: SpecdashClient, options: CliOptions) -> None:
        kind, ident, timeout = options["kind"], options["id"], options["timeout"]
        if kind == "instance":
            states = frozenset(options["state"] or INSTANCE_SETTLED)
            body = client.wait_instance(ident, states=states, timeout=timeout)
        else:
            body = client.wait_finished(f"/{kind}s/{ident}", timeout=timeout)
        self._out(options, body, f"{kind} {ident} {body['state']}")

    def _compare(
        self,
        client: SpecdashClient,
        options: CliOptions,
        *,
        experiment: int | None = None,
        sweeps: list[int] | None = None,
    ) -> None:
        # `experiment compare ID` passes its experiment here; `compare` reads its own options.
        if sweeps is None:
            experiment, sweeps = options["experiment"], options["sweeps"]
        if experiment is not None:
            body = client.get(f"/experiments/{experiment}/comparison")
        elif len(sweeps) >= 2:
            body = client.request("GET", "/comparisons", params=[("sweep", s) for s in sweeps])
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
