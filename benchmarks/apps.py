from __future__ import annotations

from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        # Sweeps, sweep shards and experiments register their job handlers on import.
        import benchmarks.jobs  # noqa: F401
