from __future__ import annotations

from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        # Sweeps, sweep shards and experiments register their job handlers on import.
        import benchmarks.jobs  # noqa: F401
        from benchmarks import selectors
        from hosts.telemetry.sweeps import register_sweep_source

        # Telemetry (in hosts, below this app) keeps a sweep's samples with it and charts a
        # sweep page's host over its span: it asks these two lookups.
        register_sweep_source(
            running=selectors.sweeps_running_on_host, span_of=selectors.sweep_span
        )

        # The request bootstrap as arrays: the same replicates as the statistics' reference
        # loop (benchlib.arrays.bootstrap), minutes fewer at 100k requests.
        from benchlib.arrays.bootstrap import slot_rate_replicates
        from benchlib.stats.intervals import use_slot_rate_replicates

        use_slot_rate_replicates(slot_rate_replicates)
