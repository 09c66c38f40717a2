from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from hosts.jobs.worker import Worker, WorkerSettings


class Command(BaseCommand):
    help = "Run a job worker: claims queued jobs (server lifecycle, sweeps, experiments)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--worker-id", default=None)
        parser.add_argument("--max-jobs", type=int, default=32)
        parser.add_argument("--poll-interval", type=float, default=0.5)
        parser.add_argument("--lease-seconds", type=float, default=30.0)
        parser.add_argument("--heartbeat-interval", type=float, default=5.0)

    def handle(self, *args: Any, **options: Any) -> None:
        settings = WorkerSettings(
            max_jobs=options["max_jobs"],
            poll_interval=options["poll_interval"],
            lease_seconds=options["lease_seconds"],
            heartbeat_interval=options["heartbeat_interval"],
        )
        worker = Worker(worker_id=options["worker_id"], settings=settings)
        asyncio.run(self._run(worker))

    async def _run(self, worker: Worker) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await worker.run(stop)
