"""Telemetry settings, read when needed (never at import time).

Each value comes from the Django setting of the same name when the settings module defines
it, else from the environment variable, else the default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from django.conf import settings


def _number(name: str, default: float) -> float:
    value = getattr(settings, name, None)
    if value is None:
        value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


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
        base = cls()
        return cls(
            retention_s=_number("SPECDASH_TELEMETRY_RETENTION_S", base.retention_s),
            downsample_after_s=_number(
                "SPECDASH_TELEMETRY_DOWNSAMPLE_AFTER_S", base.downsample_after_s
            ),
            downsample_step_s=_number(
                "SPECDASH_TELEMETRY_DOWNSAMPLE_STEP_S", base.downsample_step_s
            ),
            gpu_interval_ms=int(
                _number("SPECDASH_TELEMETRY_GPU_INTERVAL_MS", base.gpu_interval_ms)
            ),
            host_interval_s=_number("SPECDASH_TELEMETRY_HOST_INTERVAL_S", base.host_interval_s),
            scrape_interval_s=_number("SPECDASH_TELEMETRY_SCRAPE_S", base.scrape_interval_s),
            linger_s=_number("SPECDASH_TELEMETRY_LINGER_S", base.linger_s),
            watch_ttl_s=_number("SPECDASH_TELEMETRY_WATCH_TTL_S", base.watch_ttl_s),
            history_s=_number("SPECDASH_TELEMETRY_HISTORY_S", base.history_s),
        )
