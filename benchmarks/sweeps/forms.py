"""The New sweep form: parses what a person types; the rules live in services.sweep_create."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, TypedDict

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from benchlib.json_types import JsonObject
from benchlib.loadgen.goodput import SLO_FIGURES
from benchlib.loadgen.settings import LoadSettings, flat_fields
from benchlib.loadgen.settings_fields import UNSET, number_kind, option
from benchmarks.sweeps import selectors, services
from benchmarks.sweeps.models import DEFAULT_LEVELS
from benchmarks.sweeps.traces import trace_list
from hosts.models import ServerInstance, ServerProfile

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo


def load_form_field(field: FieldInfo) -> forms.Field:
    """A load setting as a form field: its label, help, choices and initial from the model;
    blank is the setting's default (the service's rule), bounds the service's too."""
    opt = option(field)
    default = field.get_default()
    initial = default if opt.form_initial is UNSET else opt.form_initial
    common: dict[str, Any] = {"required": False, "help_text": field.description or ""}
    if opt.label:
        common["label"] = opt.label
    if field.annotation is bool:
        return forms.BooleanField(initial=initial, **common)
    if opt.choices:
        return forms.ChoiceField(choices=list(opt.choices), initial=initial, **common)
    kind = number_kind(field)
    if kind == "int":
        return forms.IntegerField(initial=initial, **common)
    if kind == "float":
        return forms.FloatField(initial=initial, **common)
    return forms.CharField(initial=initial or None, **common)  # the rates, the model name


class InstanceChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: ServerInstance) -> str:
        return f"{obj.profile.name} · #{obj.pk} on {obj.host.name}:{obj.port}"


class PlanKwargs(TypedDict):
    """A load plan as the form cleaned it, the keyword arguments the create services take:
    levels, the load as given (every setting, None where left empty; the service checks it and
    fills in the defaults), notes and tags."""

    levels: list[int]
    load: JsonObject
    notes: str
    tags: list[str]


