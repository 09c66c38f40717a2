"""Telemetry settings, read when needed (never at import time).

Each value is the Django setting of the same name, declared (from its ``SPECDASH_*``
environment variable, with the default below) in specdash/settings.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class TelemetrySettings:
    # Rows older than this are deleted, except those recorded during a sweep.
    retention_s: float = 7 * 24 * 3600.0
    # Rows older than this are thinned to one per `downsample_step_s` per host, kind, server.
    downsample_after_s: float = 3600.0
    downsample_step_s: float = 10.0
    gpu_interval_ms: int = 1000
    host_interval_s: float = 1.0
    scrape_interval_s: float = 1.0
    # How long a probe keeps running after the last instance stopped or page closed.
    linger_s: float = 15.0
    # An open page renews its watch every third of this.
    watch_ttl_s: float = 60.0
    # What a page that opens gets first.
    history_s: float = 900.0

    @classmethod
    def load(cls) -> TelemetrySettings:
        return cls(
            retention_s=float(settings.SPECDASH_TELEMETRY_RETENTION_S),
            downsample_after_s=float(settings.SPECDASH_TELEMETRY_DOWNSAMPLE_AFTER_S),
            downsample_step_s=float(settings.SPECDASH_TELEMETRY_DOWNSAMPLE_STEP_S),
            gpu_interval_ms=int(settings.SPECDASH_TELEMETRY_GPU_INTERVAL_MS),
            host_interval_s=float(settings.SPECDASH_TELEMETRY_HOST_INTERVAL_S),
            scrape_interval_s=float(settings.SPECDASH_TELEMETRY_SCRAPE_S),
            linger_s=float(settings.SPECDASH_TELEMETRY_LINGER_S),
            watch_ttl_s=float(settings.SPECDASH_TELEMETRY_WATCH_TTL_S),
            history_s=float(settings.SPECDASH_TELEMETRY_HISTORY_S),
        )
