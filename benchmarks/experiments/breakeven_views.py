"""Thin views of a break-even map: the page (heat map, contour, a placed workload, the
checks), its CSV, and "Verify this prediction" (JSON: the API)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from benchmarks.experiments import breakeven, breakeven_report, forms, selectors
from benchmarks.experiments.views import can_run_experiments, experiment_operator_required
from core import roles


def _map_or_404(experiment_id: int) -> breakeven.MapData:
    experiment = selectors.experiment_detail(experiment_id=experiment_id)
    if experiment is None:
        raise Http404("No such experiment")
    data = breakeven.experiment_map(experiment=experiment)
    if data is None:
        raise Http404("This experiment has no break-even map (yet)")
    return data


def _placement(
    request: HttpRequest, data: breakeven.MapData
) -> tuple[breakeven.Placement | None, str]:
    """The workload named by ?experiment= or ?sweep=, placed; or the reason it is not."""
    experiment_id = forms.parse_id(request.GET.get("experiment", ""))
    sweep_id = forms.parse_id(request.GET.get("sweep", ""))
    if experiment_id is None and sweep_id is None:
        return None, ""
    try:
        return breakeven.placement_source(
            data=data, experiment_id=experiment_id, sweep_id=sweep_id
        ), ""
    except ValidationError as exc:
        return None, "; ".join(exc.messages)


@roles.viewer_required
def breakeven_map(request: HttpRequest, experiment_id: int) -> HttpResponse:
    data = _map_or_404(experiment_id)
    placement, placement_error = _placement(request, data)
    checks = breakeven.map_checks(experiment=data.experiment)
    query = urlencode({k: request.GET[k] for k in ("experiment", "sweep") if k in request.GET})
    context = {
        "experiment": data.experiment,
        "bmap": data.bmap,
        "contour": data.bmap.contour(),
        "placement": placement,
        "placement_error": placement_error,
        "checks": checks,
        "figure": breakeven_report.map_figure(data.bmap, placement),
        "csv_url": reverse("benchmarks:breakeven-csv", args=[experiment_id]) + f"?{query}",
        "json_url": f"/api/v1/experiments/{experiment_id}/breakeven?{query}",
        "can_verify": can_run_experiments(request.user),
        "nav": "experiments",
    }
    return render(request, "benchmarks/breakeven.html", context)


@roles.viewer_required
def breakeven_csv(request: HttpRequest, experiment_id: int) -> HttpResponse:
    data = _map_or_404(experiment_id)
    placement, _ = _placement(request, data)
    response = HttpResponse(breakeven_report.map_csv(data.bmap, placement), content_type="text/csv")
    filename = f"experiment-{experiment_id}-breakeven.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_POST
@experiment_operator_required
def breakeven_verify(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """ "Verify this prediction": queue the real A/B of one placed category; errors go back to
    the map's page."""
    data = _map_or_404(experiment_id)
    back = reverse("benchmarks:breakeven", args=[experiment_id])
    try:
        placement = breakeven.placement_source(
            data=data,
            experiment_id=forms.parse_id(request.POST.get("experiment", "")),
            sweep_id=forms.parse_id(request.POST.get("sweep", "")),
        )
        check = breakeven.check_create(
            data=data,
            placement=placement,
            category=request.POST.get("category", ""),
            user=request.user,
        )
    except ValidationError as exc:
        messages.error(request, "Not verified: " + "; ".join(exc.messages))
        return redirect(back)
    messages.success(
        request, f"Check of {check.category} queued as experiment #{check.verification_id}."
    )
    return redirect("benchmarks:experiment-detail", experiment_id=check.verification_id)
