"""Thin views over hosts' selectors and services."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from core import roles
from core.http import HtmxHttpRequest, render_page
from core.jobs.health import WorkerUnavailable
from hosts import selectors, services
from hosts.models import Host, ServerInstance, ServerProfile


@roles.viewer_required
def server_list(request: HtmxHttpRequest) -> HttpResponse:
    context = {
        "profiles": selectors.profiles_with_active_instance(),
        "endpoints": selectors.endpoint_profiles(),
        "instances": selectors.instance_list()[:50],
        "can_operate": roles.can_operate(request.user),
        "can_sweep": roles.can_run_sweeps(request.user),
        "nav": "servers",
    }
    return render_page(request, "hosts/servers.html", context, partial="instance-table")


@roles.viewer_required
def instance_detail(request: HtmxHttpRequest, instance_id: int) -> HttpResponse:
    instance = selectors.instance_detail(instance_id=instance_id)
    if instance is None:
        raise Http404("No such server instance")
    context = {
        "instance": instance,
        "events": selectors.instance_events(instance_id=instance_id),
        "can_operate": roles.can_operate(request.user),
        "nav": "servers",
    }
    # The page swaps its server-rendered part when the instance's state moves on.
    return render_page(request, "hosts/instance_detail.html", context, partial="instance-live")


@require_POST
@roles.operator_required
def profile_start(request: HttpRequest, profile_id: int) -> HttpResponse:
    profile = get_object_or_404(ServerProfile, pk=profile_id)
    try:
        instance = services.instance_start(profile=profile, user=request.user)
    except services.ServerConflict as exc:
        messages.error(request, str(exc))
        return redirect("hosts:server-list")
    except WorkerUnavailable as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("hosts:server-list")
    return redirect("hosts:instance-detail", instance_id=instance.pk)


@require_POST
@roles.operator_required
def instance_stop(request: HttpRequest, instance_id: int) -> HttpResponse:
    instance = get_object_or_404(ServerInstance, pk=instance_id)
    services.instance_stop(instance=instance, user=request.user)
    # ?next=: back to the page that offered the Stop (an experiment's port holder), if local.
    back = request.POST.get("next", "")
    if back and url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(back)
    return redirect("hosts:instance-detail", instance_id=instance.pk)


@require_POST
@roles.operator_required
def instance_kill_holders(request: HttpRequest, instance_id: int) -> HttpResponse:
    instance = get_object_or_404(ServerInstance, pk=instance_id)
    posted = []
    for value in request.POST.getlist("holder"):
        pid_text, _, start_text = value.partition(":")
        if pid_text.isdigit() and start_text.isdigit():
            posted.append({"pid": int(pid_text), "start_time": int(start_text)})
    # The form offers only the listed holders; a value it did not offer (a stale page, a pid
    # typed in) is left out rather than failing the whole choice. The service checks again.
    chosen = services.holders_listed(instance=instance, holders=posted)
    try:
        services.instance_kill_holders(
            instance=instance,
            holders=chosen,
            confirmed=request.POST.get("confirm") == "yes",
            user=request.user,
        )
    except services.KillRefused:
        messages.error(request, "Pick the listed holders to kill and confirm.")
    except services.InvalidTransition as exc:
        messages.error(request, str(exc))
    return redirect("hosts:instance-detail", instance_id=instance.pk)


@require_POST
@roles.viewer_required
def host_test(request: HttpRequest, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_id)
    report = services.host_test_connection(host=host, user=request.user)
    return render(request, "hosts/_probe_report.html", {"report": report, "host": host})
