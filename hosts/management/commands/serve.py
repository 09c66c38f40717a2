from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "Serve the dashboard with Daphne. In the embedded default a job worker runs inside "
        "the same process, so the in-memory channel layer carries its live events to the "
        "websockets; with --no-worker, run `manage.py jobworker` processes and Redis instead."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--no-worker", action="store_true", help="Serve only; jobs run in jobworker processes"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # Importing daphne.server installs Twisted's asyncio reactor on its own loop.
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server, twisted_loop
        from twisted.internet import defer, reactor

        from hosts.jobs.worker import Worker
        from specdash.asgi import application

        server = Server(
            application=application,
            endpoints=build_endpoint_description_strings(
                host=options["host"], port=options["port"]
            ),
            signal_handlers=True,
            action_logger=None,
        )
        if not options["no_worker"]:
            worker = Worker()
            stop = asyncio.Event()
            state: dict[str, asyncio.Task[None]] = {}

            def start_worker() -> None:
                state["task"] = twisted_loop.create_task(worker.run(stop))

            def stop_worker() -> defer.Deferred[None] | None:
                task = state.get("task")
                if task is None or task.done():
                    return None
                stop.set()
                # Let running jobs record an honest state before the process exits.
                return defer.Deferred.fromFuture(task)

            reactor.callWhenRunning(start_worker)
            # zope interface methods are declared without self, which confuses mypy.
            reactor.addSystemEventTrigger("before", "shutdown", stop_worker)  # type: ignore[arg-type]
        self.stdout.write(f"specdash is at http://{options['host']}:{options['port']}/")
        self.stdout.flush()
        server.run()
