"""The raw /metrics texts of every level boundary, kept beside the sweep's records (gzip JSON,
one file per level attempt), so that the audit can recompute the level's server figures."""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path
from typing import Any

from hosts.telemetry.levels import Keep, LevelScrapes


def scrapes_path(records_path: Path, *, index: int, attempt: int) -> Path:
    """Where one level attempt's boundary scrapes are kept (beside the records file)."""
    folder = records_path.with_name(f"{records_path.stem}-scrapes")
    return folder / f"level-{index}-attempt-{attempt}.json.gz"


def scrapes_write(path: Path, scrapes: LevelScrapes) -> None:
    """Write atomically: an audit never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(scrapes).encode("utf-8")))
    tmp.replace(path)


def scrapes_read(path: Path) -> dict[str, Any] | None:
    """The kept scrapes, or None when none were kept (a level measured before they were).
    As read: the audit checks their shape (``LevelScrapes``) as it parses them."""
    try:
        data = json.loads(gzip.decompress(path.read_bytes()))
    except FileNotFoundError:
        return None
    return data if isinstance(data, dict) else None


def scrapes_keeper(records_path: Path, *, attempt: int) -> Keep:
    """The `keep` callback of hosts.telemetry.levels.LevelServerMetrics for one sweep run."""

    async def keep(index: int, scrapes: LevelScrapes) -> None:
        path = scrapes_path(records_path, index=index, attempt=attempt)
        await asyncio.to_thread(scrapes_write, path, scrapes)

    return keep
