"""A sweep's levels: a concurrency per level and, for open-loop arrivals, a request rate.

A sweep stores what was asked: ``levels`` (concurrencies) and ``load["request_rate"]``, either
one rate (every level at that rate, each level's concurrency capping what is in flight) or a
list of several (a rate sweep: one level per rate under one concurrency cap). The levels they
make are the load generator's own ``level_plan``, the function behind its ``--concurrency`` and
``--request-rate``: one definition for the dashboard, the API and the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError

from benchlib.loadgen import settings, settings_fields
from benchlib.loadgen.level_config import level_plan

MIN_RATE = settings_fields.MIN_RATE
MAX_RATE = settings_fields.MAX_RATE

LevelPlan = list[tuple[int, float | None]]


def clean_request_rate(value: Any) -> float | list[float] | None:
    """None (closed loop), one rate, or several rates (a rate sweep): the load settings' rule
    (benchlib.loadgen.settings). Raises ValidationError."""
    try:
        return settings.clean_request_rate(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def load_rates(load: Mapping[str, object]) -> list[float] | None:
    """The stored request rate(s) as the load generator's list (None: closed loop)."""
    value = load.get("request_rate")
    if value is None:
        return None
    if isinstance(value, list):
        return [float(v) for v in value]
    if not isinstance(value, int | float | str):
        # What float() raised here before the load was typed (a stored rate is a number).
        raise TypeError(f"request_rate {value!r} is not a rate")
    return [float(value)]


def is_rate_sweep(load: Mapping[str, object]) -> bool:
    rates = load_rates(load)
    return rates is not None and len(rates) > 1


def check_levels_with_rates(levels: Sequence[int], load: Mapping[str, object]) -> None:
    """A rate sweep runs under one concurrency cap (pairing lists is for the load generator's
    CLI alone): several rates with several concurrencies is refused, naming the levels."""
    rates = load_rates(load)
    if rates is not None and len(rates) > 1 and len(levels) != 1:
        raise ValidationError(
            {
                "levels": (
                    f"A rate sweep ({len(rates)} request rates) takes one concurrency: the cap "
                    f"on requests in flight at every rate, not {len(levels)} levels."
                )
            }
        )


def sweep_level_plan(levels: Sequence[int], load: Mapping[str, object]) -> LevelPlan:
    """(concurrency, rate) of each level of a sweep, in order."""
    return level_plan(list(levels), load_rates(load))


def level_label(concurrency: int, rate: float | None, *, rate_sweep: bool) -> str:
    """How a level is named to people: its offered rate in a rate sweep, else its C."""
    if rate_sweep and rate is not None:
        return f"{rate:g} req/s"
    return f"C={concurrency}"
