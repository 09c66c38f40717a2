from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from hosts import presets
from hosts.models import (
    Container,
    Host,
    InstanceEvent,
    Job,
    ServerInstance,
    ServerProfile,
)


class ContainerInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Container
    extra = 0


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "kind", "destination", "known_hosts_policy", "updated_at"]
    list_filter = ["kind", "known_hosts_policy"]
    search_fields = ["name", "address", "notes"]
    inlines = [ContainerInline]
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


@admin.register(ServerProfile)
class ServerProfileAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "engine", "host", "container", "port", "speculative", "updated_at"]
    list_filter = ["engine", "speculative", "host"]
    search_fields = ["name", "served_model_name", "notes"]
    fieldsets = [
        (None, {"fields": ["name", "engine", "host", "container", "speculative", "tags", "notes"]}),
        ("Launch", {"fields": ["launch_argv", "env", "workdir", "port", "gpu_ids"]}),
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


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["pk", "kind", "state", "lock_key", "worker_id", "created_at", "finished_at"]
    list_filter = ["state", "kind"]
    readonly_fields = [f.name for f in Job._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
