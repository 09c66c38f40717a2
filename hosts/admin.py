from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from hosts import presets
from hosts.lifecycle.probe import PROBE_TIMEOUT_S, ProbeReport, host_probe_many
from hosts.models import Container, Host, InstanceEvent, ServerInstance, ServerProfile

# Each test connection runs at once, bounded by PROBE_TIMEOUT_S in all: a few at a time.
MAX_PROBES = 10


def _probe_results(
    modeladmin: admin.ModelAdmin,  # type: ignore[type-arg]
    request: HttpRequest,
    targets: list[tuple[Host, Container | None]],
) -> TemplateResponse | None:
    # Synchronous on purpose: a read-only diagnostic with a hard time limit, whose answer the
    # staff member is waiting for on this page; it also works when no job worker runs,
    # which is when a connection test is most wanted.
    if len(targets) > MAX_PROBES:
        modeladmin.message_user(
            request, f"Test at most {MAX_PROBES} at a time.", level=messages.ERROR
        )
        return None
    reports: list[ProbeReport] = host_probe_many(targets=targets)
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Test connection",
        "opts": modeladmin.model._meta,
        "reports": reports,
        "timeout": PROBE_TIMEOUT_S,
    }
    return TemplateResponse(request, "admin/hosts/probe_results.html", context)


@admin.action(description="Test connection (hostname, user, GPUs, engines)", permissions=["change"])
def test_host_connection(
    modeladmin: admin.ModelAdmin,  # type: ignore[type-arg]
    request: HttpRequest,
    queryset: QuerySet[Host],
) -> TemplateResponse | None:
    return _probe_results(modeladmin, request, [(host, None) for host in queryset])


@admin.action(description="Test connection (hostname, user, GPUs, engines)", permissions=["change"])
def test_container_connection(
    modeladmin: admin.ModelAdmin,  # type: ignore[type-arg]
    request: HttpRequest,
    queryset: QuerySet[Container],
) -> TemplateResponse | None:
    targets: list[tuple[Host, Container | None]] = [
        (c.host, c) for c in queryset.select_related("host")
    ]
    return _probe_results(modeladmin, request, targets)


class ContainerInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Container
    extra = 0


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "kind", "destination", "known_hosts_policy", "updated_at"]
    list_filter = ["kind", "known_hosts_policy"]
    search_fields = ["name", "address", "notes"]
    inlines = [ContainerInline]
    actions = [test_host_connection]
    fieldsets = [
        (None, {"fields": ["name", "kind", "notes"]}),
        (
            "SSH",
            {
                "fields": [
                    "address",
                    "ssh_user",
                    "ssh_port",
                    "identity_file",
                    "known_hosts_policy",
                    "known_hosts_file",
                    "jump_host",
                ]
            },
        ),
        ("Environment", {"fields": ["path_prepend", "command_env"]}),
    ]


@admin.register(Container)
class ContainerAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["__str__", "host", "kind", "ident", "label"]
    list_filter = ["kind", "host"]
    search_fields = ["ident", "label", "host__name"]
    actions = [test_container_connection]


@admin.register(ServerProfile)
class ServerProfileAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "engine", "host", "container", "port", "speculative", "updated_at"]
    list_filter = ["engine", "speculative", "host"]
    search_fields = ["name", "served_model_name", "notes"]
    fieldsets = [
        (None, {"fields": ["name", "engine", "host", "container", "speculative", "tags", "notes"]}),
        (
            "Launch",
            {"fields": ["launch_argv", "env", "workdir", "port", "gpu_ids", "stop_grace_s"]},
        ),
        (
            "Readiness and endpoints",
            {
                "fields": [
                    "readiness_path",
                    "readiness_status",
                    "readiness_timeout_s",
                    "api_host",
                    "openai_base_path",
                    "served_model_name",
                    "metrics_path",
                ]
            },
        ),
    ]

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        # ?engine=vllm on the add page pre-fills that engine's preset.
        initial: dict[str, Any] = dict(super().get_changeform_initial_data(request))
        initial.update(presets.initial_data(str(request.GET.get("engine", "sglang"))))
        return initial


class InstanceEventInline(admin.TabularInline):  # type: ignore[type-arg]
    model = InstanceEvent
    extra = 0
    can_delete = False
    readonly_fields = ["at", "kind", "state", "message", "actor", "data"]


@admin.register(ServerInstance)
class ServerInstanceAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["pk", "profile", "host", "port", "state", "started_by", "created_at"]
    list_filter = ["state", "host", "profile"]
    search_fields = ["run_id", "profile__name"]
    readonly_fields = [f.name for f in ServerInstance._meta.fields]
    inlines = [InstanceEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # instances come from Start, never from a form
