from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.exit_hooks import run_exit_hooks
from core.jobs.worker import Worker, WorkerSettings
from core.startup import startup_message, startup_problems


class Command(BaseCommand):
    help = (
        "Run a job worker: claims queued jobs (server lifecycle, sweeps, experiments). "
        "Unset flags fall back to the SPECDASH_JOB_* settings (environment variables)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--worker-id", default=None)
        parser.add_argument("--max-jobs", type=int, default=None, help="default 32")
        parser.add_argument("--poll-interval", type=float, default=None, help="seconds, 0.5")
        parser.add_argument(
            "--lease-seconds",
            type=float,
            default=None,
            help="how long a job survives its worker's silence (default 30)",
        )
        parser.add_argument(
            "--heartbeat-interval", type=float, default=None, help="seconds (default 5)"
        )
        parser.add_argument(
            "--kinds",
            default=None,
            help="comma-separated job kinds to claim, e.g. sweep.shard (default: all)",
        )
        parser.add_argument(
            "--tags",
            default=None,
            help="comma-separated tags: jobs asking for one of them may run here",
        )
        parser.add_argument(
            "--machine", default=None, help='what "one per machine" counts (default: host name)'
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            settings = WorkerSettings.from_settings(
                max_jobs=options["max_jobs"],
                poll_interval=options["poll_interval"],
                lease_seconds=options["lease_seconds"],
                heartbeat_interval=options["heartbeat_interval"],
                kinds=options["kinds"],
                tags=options["tags"],
                machine=options["machine"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        worker = Worker(worker_id=options["worker_id"], settings=settings)
        problems = startup_problems(worker=worker)
        if problems:
            raise CommandError(startup_message(problems))
        try:
            asyncio.run(self._run(worker))
        finally:
            run_exit_hooks()  # e.g. the ssh master connections of this process (hosts)

    async def _run(self, worker: Worker) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await worker.run(stop)
