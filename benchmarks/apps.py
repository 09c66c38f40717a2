from __future__ import annotations

from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        # Each slice registers its job handlers on import (sweeps, sweep shards and the
        # housekeeping; experiments).
        import benchmarks.experiments.jobs
        import benchmarks.sweeps.jobs  # noqa: F401
        from benchmarks.sweeps import selectors
        from hosts.telemetry.sweeps import register_sweep_source

        # Telemetry (in hosts, below this app) keeps a sweep's samples with it and charts a
        # sweep page's host over its span: it asks these two lookups.
        register_sweep_source(
            running=selectors.sweeps_running_on_host, span_of=selectors.sweep_span
        )

        from benchmarks import audit
        from benchmarks.experiments.store import register_experiment_audit
        from benchmarks.sweeps.store import register_sweep_audit

        # The audit reads both slices, so it sits above them and they do not import it: their
        # jobs run it at a sweep's and an experiment's end through what is handed over here.
        register_sweep_audit(audit.audit_sweep_store)
        register_experiment_audit(audit.audit_experiment_store)
