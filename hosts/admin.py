from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from hosts import presets
from hosts.lifecycle.probe import PROBE_TIMEOUT_S, ProbeReport, host_probe_many
from hosts.models import (
    Container,
    Engine,
    Host,
    InstanceEvent,
    ProfileKind,
    ServerInstance,
    ServerProfile,
)
from hosts.services import profile_kind_switch_check

if TYPE_CHECKING:
    from django.contrib.admin.filters import _ListFilterChoices
    from django.contrib.admin.options import _FieldsetSpec
    from django.contrib.admin.views.main import ChangeList

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


# Hosts and containers (each tested through the whole chain up to it) share the label.
connection_test_action = admin.action(
    description="Test connection (hostname, user, GPUs, engines)", permissions=["change"]
)


@connection_test_action
def test_host_connection(
    modeladmin: admin.ModelAdmin,  # type: ignore[type-arg]
    request: HttpRequest,
    queryset: QuerySet[Host],
) -> TemplateResponse | None:
    return _probe_results(modeladmin, request, [(host, None) for host in queryset])


@connection_test_action
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


# The fields an engine's preset sets, swapped in place when the engine is chosen.
PRESET_FIELDS = ("launch_argv", "port", "readiness_path", "metrics_path")


PROFILE_FIELDSETS: _FieldsetSpec = [
    (
        None,
        {
            "fields": [
                "name",
                "kind",
                "engine",
                "host",
                "container",
                "speculative",
                "tags",
                "notes",
                "variant_of",
            ]
        },
    ),
    (
        "Endpoint: a server specdash did not start (endpoint profiles only)",
        {"fields": ["base_url", "metrics_url", "api_kind"]},
    ),
    (
        "Launch (managed profiles only)",
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


# The fields only one kind uses, with their empty values. Switching a filled form's Kind drops
# the other kind's (a notice names them) rather than refusing the save: a staff member who
# chose Endpoint on an add form that opened with SGLang's preset meant "no launch command".
LAUNCH_ONLY_FIELDS: Mapping[str, object] = {
    "launch_argv": [], "env": {}, "workdir": "", "gpu_ids": [], "container": None,
}  # fmt: skip
ENDPOINT_ONLY_FIELDS: Mapping[str, object] = {"base_url": "", "metrics_url": "", "api_kind": ""}


class ServerProfileForm(forms.ModelForm):  # type: ignore[type-arg]
    # Labels of the fields the last clean() emptied because the Kind does not use them.
    dropped: list[str]

    def clean(self) -> dict[str, object]:
        cleaned: dict[str, object] = super().clean() or {}
        if kind := cleaned.get("kind"):
            # The Kind field's cleaned value: one of ProfileKind's strings.
            profile_kind_switch_check(profile=self.instance, kind=str(kind))
        unused = (
            LAUNCH_ONLY_FIELDS
            if cleaned.get("kind") == ProfileKind.ENDPOINT
            else ENDPOINT_ONLY_FIELDS
        )
        self.dropped = []
        for name, empty in unused.items():
            if cleaned.get(name) not in (None, "", [], {}):
                cleaned[name] = empty
                self.dropped.append(str(self.fields[name].label))
        return cleaned

    def dropped_notice(self) -> str:
        """What the save left out and why, or "" when nothing was."""
        if not getattr(self, "dropped", None):
            return ""
        fields = ", ".join(self.dropped)
        if self.cleaned_data.get("kind") == ProfileKind.ENDPOINT:
            return (
                f"Saved as an endpoint profile: cleared {fields}, which only a managed profile "
                "uses (specdash never starts an endpoint; its port is the base URL's)."
            )
        return (
            f"Saved as a managed profile: cleared {fields}, which only an endpoint profile uses "
            "(specdash starts this server with its launch command and reaches it on its port)."
        )

    class Meta:
        model = ServerProfile
        fields = [str(name) for _, options in PROFILE_FIELDSETS for name in options["fields"]]
        help_texts = {
            "engine": "Choosing an engine loads its preset (launch command, port, paths) while "
            "the launch command is still a preset's; an edited command is kept.",
            "launch_argv": 'A JSON list, e.g. ["python3", "-m", ...]. Replace the presets\' '
            "placeholders (MODEL, MODEL.gguf, DRAFT.gguf) before saving; {api_host} becomes the "
            "address in API host at start. A --port in it must be the Port field's.",
            "port": "The port the server listens on and the dashboard connects to (the "
            "dashboard itself serves on 8000 by default: use another on the same machine).",
            "gpu_ids": "GPU indices as nvidia-smi numbers them on this host, as a JSON list "
            "(e.g. [0, 1]; [] for a CPU server). The server gets CUDA_VISIBLE_DEVICES=0,1 unless "
            "Env sets it, and a start is refused while another instance holds one of them.",
            "kind": "Managed: specdash starts, watches and stops the server. Endpoint: the server "
            "runs outside specdash (by hand, systemd, a container, a Kubernetes service); "
            "specdash sweeps it by its base URL and never starts or stops it. Saving with "
            "the other kind clears the fields only the previous kind uses (a notice names them).",
            "api_host": "The address the dashboard connects to, and what {api_host} in the launch "
            "command binds to. Blank: the SSH host's address (127.0.0.1 for a local host). A "
            "remote server bound to 127.0.0.1 cannot be reached from the dashboard; a container "
            "with its own IP needs that IP here.",
        }


class VariantFilter(admin.SimpleListFilter):
    """A parameter matrix's variants are hidden from the list unless asked for."""

    title = "matrix variants"
    parameter_name = "variants"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("shown", "Shown"), ("only", "Only variants")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "shown":
            return queryset
        if self.value() == "only":
            return queryset.filter(variant_of__isnull=False)
        return queryset.filter(variant_of__isnull=True)

    def choices(self, changelist: ChangeList) -> Iterator[_ListFilterChoices]:
        # The default is not "All" here: it hides the variants, and says so.
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "Hidden",
        }
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == str(lookup),
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }


