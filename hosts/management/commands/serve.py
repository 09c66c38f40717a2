from __future__ import annotations

import subprocess
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "The embedded default in one process tree: Daphne serving the dashboard plus one job "
        "worker as its child process."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--no-worker", action="store_true", help="Serve only; run workers elsewhere"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from daphne.cli import CommandLineInterface

        worker = None
        if not options["no_worker"]:
            worker = subprocess.Popen(
                [sys.executable, str(settings.BASE_DIR / "manage.py"), "jobworker"]
            )
        self.stdout.write(f"specdash is at http://{options['host']}:{options['port']}/")
        try:
            CommandLineInterface().run(
                ["-b", options["host"], "-p", str(options["port"]), "specdash.asgi:application"]
            )
        finally:
            if worker is not None:
                worker.terminate()
                try:
                    worker.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    worker.kill()
