"""The audit: every stored figure recomputed from the raw records and compared.

For a sweep, each level against its records and kept server scrapes (audit_levels.py); for an
experiment, its sweeps, then its stored comparison against one rebuilt from the same levels and
records (audit_comparison.py); both fill one report (audit_report.py). This module runs them
together and keeps the outcome on the audited rows.

Run at the end of a sweep and of an experiment and by ``manage.py specdash audit`` (outcome kept
on the row, ``*_store``, which the pages show without rerunning it) and by ``GET /api/v1/audit``.
It reads both slices, so it sits above them: their jobs' stores run it at the end through the
``*_store`` functions ``BenchmarksConfig.ready`` hands them, and a comparison of picked sweeps
reads their kept outcomes through ``sweeps/audit_outcomes.py``.
"""

from __future__ import annotations

from django.utils import timezone

from benchmarks import audit_comparison, audit_levels
from benchmarks.audit_report import AuditReport, AuditReportBody
from benchmarks.experiments.models import Experiment
from benchmarks.sweeps.models import Sweep
from benchmarks.sweeps.recordfile import records_read_once


def audit_experiment(*, experiment: Experiment) -> AuditReport:
    report = AuditReport(target=f"experiment #{experiment.pk}")
    # Each sweep's file is read a level at a time for its levels' summaries, then once into
    # columns for the comparison's rebuild.
    with records_read_once():
        for sweep in Sweep.objects.filter(experiment_step__experiment=experiment).order_by("pk"):
            report.extend(audit_levels.audit_sweep(sweep=sweep))
        report.extend(audit_comparison.audit_comparison(experiment=experiment))
    return report


def audit_sweeps(*, sweeps: list[Sweep]) -> AuditReport:
    """Several sweeps (a comparison of picked sweeps): each one's levels and records."""
    report = AuditReport(target="sweeps " + ", ".join(f"#{s.pk}" for s in sweeps))
    for sweep in sweeps:
        report.extend(audit_levels.audit_sweep(sweep=sweep))
    return report


class StoredAudit(AuditReportBody):
    """What an audited sweep or experiment keeps in its ``audit`` field."""

    checked_at: str  # ISO 8601


def stored_outcome(report: AuditReport) -> StoredAudit:
    """What is kept of an audit on the audited row: the report and when it ran."""
    return {**report.as_dict(), "checked_at": timezone.now().isoformat()}


def audit_sweep_store(*, sweep_id: int) -> AuditReport:
    """Audit one sweep and keep the outcome on it, where its pages read it."""
    sweep = Sweep.objects.get(pk=sweep_id)
    report = audit_levels.audit_sweep(sweep=sweep)
    Sweep.objects.filter(pk=sweep_id).update(audit=stored_outcome(report))
    return report


def audit_experiment_store(*, experiment_id: int) -> AuditReport:
    """Audit an experiment (each sweep's outcome kept on the sweep, the whole on the
    experiment), where the comparison page and the HTML report read it."""
    experiment = Experiment.objects.get(pk=experiment_id)
    report = AuditReport(target=f"experiment #{experiment.pk}")
    for sweep in Sweep.objects.filter(experiment_step__experiment=experiment).order_by("pk"):
        report.extend(audit_sweep_store(sweep_id=sweep.pk))
    report.extend(audit_comparison.audit_comparison(experiment=experiment))
    Experiment.objects.filter(pk=experiment_id).update(audit=stored_outcome(report))
    return report


def audit_all_store() -> AuditReport:
    """Every sweep and experiment audited, each outcome kept on its row."""
    report = AuditReport(target="everything")
    audited: set[int] = set()
    for experiment_id in Experiment.objects.order_by("pk").values_list("pk", flat=True):
        report.extend(audit_experiment_store(experiment_id=experiment_id))
        audited.update(
            Sweep.objects.filter(experiment_step__experiment_id=experiment_id).values_list(
                "pk", flat=True
            )
        )
    for sweep_id in Sweep.objects.order_by("pk").values_list("pk", flat=True):
        if sweep_id not in audited:
            report.extend(audit_sweep_store(sweep_id=sweep_id))
    return report


def audit_all() -> AuditReport:
    report = AuditReport(target="everything")
    for sweep in Sweep.objects.order_by("pk"):
        report.extend(audit_levels.audit_sweep(sweep=sweep))
    for experiment in Experiment.objects.order_by("pk"):
        report.extend(audit_comparison.audit_comparison(experiment=experiment))
    return report
