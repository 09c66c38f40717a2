"""Read-side queries for sweeps and experiments."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from benchmarks.models import Experiment, Sweep, SweepLevel, SweepSample


def sweep_list() -> QuerySet[Sweep]:
    return Sweep.objects.select_related("profile", "instance")


def sweep_detail(*, sweep_id: int) -> Sweep | None:
    return Sweep.objects.select_related("profile", "instance").filter(pk=sweep_id).first()


def sweep_levels(*, sweep_id: int) -> list[SweepLevel]:
    return list(SweepLevel.objects.filter(sweep_id=sweep_id).order_by("index"))


def level_as_dict(level: SweepLevel) -> dict[str, Any]:
    return {
        "index": level.index,
        "concurrency": level.concurrency,
        "state": level.state,
        "output_tok_s": level.output_tok_s,
        "steady_output_tok_s": level.steady_output_tok_s,
        "ttft_p50_ms": level.ttft_p50_ms,
        "itl_p50_ms": level.itl_p50_ms,
        "requests_ok": level.requests_ok,
        "requests_failed": level.requests_failed,
    }


def sweep_snapshot(*, sweep_id: int, max_samples: int = 3600) -> dict[str, Any] | None:
    """State so far, for a viewer who joins mid-run (then the live events follow)."""
    sweep = sweep_detail(sweep_id=sweep_id)
    if sweep is None:
        return None
    samples = list(
        SweepSample.objects.filter(sweep_id=sweep_id)
        .order_by("-t")
        .values("level_index", "t", "data")[:max_samples]
    )
    samples.reverse()
    return {
        "sweep": {
            "id": sweep.pk,
            "state": sweep.state,
            "levels": sweep.levels,
            "current_level_index": sweep.current_level_index,
            "reason": sweep.reason,
        },
        "levels": [level_as_dict(level) for level in sweep_levels(sweep_id=sweep_id)],
        "samples": [{"level_index": s["level_index"], "t": s["t"], **s["data"]} for s in samples],
    }


def experiment_list() -> QuerySet[Experiment]:
    return Experiment.objects.prefetch_related("arms__profile")
