from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class JobContext:
    """What a handler gets: its parameters and a cancel signal it must honour."""

    job_id: int
    kind: str
    params: dict[str, Any]
    worker_id: str
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    async def sleep_or_cancel(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if a cancel arrived meanwhile."""
        try:
            await asyncio.wait_for(self.cancelled.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True


Handler = Callable[[JobContext], Awaitable[dict[str, Any] | None]]
InterruptHook = Callable[[int, dict[str, Any]], None]

_handlers: dict[str, Handler] = {}
_interrupt_hooks: dict[str, InterruptHook] = {}


def job_handler(kind: str) -> Callable[[Handler], Handler]:
    def register(func: Handler) -> Handler:
        _handlers[kind] = func
        return func

    return register


def on_interrupted(kind: str) -> Callable[[InterruptHook], InterruptHook]:
    """Register a sync hook run when a job of this kind is found with an expired lease, so
    the domain objects it drove (a sweep, an instance) show the truth."""

    def register(func: InterruptHook) -> InterruptHook:
        _interrupt_hooks[kind] = func
        return func

    return register


def handler_for(kind: str) -> Handler | None:
    return _handlers.get(kind)


def interrupt_hook_for(kind: str) -> InterruptHook | None:
    return _interrupt_hooks.get(kind)


def load_handlers() -> None:
    """Import the modules that register handlers (kept explicit: no import-time magic)."""
    import benchmarks.jobs  # noqa: F401
    import hosts.lifecycle.jobs  # noqa: F401
