"""Thin views over benchmarks' selectors and services."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    StreamingHttpResponse,
)
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from benchmarks.form_pages import service_form_page
from benchmarks.sweeps import exports, forms, selectors, services, traces
from benchmarks.sweeps.models import Sweep
from benchmarks.sweeps.workload import sweep_workload
from core import roles
from core.http import HtmxHttpRequest


def _sweep_or_404(sweep_id: int) -> Sweep:
    sweep = selectors.sweep_detail(sweep_id=sweep_id)
    if sweep is None:
        raise Http404("No such sweep")
    return sweep


@roles.viewer_required
def sweep_list(request: HttpRequest) -> HttpResponse:
    context = {
        "sweeps": selectors.sweep_list()[:100],
        "can_run_sweeps": roles.can_run_sweeps(request.user),
        "nav": "sweeps",
    }
    return render(request, "benchmarks/sweeps.html", context)


@roles.sweep_operator_required
def sweep_new(request: HttpRequest) -> HttpResponse:
    # ?endpoint=<id>: the servers page's Sweep button on an endpoint profile.
    form = forms.SweepForm(request.POST or None, initial={"endpoint": request.GET.get("endpoint")})
    return service_form_page(
        request,
        form,
        create=lambda: services.sweep_create(**form.service_kwargs(), user=request.user),
        created=lambda sweep: redirect("benchmarks:sweep-detail", sweep_id=sweep.pk),
        template="benchmarks/sweep_new.html",
        context={"nav": "sweeps"},
    )


@roles.viewer_required
def sweep_detail(request: HtmxHttpRequest, sweep_id: int) -> HttpResponse:
    sweep = _sweep_or_404(sweep_id)
    levels = selectors.sweep_level_table(sweep=sweep)
    context = {
        "sweep": sweep,
        "levels": levels,
        "rate_sweep": selectors.sweep_is_rate_sweep(sweep=sweep),
        "workload": sweep_workload(sweep=sweep, levels=levels),
        "progress": selectors.sweep_progress(sweep=sweep, levels=levels),
        "controller_tracks": selectors.sweep_controller_tracks(sweep=sweep, levels=levels),
        "can_run_sweeps": roles.can_run_sweeps(request.user),
        "live_config": {"sweepId": sweep.pk, "wsPath": f"/ws/sweeps/{sweep.pk}/"},
        "nav": "sweeps",
    }
    template = "benchmarks/sweep_detail.html"
    if request.htmx:
        template += "#levels-table"
    return render(request, template, context)


@require_POST
@roles.sweep_operator_required
def sweep_cancel(request: HtmxHttpRequest, sweep_id: int) -> HttpResponse:
    sweep = services.sweep_cancel(sweep=_sweep_or_404(sweep_id), user=request.user)
    if request.htmx:
        context = {"sweep": sweep, "can_run_sweeps": True}
        return render(request, "benchmarks/sweep_detail.html#sweep-actions", context)
    return redirect("benchmarks:sweep-detail", sweep_id=sweep.pk)


@require_POST
@roles.sweep_operator_required
def sweep_resume(request: HttpRequest, sweep_id: int) -> HttpResponse:
    return _interrupted_action(request, sweep_id, services.sweep_resume)


@require_POST
@roles.sweep_operator_required
def sweep_abandon(request: HttpRequest, sweep_id: int) -> HttpResponse:
    return _interrupted_action(request, sweep_id, services.sweep_abandon)


@require_POST
@roles.sweep_operator_required
def sweep_rerun(request: HttpRequest, sweep_id: int) -> HttpResponse:
    try:
        again = services.sweep_rerun(sweep=_sweep_or_404(sweep_id), user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("benchmarks:sweep-detail", sweep_id=sweep_id)
    return redirect("benchmarks:sweep-detail", sweep_id=again.pk)


def _interrupted_action(request: HttpRequest, sweep_id: int, action: Any) -> HttpResponse:
    try:
        action(sweep=_sweep_or_404(sweep_id), user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("benchmarks:sweep-detail", sweep_id=sweep_id)


@roles.viewer_required
def sweep_export_csv(request: HttpRequest, sweep_id: int) -> HttpResponse:
    return exports.levels_csv_response(sweep=_sweep_or_404(sweep_id))


@roles.viewer_required
def sweep_export_json(request: HttpRequest, sweep_id: int) -> HttpResponse:
    return exports.levels_json_response(sweep=_sweep_or_404(sweep_id))


@roles.viewer_required
def sweep_export_records(request: HttpRequest, sweep_id: int) -> StreamingHttpResponse:
    response = exports.records_response(request=request, sweep=_sweep_or_404(sweep_id))
    if response is None:
        raise Http404("This sweep has no request records yet")
    return response


@roles.viewer_required
def trace_list(request: HttpRequest) -> HttpResponse:
    """The traces a sweep can replay, and (for those who may run sweeps) the upload form."""
    form = forms.TraceUploadForm()
    return _trace_page(request, form, status=200)


@require_POST
@roles.sweep_operator_required
def trace_upload(request: HttpRequest) -> HttpResponse:
    form = forms.TraceUploadForm(request.POST, request.FILES)
    if form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            stored = traces.trace_upload(
                user=request.user, name=form.trace_name(), chunks=upload.chunks()
            )
        except ValidationError as exc:
            form.add_service_error(exc)
        else:
            messages.success(
                request,
                f"Stored {stored.name}: {stored.format}, {stored.requests} requests over "
                f"{stored.span_s:.1f} s ({stored.rate:.2f} req/s). Pick it as the trace of a "
                "new sweep or experiment.",
            )
            return redirect("benchmarks:trace-list")
    return _trace_page(request, form, status=400)


def _trace_page(request: HttpRequest, form: forms.TraceUploadForm, *, status: int) -> HttpResponse:
    context = {
        "traces": traces.trace_list(),
        "form": form,
        "limit": settings.SPECDASH_TRACE_MAX_BYTES,
        "can_run_sweeps": roles.can_run_sweeps(request.user),
        "nav": "sweeps",
    }
    return render(request, "benchmarks/traces.html", context, status=status)
