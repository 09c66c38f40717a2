"""The New experiment form and the sweep picker: they parse what a person types; the rules
live in benchmarks.experiments.services.experiment_create."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from benchmarks.experiments import selectors, services
from benchmarks.forms import LoadPlanForm
from benchmarks.models.experiments import ExperimentOrder
from hosts.models import ServerProfile


class ProfileChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: ServerProfile) -> str:
        spec = " · speculative" if obj.speculative else ""
        return f"{obj.name} ({obj.host.name}:{obj.port}{spec})"


class ExperimentForm(LoadPlanForm):
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

    auto_resume = forms.BooleanField(
        required=False,
        label="Resume by itself after a restart",
        help_text="A restarted worker continues it from where it stopped (docs/operations.md)",
    )

    PROFILE_FIELDS = ("profile_a", "profile_b", "profile_c", "profile_d")
    field_order = [
        "name", *PROFILE_FIELDS, "levels", *LoadPlanForm.LOAD_FIELDS, *LoadPlanForm.SLO_FIELDS,
        "repeats", "order", "continue_on_start_failure", "check_output_equivalence",
        "auto_resume", "notes", "tags",
    ]  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self.PROFILE_FIELDS:
            field = self.fields[name]
            assert isinstance(field, ProfileChoiceField)
            field.queryset = selectors.experiment_profiles()

    def service_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "profiles": [data[n] for n in self.PROFILE_FIELDS if data.get(n) is not None],
            "name": data["name"],
            "repeats": data["repeats"],
            "order": data["order"],
            "continue_on_start_failure": data["continue_on_start_failure"],
            "check_output_equivalence": data["check_output_equivalence"],
            "auto_resume": data["auto_resume"],
            **self.plan_kwargs(),
        }

    def add_service_error(self, error: ValidationError) -> None:
        # A problem with the set of profiles shows next to the first optional choice, B.
        if hasattr(error, "error_dict") and "profiles" in error.error_dict:
            error.error_dict["profile_b"] = error.error_dict.pop("profiles")
        super().add_service_error(error)


def parse_sweep_ids(values: list[str]) -> list[int]:
    """Sweep ids from the picker's query string, order kept, duplicates and junk dropped."""
    ids: list[int] = []
    for value in values:
        if value.isdigit() and int(value) not in ids:
            ids.append(int(value))
    return ids