@admin.register(ServerProfile)
class ServerProfileAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = ServerProfileForm
    list_display = [
        "name", "kind", "engine", "host", "container", "port", "speculative", "variant_of",
        "updated_at",
    ]  # fmt: skip
    list_filter = [VariantFilter, "kind", "engine", "speculative", "host"]
    search_fields = ["name", "served_model_name", "notes"]
    fieldsets = PROFILE_FIELDSETS

    def save_model(self, request: HttpRequest, obj: ServerProfile, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if notice := form.dropped_notice():
            self.message_user(request, notice, level=messages.WARNING)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        # ?engine=vllm on the add page pre-fills that engine's preset.
        initial: dict[str, Any] = dict(super().get_changeform_initial_data(request))
        initial.update(presets.initial_data(str(request.GET.get("engine", "sglang"))))
        if request.GET.get("kind") == "endpoint":
            # ?kind=endpoint: a server already running; no launch command or port to fill.
            initial.update(kind="endpoint", launch_argv=[], port=None, env={})
        return initial

    def get_form(
        self, request: HttpRequest, obj: ServerProfile | None = None, change: bool = False,
        **kwargs: Any,
    ) -> type[forms.ModelForm]:  # type: ignore[type-arg]  # fmt: skip
        form: type[forms.ModelForm] = super().get_form(request, obj, change, **kwargs)  # type: ignore[type-arg]
        if "engine" in form.base_fields:
            form.base_fields["engine"].widget.attrs.update(
                {
                    "hx-get": reverse("admin:hosts_serverprofile_preset"),
                    "hx-trigger": "change",
                    "hx-include": "[name=launch_argv],[name=kind]",
                    "hx-swap": "none",
                }
            )
        return form

    def get_urls(self) -> list[URLPattern]:
        preset = path(
            "preset/",
            self.admin_site.admin_view(self.preset_view),
            name="hosts_serverprofile_preset",
        )
        return [preset, *super().get_urls()]

    def preset_view(self, request: HttpRequest) -> HttpResponse:
        """The chosen engine's preset as out-of-band swaps of the form's fields, when the launch
        command is still a preset's (or empty); otherwise only a note that it was kept."""
        if not (self.has_add_permission(request) or self.has_change_permission(request)):
            raise PermissionDenied
        engine = request.GET.get("engine", "")
        if engine not in Engine.values:
            return HttpResponseBadRequest("Unknown engine.")
        label = Engine(engine).label
        try:
            current = json.loads(request.GET.get("launch_argv") or "[]")
        except ValueError:
            current = None
        fields: list[str] = []
        if request.GET.get("kind") == "endpoint":
            # A server already running: no launch command or port to load from a preset.
            note = f"{label} endpoint: its server runs outside specdash; no launch command."
        elif isinstance(current, list) and presets.is_preset_argv(current):
            form = self.get_form(request)(initial=presets.initial_data(engine))
            fields = [form[name].as_widget(attrs={"hx-swap-oob": "true"}) for name in PRESET_FIELDS]
            placeholders = presets.placeholders_in(presets.preset_for(engine).argv_template)
            note = f"Loaded the {label} preset." + (
                f" Replace {', '.join(placeholders)} in the launch command." if placeholders else ""
            )
        else:
            note = (
                f"Kept your edited launch command and port. To load the {label} preset, empty "
                "the launch command and choose the engine again."
            )
        return render(
            request, "admin/hosts/serverprofile/_preset.html", {"note": note, "fields": fields}
        )


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