class LoadPlanForm(forms.Form):
    """What sweeps and experiments share: the levels, the load settings, notes and tags,
    and how the service's validation errors are shown on the fields."""

    levels = forms.CharField(
        initial=", ".join(str(c) for c in DEFAULT_LEVELS),
        help_text=f"Concurrency levels, comma separated (1 to {services.MAX_CONCURRENCY}); "
        "with several request rates, one: the cap on requests in flight",
    )
    notes = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    tags = forms.CharField(required=False, help_text="Comma separated")

    # The load settings' fields, from the one model (benchlib.loadgen.settings).
    LOAD_FIELDS = tuple(n for n in LoadSettings.model_fields if n != "slo")
    SLO_FIELDS = tuple(n for n, _ in flat_fields() if n.startswith("slo_"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        load_fields = {name: load_form_field(field) for name, field in flat_fields()}
        # after levels, before notes and tags (field_order of subclasses places them again)
        head = {k: v for k, v in self.fields.items() if k not in ("notes", "tags")}
        tail = {k: v for k, v in self.fields.items() if k in ("notes", "tags")}
        self.fields = {**head, **load_fields, **tail}
        self.fields["trace"] = self._trace_field(self.fields["trace"])
        if self.field_order is not None:
            self.order_fields(self.field_order)

    def limit_choices(self, name: str, queryset: QuerySet[Any]) -> None:
        """Offer a model choice field the rows its selector gives now (per form, so a row added
        since start-up shows)."""
        field = self.fields[name]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = queryset

    @staticmethod
    def _trace_field(generated: forms.Field) -> forms.Field:
        """The trace setting as a choice of the traces in the folder (uploaded or put there),
        each with its detected format; its label and help from the settings model."""
        choices = [("", "none: no replay")]
        choices += [(t.name, f"{t.name} ({t.format})") for t in trace_list()]
        return forms.ChoiceField(
            choices=choices,
            required=False,
            label=generated.label,
            help_text=f"{generated.help_text}. Add one on the Traces page.",
        )

    def clean_levels(self) -> list[int]:
        text: str = self.cleaned_data["levels"]
        parts = [p for p in re.split(r"[,\s]+", text) if p]
        if not parts or not all(p.isdigit() for p in parts):
            raise ValidationError("Use whole numbers separated by commas, e.g. 1, 2, 5, 10.")
        return [int(p) for p in parts]

    def clean_request_rate(self) -> float | list[float] | None:
        """Numbers only; their range and how they go with the levels are the service's rules."""
        parts = [p for p in re.split(r"[,\s]+", self.cleaned_data["request_rate"]) if p]
        try:
            rates = [float(p) for p in parts]
        except ValueError:
            raise ValidationError("Use numbers separated by commas, e.g. 0.5, 1, 2, 4.") from None
        if not rates:
            return None
        return rates[0] if len(rates) == 1 else rates

    def clean_tags(self) -> list[str]:
        return [t.strip() for t in self.cleaned_data["tags"].split(",") if t.strip()]

    def plan_kwargs(self) -> PlanKwargs:
        data = self.cleaned_data
        load: JsonObject = {name: data.get(name) for name in self.LOAD_FIELDS}
        slo = {name[4:]: data.get(name) for name in self.SLO_FIELDS}
        if any(slo.get(figure) is not None for figure in SLO_FIGURES):
            # the limits as given (None: no limit); the rest only when set
            load["slo"] = {k: v for k, v in slo.items() if k in SLO_FIGURES or v not in (None, "")}
        return {
            "levels": data["levels"],
            "load": load,
            "notes": data["notes"],
            "tags": data["tags"],
        }

    def add_service_error(self, error: ValidationError) -> None:
        """Show the service's errors next to the fields they name."""
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for field, messages in error.message_dict.items():
            if field == "slo":
                field = "slo_ttft_ms"
            self.add_error(field if field in self.fields else None, messages)


class SweepCreateKwargs(PlanKwargs):
    """What ``SweepForm`` hands ``services.sweep_create`` (beside the user)."""

    instance: ServerInstance | None
    endpoint: ServerProfile | None
    name: str


class SweepForm(LoadPlanForm):
    instance = InstanceChoiceField(
        queryset=ServerInstance.objects.none(),
        label="Target server",
        empty_label="Choose a ready server",
        required=False,
    )
    endpoint = forms.ModelChoiceField(
        queryset=ServerProfile.objects.none(),
        required=False,
        label="Or an endpoint",
        empty_label="None (sweep the server chosen above)",
        help_text="A server running outside specdash, registered as an endpoint profile: "
        "swept by its URL, never started or stopped",
    )
    name = forms.CharField(max_length=200, required=False)

    field_order = ["instance", "endpoint", "name", "levels"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit_choices("instance", selectors.sweep_target_instances())
        self.limit_choices("endpoint", selectors.sweep_target_endpoints())

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if (data.get("instance") is None) == (data.get("endpoint") is None):
            self.add_error("instance", "Choose a ready server or an endpoint (one of them).")
        return data

    def service_kwargs(self) -> SweepCreateKwargs:
        data = self.cleaned_data
        return {
            "instance": data["instance"],
            "endpoint": data["endpoint"],
            "name": data["name"],
            **self.plan_kwargs(),
        }


class TraceUploadForm(forms.Form):
    """A trace file to store in the trace folder (traces.trace_upload checks it)."""

    file = forms.FileField(help_text="Mooncake JSON lines, BurstGPT CSV or specdash's JSON lines")
    name = forms.CharField(
        required=False,
        help_text="The name to store it under (empty: the file's own name)",
    )

    def trace_name(self) -> str:
        return str(self.cleaned_data.get("name") or self.cleaned_data["file"].name)

    def add_service_error(self, error: ValidationError) -> None:
        for field, messages in error.message_dict.items():
            self.add_error("file" if field in ("trace", "file") else "name", messages)
