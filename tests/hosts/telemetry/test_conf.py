from __future__ import annotations

from typing import Any

from hosts.telemetry.conf import TelemetrySettings


def test_the_declared_settings_default_to_the_telemetry_defaults() -> None:
    # specdash/settings.py declares each SPECDASH_TELEMETRY_* with a default: the same as
    # the library's own, so a process with no variable set behaves as TelemetrySettings().
    assert TelemetrySettings.load() == TelemetrySettings()


def test_telemetry_settings_are_read_when_loaded_not_at_import(settings: Any) -> None:
    settings.SPECDASH_TELEMETRY_GPU_INTERVAL_MS = 250
    settings.SPECDASH_TELEMETRY_RETENTION_S = 60
    conf = TelemetrySettings.load()
    assert (conf.gpu_interval_ms, conf.retention_s) == (250, 60.0)
