"""A function one part of the app hands to another at start-up, where importing it would run
an arrow the wrong way: ``BenchmarksConfig.ready`` registers the audit (which reads both
slices, so it sits above them) with each slice's job store, which calls it at a run's end."""

from __future__ import annotations

from typing import Generic, TypeVar

F = TypeVar("F")


class Handover(Generic[F]):
    """Holds the function once it is registered; asking for it before then is a wiring bug."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._function: F | None = None

    def register(self, function: F) -> None:
        self._function = function

    def get(self) -> F:
        if self._function is None:
            raise RuntimeError(f"no {self._what} registered (benchmarks registers it when ready)")
        return self._function
