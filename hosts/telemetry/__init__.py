"""Pure parsers and aggregation for GPU, engine and host telemetry (no Django, no I/O)."""

from __future__ import annotations
