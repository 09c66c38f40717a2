from __future__ import annotations

import json
from typing import IO, Any


class TruthLog:
    """Per-request ground truth as JSON lines, flushed after every line."""

    def __init__(self, path: str | None) -> None:
        self._file: IO[str] | None = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
