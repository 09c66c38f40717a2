"""Clean-ups a long-running dashboard process (``serve``, ``jobworker``) runs once as it exits.

Apps register them in ``AppConfig.ready()`` (core imports no other app, as with job handlers);
short commands (migrate, seed_demo, the CLI) never run them, so they cannot disturb a
dashboard running beside them."""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

_HOOKS: list[Callable[[], object]] = []


def on_exit(hook: Callable[[], object]) -> None:
    """Run ``hook`` when a dashboard process exits (once per registration of the function)."""
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def run_exit_hooks() -> None:
    """Run every registered hook; one that fails is logged and does not stop the others."""
    for hook in _HOOKS:
        try:
            hook()
        except Exception:
            log.exception("exit hook %s failed", getattr(hook, "__qualname__", hook))
