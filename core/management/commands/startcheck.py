from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.startup import startup_message, startup_problems


class Command(BaseCommand):
    help = (
        "Check that the var dir, the data dir and the database take writes, and say what is "
        "wrong if not (serve and jobworker check the same before they start)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dirs-only",
            action="store_true",
            help="only the folders (before `migrate` has created the database)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        problems = startup_problems(database=not options["dirs_only"])
        if problems:
            raise CommandError(startup_message(problems))
