from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.exit_hooks import run_exit_hooks
from core.jobs.worker import Worker
from core.startup import startup_message, startup_problems

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


def _check_bindable(host: str, port: int) -> None:
    """Fail before anything starts (the job worker included) when the port is taken: Daphne
    only logs a listen failure and exits 0."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise CommandError(f"cannot serve on {host}:{port}: {exc}") from exc
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As Twisted listens: SO_REUSEADDR, so a port in TIME_WAIT is not "taken".
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise CommandError(f"cannot serve on {host}:{port}: {exc.strerror}") from exc


def _exit_with_parent() -> None:
    """SIGTERM (the graceful shutdown) when the parent dies, even by SIGKILL: `make run`
    killed alone must not leave the dashboard and its job worker running orphaned."""
    import ctypes

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise CommandError(f"prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}")
    if os.getppid() != parent:  # it died before the request took effect
        raise CommandError("the parent process exited before the dashboard started")


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
        parser.add_argument(
            "--exit-with-parent",
            action="store_true",
            help="Shut down when the parent process dies (Linux; used by `make run`)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["exit_with_parent"]:
            _exit_with_parent()
        _check_bindable(options["host"], options["port"])
        worker = None if options["no_worker"] else Worker()
        # Before anything listens: a var dir or database that refuses writes is said here,
        # not answered with a 500 on every login. The worker's first beat is this write, so
        # it counts as alive from the first request on.
        problems = startup_problems(worker=worker)
        if problems:
            raise CommandError(startup_message(problems))
        # Importing daphne.server installs Twisted's asyncio reactor on its own loop.
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server, twisted_loop
        from twisted.internet import defer, reactor

        from specdash.asgi import application

        announce = f"specdash is at http://{options['host']}:{options['port']}/"
        failures: list[str] = []

        class _Server(Server):  # type: ignore[misc]
            # Say where it serves only once it listens, and remember a listen failure.
            def listen_success(self, port: Any) -> None:
                super().listen_success(port)
                out.write(announce)
                out.flush()

            def listen_error(self, failure: Any) -> None:
                failures.append(str(failure.getErrorMessage()))
                super().listen_error(failure)

        out = self.stdout
        server = _Server(
            application=application,
            endpoints=build_endpoint_description_strings(
                host=options["host"], port=options["port"]
            ),
            signal_handlers=True,
            action_logger=None,
        )
        if worker is not None:
            stop = asyncio.Event()
            state: dict[str, asyncio.Task[None]] = {}
            embedded = worker

            def start_worker() -> None:
                task = twisted_loop.create_task(embedded.run(stop))
                task.add_done_callback(_worker_ended)
                state["task"] = task

            def _worker_ended(task: asyncio.Task[None]) -> None:
                # Its loop survives its iterations' errors, so this is a bug or a shutdown;
                # either way the dashboard must not keep serving as if jobs still ran.
                if stop.is_set() or task.cancelled():
                    return
                exc = task.exception()
                logger.critical(
                    "the embedded job worker ended unexpectedly (%r); shutting down so that "
                    "a supervisor restarts the dashboard",
                    exc,
                    exc_info=exc,
                )
                reactor.stop()  # type: ignore[misc]

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
        try:
            server.run()
        finally:
            run_exit_hooks()  # e.g. the ssh master connections of this process (hosts)
        if failures:
            raise CommandError(
                f"could not listen on {options['host']}:{options['port']}: " + "; ".join(failures)
            )
