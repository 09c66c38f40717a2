"""Thin views of experiments, comparisons and a profile's history."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.text import slugify
from django.views.decorators.http import require_POST

from benchlib.json_types import PlotlyFigure
from benchmarks.controller_report import ControllerSection
from benchmarks.experiments import (
    figures,
    forms,
    matrix,
    report,
    selectors,
    services,
    stored,
    tuning,
)
from benchmarks.experiments.history import history_build, history_groups
from benchmarks.experiments.models import Experiment, ExperimentArm, ExperimentState, ExperimentStep
from benchmarks.experiments.selectors import StepRow
from benchmarks.form_pages import service_form_page
from benchmarks.phases import comparison_phases
from benchmarks.sweeps.audit_outcomes import stored_audit_of_sweeps
from benchmarks.sweeps.models import Sweep
from core import roles
from core.http import HtmxHttpRequest
from hosts.models import ServerInstance

if TYPE_CHECKING:
    from benchmarks.experiments.builds import StoredComparison
    from benchmarks.experiments.comparison import Comparison
    from benchmarks.experiments.report import ReportContext
    from benchmarks.experiments.schedule import ScheduleReport
    from benchmarks.experiments.verdicts import VerdictEntry
    from benchmarks.phases import PhaseBlocks


def can_run_experiments(user: Any) -> bool:
    """Experiments start and stop servers and launch sweeps: both permissions."""
    return roles.can_operate(user) and roles.can_run_sweeps(user)


experiment_operator_required = roles.require(can_run_experiments)


def _experiment_or_404(experiment_id: int) -> Experiment:
    experiment = selectors.experiment_detail(experiment_id=experiment_id)
    if experiment is None:
        raise Http404("No such experiment")
    return experiment


def _experiment_comparison(experiment: Experiment) -> StoredComparison:
    return stored.experiment_comparison(experiment=experiment)


_RATE_SWEEPS = (
    "a rate sweep cannot be compared: comparisons pair levels by concurrency, and a rate "
    "sweep's levels all run under one concurrency cap."
)


def _picked_sweeps(request: HttpRequest) -> list[Sweep]:
    ids = forms.parse_sweep_ids(request.GET.getlist("sweeps"))
    reference = forms.parse_id(request.GET.get("reference", ""))
    if reference is not None and reference in ids:
        ids.remove(reference)
        ids.insert(0, reference)
    sweeps = selectors.sweeps_by_ids(sweep_ids=ids)
    if len(sweeps) < 2:
        raise Http404("Pick two or more sweeps")
    if selectors.rate_sweep_ids(sweeps=sweeps):
        raise Http404(_RATE_SWEEPS)
    return sweeps


def _picked_sweeps_comparison(request: HttpRequest) -> tuple[Comparison, list[int]]:
    sweeps = _picked_sweeps(request)
    return stored.sweeps_comparison(sweeps=sweeps), [s.pk for s in sweeps]


@experiment_operator_required
def experiment_new(request: HttpRequest) -> HttpResponse:
    form = forms.ExperimentForm(request.POST or None)
    return service_form_page(
        request,
        form,
        create=lambda: services.experiment_create(**form.service_kwargs(), user=request.user),
        created=lambda experiment: redirect(
            "benchmarks:experiment-detail", experiment_id=experiment.pk
        ),
        template="benchmarks/experiment_new.html",
        context={"nav": "experiments"},
    )


@experiment_operator_required
def experiment_matrix(request: HttpRequest) -> HttpResponse:
    """A parameter matrix: "Preview" shows the variants the axes expand to (nothing saved),
    "Launch" creates them and queues the experiment; errors keep what was typed."""
    form = forms.MatrixForm(request.POST or None)
    variants: list[matrix.VariantSpec] = []
    if request.method == "POST" and form.is_valid():
        try:
            if "preview" in request.POST:
                variants = matrix.matrix_preview(**form.preview_kwargs(), user=request.user)
            else:
                experiment = tuning.matrix_create(**form.service_kwargs(), user=request.user)
                return redirect("benchmarks:experiment-detail", experiment_id=experiment.pk)
        except ValidationError as exc:
            form.add_service_error(exc)
    status = 400 if form.is_bound and form.errors else 200
    context = {"form": form, "variants": variants, "nav": "experiments"}
    return render(request, "benchmarks/experiment_matrix.html", context, status=status)


@require_POST
@experiment_operator_required
def experiment_verify(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """Queue the verification of this experiment's speculation schedule (as
    POST /api/v1/experiments/{id}/verify); errors go back to its comparison page."""
    experiment = _experiment_or_404(experiment_id)
    form = forms.VerifyForm(request.POST)
    try:
        if not form.is_valid():
            raise ValidationError([f"{k}: {e}" for k, es in form.errors.items() for e in es])
        follow_up = tuning.verification_create(
            experiment=experiment, repeats=form.cleaned_data["repeats"], user=request.user
        )
    except ValidationError as exc:
        messages.error(request, "Not verified: " + "; ".join(exc.messages))
        return redirect("benchmarks:experiment-comparison", experiment_id=experiment_id)
    messages.success(request, f"Verification of experiment #{experiment_id}'s schedule queued.")
    return redirect("benchmarks:experiment-detail", experiment_id=follow_up.pk)


class LiveConfig(TypedDict):
    """What the page's script reads (``experiment-config``) to join the experiment's feed."""

    experimentId: int
    wsPath: str


class ExperimentDetailContext(TypedDict):
    """What ``benchmarks/experiment_detail.html`` reads (the whole page and its live part)."""

    experiment: Experiment
    arms: list[ExperimentArm]
    controller_tracks: list[ControllerSection]
    steps: list[ExperimentStep]
    step_rows: list[StepRow]
    current: StepRow | None
    verdicts: list[VerdictEntry]  # the stored comparison's, as ``comparison.py`` builds them
    can_run_experiments: bool
    can_operate: bool
    port_holder: ServerInstance | None
    is_verification: bool
    live_config: LiveConfig
    nav: str


def _detail_context(request: HttpRequest, experiment: Experiment) -> ExperimentDetailContext:
    steps = selectors.experiment_steps(experiment_id=experiment.pk)
    current = selectors.experiment_current_step(steps=steps)
    verdicts = cast("StoredComparison", experiment.comparison or {}).get("verdicts", [])
    return {
        "experiment": experiment,
        "arms": selectors.experiment_arms(experiment_id=experiment.pk),
        "controller_tracks": selectors.experiment_controller_tracks(experiment_id=experiment.pk),
        "steps": steps,
        "step_rows": [selectors.step_as_dict(s) for s in steps],
        "current": selectors.step_as_dict(current) if current is not None else None,
        "verdicts": verdicts,
        "can_run_experiments": can_run_experiments(request.user),
        "can_operate": roles.can_operate(request.user),
        "port_holder": selectors.experiment_port_holder(experiment=experiment)
        if experiment.is_finished
        else None,
        "is_verification": tuning.VERIFY_TAG in (experiment.tags or []),
        "live_config": {
            "experimentId": experiment.pk,
            "wsPath": f"/ws/experiments/{experiment.pk}/",  # benchmarks/routing.py
        },
        "nav": "experiments",
    }


@roles.viewer_required
def experiment_detail(request: HtmxHttpRequest, experiment_id: int) -> HttpResponse:
    experiment = _experiment_or_404(experiment_id)
    template = "benchmarks/experiment_detail.html"
    if request.htmx:
        template += "#experiment-live"
    return render(request, template, _detail_context(request, experiment))


@require_POST
@experiment_operator_required
def experiment_cancel(request: HtmxHttpRequest, experiment_id: int) -> HttpResponse:
    services.experiment_cancel(experiment=_experiment_or_404(experiment_id), user=request.user)
    return redirect("benchmarks:experiment-detail", experiment_id=experiment_id)


@require_POST
@experiment_operator_required
def experiment_resume(request: HtmxHttpRequest, experiment_id: int) -> HttpResponse:
    try:
        services.experiment_resume(experiment=_experiment_or_404(experiment_id), user=request.user)
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    return redirect("benchmarks:experiment-detail", experiment_id=experiment_id)


@require_POST
@experiment_operator_required
def experiment_rerun(request: HtmxHttpRequest, experiment_id: int) -> HttpResponse:
    try:
        again = services.experiment_rerun(
            experiment=_experiment_or_404(experiment_id), user=request.user
        )
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
        return redirect("benchmarks:experiment-detail", experiment_id=experiment_id)
    return redirect("benchmarks:experiment-detail", experiment_id=again.pk)


class ComparisonPageContext(TypedDict):
    """The comparison page's context (benchmarks/comparison.html): an experiment's comparison
    or picked sweeps'; the experiment's own keys only on an experiment's page."""

    comparison: Comparison
    figures: dict[str, PlotlyFigure]
    phases: PhaseBlocks
    nav: str
    title: str
    audit: Mapping[str, object] | None
    csv_url: str
    report_url: str
    experiment: NotRequired[Experiment]
    schedule: NotRequired[ScheduleReport]
    verification: NotRequired[Mapping[str, object]]
    verification_error: NotRequired[str]
    margin_error: NotRequired[str]
    can_verify: NotRequired[bool]
    verify_repeats: NotRequired[int]


