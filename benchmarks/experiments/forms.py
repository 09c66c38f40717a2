"""The New experiment form and the sweep picker: they parse what a person types; the rules
live in benchmarks.experiments.services.experiment_create."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from benchmarks import services as sweep_services
from benchmarks.experiments import selectors, services
from benchmarks.models.experiments import ExperimentOrder
from hosts.models import ServerProfile

DEFAULT_EXPERIMENT_LEVELS = "1, 2, 5, 10, 30, 70, 100, 250"


class ProfileChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: ServerProfile) -> str:
        spec = " · speculative" if obj.speculative else ""
        return f"{obj.name} ({obj.host.name}:{obj.port}{spec})"


def _parse_levels(text: str) -> list[int]:
    parts = [p for p in re.split(r"[,\s]+", text) if p]
    if not parts or not all(p.isdigit() for p in parts):
        raise ValidationError("Use whole numbers separated by commas, e.g. 1, 2, 5, 10.")
    return [int(p) for p in parts]


class ExperimentForm(forms.Form):
    name = forms.CharField(max_length=200, required=False, help_text="Default: A vs B")
    profile_a = ProfileChoiceField(
        queryset=ServerProfile.objects.none(), label="Profile A (reference)"
    )
    profile_b = ProfileChoiceField(queryset=ServerProfile.objects.none(), label="Profile B")
    profile_c = ProfileChoiceField(
        queryset=ServerProfile.objects.none(), label="Profile C", required=False
    )
    profile_d = ProfileChoiceField(
        queryset=ServerProfile.objects.none(), label="Profile D", required=False
    )
    levels = forms.CharField(
        initial=DEFAULT_EXPERIMENT_LEVELS,
        help_text=f"Concurrency levels, comma separated (1 to {sweep_services.MAX_CONCURRENCY})",
    )
    requests_per_level = forms.IntegerField(
        required=False, initial=100, help_text="Or leave empty and give a duration"
    )
    duration = forms.FloatField(required=False, label="Duration per level (s)")
    warmup_requests = forms.IntegerField(initial=0, required=False, label="Warm-up requests")
    input_tokens = forms.IntegerField(initial=128)
    max_tokens = forms.IntegerField(initial=128, label="Max output tokens")
    api = forms.ChoiceField(choices=[(a, a) for a in sweep_services.APIS], initial="completions")
    ignore_eos = forms.BooleanField(required=False, initial=True, label="Ignore EOS")
    temperature = forms.FloatField(required=False)
    repeats = forms.IntegerField(
        initial=1, min_value=1, max_value=services.MAX_REPEATS, help_text="Sweeps per profile"
    )
    order = forms.ChoiceField(choices=ExperimentOrder.choices, initial=ExperimentOrder.SEQUENTIAL)
    continue_on_start_failure = forms.BooleanField(
        required=False,
        initial=True,
        label="Continue when a profile fails to start",
        help_text="Otherwise the experiment stops at the first failed start",
    )
    check_output_equivalence = forms.BooleanField(
        required=False,
        label="Check output equivalence",
        help_text="Send a few fixed prompts greedily to each profile and compare the outputs",
    )
    notes = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    tags = forms.CharField(required=False, help_text="Comma separated")

    PROFILE_FIELDS = ("profile_a", "profile_b", "profile_c", "profile_d")
    LOAD_FIELDS = (
        "requests_per_level",
        "duration",
        "warmup_requests",
        "input_tokens",
        "max_tokens",
        "api",
        "ignore_eos",
        "temperature",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self.PROFILE_FIELDS:
            field = self.fields[name]
            assert isinstance(field, ProfileChoiceField)
            field.queryset = selectors.experiment_profiles()

    def clean_levels(self) -> list[int]:
        return _parse_levels(self.cleaned_data["levels"])

    def clean_tags(self) -> list[str]:
        return [t.strip() for t in self.cleaned_data["tags"].split(",") if t.strip()]

    def service_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "profiles": [data[n] for n in self.PROFILE_FIELDS if data.get(n) is not None],
            "levels": data["levels"],
            "load": {name: data.get(name) for name in self.LOAD_FIELDS},
            "name": data["name"],
            "repeats": data["repeats"],
            "order": data["order"],
            "continue_on_start_failure": data["continue_on_start_failure"],
            "check_output_equivalence": data["check_output_equivalence"],
            "notes": data["notes"],
            "tags": data["tags"],
        }

    def add_service_error(self, error: ValidationError) -> None:
        """Show the service's errors next to the fields they name."""
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for field, messages in error.message_dict.items():
            target = "profile_b" if field == "profiles" else field
            self.add_error(target if target in self.fields else None, messages)


def parse_sweep_ids(values: list[str]) -> list[int]:
    """Sweep ids from the picker's query string, order kept, duplicates and junk dropped."""
    ids: list[int] = []
    for value in values:
        if value.isdigit() and int(value) not in ids:
            ids.append(int(value))
    return ids
