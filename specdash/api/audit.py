"""The audit: stored level summaries and comparisons recomputed from the raw records."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from benchmarks import audit, audit_levels
from benchmarks.audit_report import AuditReportBody
from benchmarks.experiments import selectors as exp_selectors
from benchmarks.sweeps import selectors as bench_selectors
from specdash.api import errors
from specdash.api.auth import requires, viewer
from specdash.api.common import found, responses
from specdash.api.schemas.base import Id

router = Router(tags=["audit"])


class AuditQuery(Schema):
    sweep: Id | None = Field(None, description="Audit one sweep")
    experiment: Id | None = Field(None, description="Audit one experiment and its sweeps")
    all: bool = Field(False, description="Audit every sweep and experiment")


class AuditOut(Schema):
    target: str
    ok: bool = Field(description="True when every stored figure matches its records")
    problems: list[str]
    levels_checked: int
    records_checked: int
    comparisons_checked: int


@router.get("/audit", response=responses({200: AuditOut}), summary="Audit stored figures")
@requires(viewer)
def audit_run(request: HttpRequest, query: Query[AuditQuery]) -> AuditReportBody:
    """Recompute every level summary (counts, tokens, tok/s, percentiles) from the records
    and every comparison (ratios, intervals, crossover, saturation) from those levels;
    ``ok`` is false and ``problems`` lists each disagreement. Give exactly one of
    ``sweep``, ``experiment`` or ``all=true``."""
    chosen = [query.sweep is not None, query.experiment is not None, query.all]
    if sum(chosen) != 1:
        raise errors.ApiError(
            422, errors.VALIDATION, "Give exactly one of sweep, experiment or all=true."
        )
    if query.sweep is not None:
        sweep = found(
            bench_selectors.sweep_detail(sweep_id=query.sweep), f"No sweep #{query.sweep}."
        )
        return audit_levels.audit_sweep(sweep=sweep).as_dict()
    if query.experiment is not None:
        experiment = found(
            exp_selectors.experiment_detail(experiment_id=query.experiment),
            f"No experiment #{query.experiment}.",
        )
        return audit.audit_experiment(experiment=experiment).as_dict()
    return audit.audit_all().as_dict()