def _comparison_context(
    comparison: Comparison,
    *,
    title: str,
    audit: Mapping[str, object] | None,
    csv_url: str,
    report_url: str,
) -> ComparisonPageContext:
    phases = comparison_phases(comparison)
    return {
        "comparison": comparison,
        "figures": figures.comparison_figures(comparison) | phases["ramp_figures"],
        "phases": phases,
        "nav": "experiments",
        "title": title,
        "audit": audit,
        "csv_url": csv_url,
        "report_url": report_url,
    }


@roles.viewer_required
def experiment_comparison(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = _experiment_or_404(experiment_id)
    comparison = _experiment_comparison(experiment)
    schedule = stored.experiment_schedule_report(experiment=experiment)
    context = _comparison_context(
        comparison,
        title=f"{experiment.name}: comparison",
        audit=experiment.audit,
        csv_url=reverse("benchmarks:experiment-comparison-csv", args=[experiment.pk]),
        report_url=reverse("benchmarks:experiment-report", args=[experiment.pk]),
    )
    context["experiment"] = experiment
    context["schedule"] = schedule
    if schedule["available"]:
        context["figures"]["schedule"] = figures.schedule_figure(schedule)
    if tuning.VERIFY_TAG in (experiment.tags or []):
        margin, margin_error = forms.parse_margin(request.GET.get("margin"))
        try:
            context["verification"] = tuning.verification_report(
                experiment=experiment, margin=margin
            )
        except ValidationError as exc:
            context["verification_error"] = "; ".join(exc.messages)
        context["margin_error"] = margin_error
    context["can_verify"] = (
        can_run_experiments(request.user) and experiment.state == ExperimentState.COMPLETED
    )
    context["verify_repeats"] = tuning.verification_repeats(experiment, None)
    return render(request, "benchmarks/comparison.html", context)


def _csv_response(comparison: Comparison, filename: str) -> HttpResponse:
    response = HttpResponse(report.comparison_csv(comparison), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _report_response(
    comparison: Comparison,
    title: str,
    filename: str,
    context: ReportContext | None = None,
) -> HttpResponse:
    html = report.comparison_report_html(comparison, title=title, context=context)
    response = HttpResponse(html, content_type="text/html; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@roles.viewer_required
def experiment_comparison_csv(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = _experiment_or_404(experiment_id)
    return _csv_response(
        _experiment_comparison(experiment), f"experiment-{experiment.pk}-comparison.csv"
    )


@roles.viewer_required
def experiment_report(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = _experiment_or_404(experiment_id)
    name = slugify(experiment.name)[:60] or "experiment"
    # The schedule with each engine's configuration: what a shared report should carry (the
    # one kept when the experiment ended: a GET builds nothing from the records).
    schedule = stored.experiment_schedule_report(experiment=experiment)
    return _report_response(
        _experiment_comparison(experiment),
        f"{experiment.name}: comparison",
        f"experiment-{experiment.pk}-{name}.html",
        {"audit": experiment.audit, "schedule": schedule},
    )


@roles.viewer_required
def compare(request: HttpRequest) -> HttpResponse:
    """Two or more sweeps picked from history; the picker when fewer are given."""
    ids = forms.parse_sweep_ids(request.GET.getlist("sweeps"))
    rate = selectors.rate_sweep_ids(sweeps=selectors.sweeps_by_ids(sweep_ids=ids))
    if len(ids) < 2 or rate:
        error = "Pick two or more sweeps." if request.GET else ""
        if rate:
            error = f"{', '.join(f'#{i}' for i in rate)}: {_RATE_SWEEPS}"
        picker = {
            "sweeps": selectors.comparable_sweeps(),
            "list_limit": selectors.LIST_LIMIT,
            "list_total": selectors.comparable_sweeps_total(),
            "picked": ids,
            "error": error,
            "nav": "experiments",
        }
        return render(request, "benchmarks/comparison_pick.html", picker)
    comparison, used = _picked_sweeps_comparison(request)
    query = urlencode([("sweeps", i) for i in used])
    context = _comparison_context(
        comparison,
        audit=stored_audit_of_sweeps(sweeps=_picked_sweeps(request)),
        title="Comparison of sweeps " + ", ".join(f"#{i}" for i in used),
        csv_url=f"{reverse('benchmarks:compare-csv')}?{query}",
        report_url=f"{reverse('benchmarks:compare-report')}?{query}",
    )
    return render(request, "benchmarks/comparison.html", context)


@roles.viewer_required
def compare_csv(request: HttpRequest) -> HttpResponse:
    comparison, used = _picked_sweeps_comparison(request)
    return _csv_response(comparison, f"comparison-{'-'.join(map(str, used))}.csv")


@roles.viewer_required
def compare_report(request: HttpRequest) -> HttpResponse:
    comparison, used = _picked_sweeps_comparison(request)
    title = "Comparison of sweeps " + ", ".join(f"#{i}" for i in used)
    outcome = stored_audit_of_sweeps(sweeps=_picked_sweeps(request))
    filename = f"comparison-{'-'.join(map(str, used))}.html"
    return _report_response(comparison, title, filename, {"audit": outcome})


@roles.viewer_required
def profile_history(request: HttpRequest, profile_id: int) -> HttpResponse:
    profile = selectors.profile_detail(profile_id=profile_id)
    if profile is None:
        raise Http404("No such profile")
    runs = selectors.profile_history_runs(profile_id=profile_id)
    # Like with like: one load at a time, the latest run's unless ?load= names another.
    groups = history_groups(runs=runs)
    chosen = next((g for g in groups if g["key"] == request.GET.get("load")), None)
    chosen = chosen or (groups[0] if groups else None)
    history = history_build(
        runs=[r for r in runs if chosen is not None and r.load_key == chosen["key"]]
    )
    context = {
        "profile": profile,
        "history": history,
        "load_groups": groups,
        "load_group": chosen,
        "runs_total": len(runs),
        "figure": figures.history_figure(history, profile.name),
        "list_limit": selectors.LIST_LIMIT,
        "list_total": selectors.profile_history_total(profile_id=profile_id),
        "nav": "experiments",
    }
    return render(request, "benchmarks/comparison_history.html", context)


@roles.viewer_required
def experiment_list(request: HttpRequest) -> HttpResponse:
    context = {"experiments": selectors.experiment_list()[:100], "nav": "experiments"}
    return render(request, "benchmarks/experiments.html", context)
