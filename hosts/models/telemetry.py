"""Telemetry samples (GPU, host load, server metrics) and who currently wants them.

Rows are compact: one row per host tick for all of its GPUs (parallel lists in ``data``), one
per host-load sample, one per server scrape. Old rows are thinned and then deleted by the
telemetry manager (see hosts/telemetry/service.py and docs/architecture.md, "Telemetry").
"""

from __future__ import annotations

from django.db import models

from hosts.models.instances import ServerInstance
from hosts.models.registry import Host


class TelemetryKind(models.TextChoices):
    GPU = "gpu", "GPU"
    HOST = "host", "Host load"
    SERVER = "server", "Server metrics"


class TelemetrySample(models.Model):
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="telemetry")
    instance = models.ForeignKey(
        ServerInstance, on_delete=models.SET_NULL, null=True, blank=True, related_name="telemetry"
    )
    # Set while a sweep runs on the host: such rows are kept with the sweep (never thinned).
    sweep = models.ForeignKey(
        "benchmarks.Sweep", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    t = models.FloatField(help_text="When the sample was taken (epoch seconds)")
    kind = models.CharField(max_length=8, choices=TelemetryKind.choices)
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["host", "t"]
        indexes = [
            models.Index(fields=["host", "kind", "t"], name="telemetry_host_kind_t"),
            models.Index(fields=["instance", "t"], name="telemetry_instance_t"),
            models.Index(fields=["sweep", "t"], name="telemetry_sweep_t"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of host {self.host_id} @{self.t:.1f}"


class TelemetryWatch(models.Model):
    """An open page's claim on a host's probes, renewed by the page while it stays open."""

    host = models.OneToOneField(Host, on_delete=models.CASCADE, related_name="telemetry_watch")
    wanted_until = models.DateTimeField()

    def __str__(self) -> str:
        return f"telemetry of host {self.host_id} wanted until {self.wanted_until:%H:%M:%S}"
