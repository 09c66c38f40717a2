"""The New experiment form and the sweep picker: they parse what a person types; the rules
live in benchmarks.experiments.services.experiment_create."""

from __future__ import annotations

from typing import Any, TypedDict

from django import forms
from django.core.exceptions import ValidationError

from benchmarks.experiments import axes, selectors, services
from benchmarks.experiments.models import DEFAULT_ORDER, DEFAULT_REPEATS, ExperimentOrder
from benchmarks.experiments.tuning import DEFAULT_MARGIN
from benchmarks.sweeps.forms import LoadPlanForm, PlanKwargs
from hosts.models import ServerProfile


class ProfileChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: ServerProfile) -> str:
        spec = " · speculative" if obj.speculative else ""
        if obj.is_endpoint or obj.host is None:
            return f"{obj.name} (endpoint {obj.base_url}, not started by specdash{spec})"
        return f"{obj.name} ({obj.host.name}:{obj.port}{spec})"


# The protocol's fields, the same on the New experiment and the matrix forms.
def repeats_field(*, per: str) -> forms.IntegerField:
    return forms.IntegerField(
        initial=DEFAULT_REPEATS,
        min_value=1,
        max_value=services.MAX_REPEATS,
        help_text=f"Sweeps per {per}; with 1 (single run) the interval is a within-run one and "
        "leaves out run-to-run variance",
    )


def order_field() -> forms.ChoiceField:
    return forms.ChoiceField(choices=ExperimentOrder.choices, initial=DEFAULT_ORDER)


def auto_resume_field() -> forms.BooleanField:
    return forms.BooleanField(
        required=False,
        label="Resume by itself after a restart",
        help_text="A restarted worker continues it from where it stopped (docs/operations.md)",
    )


class ExperimentCreateArgs(PlanKwargs):
    """``ExperimentForm.service_kwargs``: what ``services.experiment_create`` takes from the
    form (the chosen arms' profiles and loads in arm order, the protocol and the plan)."""

    profiles: list[ServerProfile]
    arm_loads: list[axes.ArmLoadText]
    name: str
    repeats: int
    order: str
    continue_on_start_failure: bool
    check_output_equivalence: bool
    auto_resume: bool


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
    # Each arm's own acceptance-axis load (benchmarks.experiments.axes), typed as key=value.
    load_a = forms.CharField(
        required=False,
        label="Arm A load",
        help_text="This arm's own api and temperature over the load below, e.g. temperature=0 "
        "or api=chat temperature=1 (empty: the load's); the same profile may be chosen twice "
        "with different arm loads (greedy vs sampled, chat template vs raw prompt)",
    )
    load_b = forms.CharField(required=False, label="Arm B load")
    load_c = forms.CharField(required=False, label="Arm C load")
    load_d = forms.CharField(required=False, label="Arm D load")
    repeats = repeats_field(per="profile")
    order = order_field()
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
    auto_resume = auto_resume_field()

    PROFILE_FIELDS = ("profile_a", "profile_b", "profile_c", "profile_d")
    ARM_LOAD_FIELDS = ("load_a", "load_b", "load_c", "load_d")
    field_order = [
        "name", *PROFILE_FIELDS, *ARM_LOAD_FIELDS, "levels", *LoadPlanForm.LOAD_FIELDS,
        *LoadPlanForm.SLO_FIELDS, "repeats", "order", "continue_on_start_failure",
        "check_output_equivalence", "auto_resume", "notes", "tags",
    ]  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self.PROFILE_FIELDS:
            self.limit_choices(name, selectors.experiment_profiles())

    def _clean_arm_load(self, name: str) -> axes.ArmLoadText:
        return axes.parse_arm_load(self.cleaned_data.get(name) or "")

    def clean_load_a(self) -> axes.ArmLoadText:
        return self._clean_arm_load("load_a")

    def clean_load_b(self) -> axes.ArmLoadText:
        return self._clean_arm_load("load_b")

    def clean_load_c(self) -> axes.ArmLoadText:
        return self._clean_arm_load("load_c")

    def clean_load_d(self) -> axes.ArmLoadText:
        return self._clean_arm_load("load_d")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for profile, arm_load in zip(self.PROFILE_FIELDS, self.ARM_LOAD_FIELDS, strict=True):
            if data.get(arm_load) and data.get(profile) is None:
                letter = profile[-1].upper()
                self.add_error(arm_load, f"Choose profile {letter} for this arm's load.")
        return data

    def service_kwargs(self) -> ExperimentCreateArgs:
        data = self.cleaned_data
        chosen = [
            (data[p], data.get(a) or {})
            for p, a in zip(self.PROFILE_FIELDS, self.ARM_LOAD_FIELDS, strict=True)
            if data.get(p) is not None
        ]
        return {
            "profiles": [profile for profile, _ in chosen],
            "arm_loads": [arm_load for _, arm_load in chosen],
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


def _axis_value(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_axes_text(text: str) -> dict[str, list[int | float | str]]:
    """Axes typed one per line, a flag then its values: ``--speculative-num-steps 1, 2, 3``
    or ``--speculative-config.num_speculative_tokens = 1, 3``; ValidationError naming the
    line otherwise. Values that read as numbers are numbers; the rest stay text."""
    axes: dict[str, list[int | float | str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        flag, _, rest = line.replace("=", " ", 1).partition(" ")
        values = [v.strip() for v in rest.replace(" ", ",").split(",") if v.strip()]
        if not flag.startswith("-") or not values:
            raise ValidationError(
                f"Line {number} ({line!r}): write a flag then its values, "
                "e.g. --speculative-num-steps 1, 2, 3"
            )
        if flag in axes:
            raise ValidationError(f"Line {number}: {flag} is given twice")
        axes[flag] = [_axis_value(v) for v in values]
    if not axes:
        raise ValidationError("Give at least one axis")
    return axes


class MatrixPreviewArgs(TypedDict):
    """``MatrixForm.preview_kwargs``: what ``matrix.matrix_preview`` takes from the form."""

    base: ServerProfile
    axes: dict[str, list[int | float | str]]
    include_off: bool


class MatrixCreateArgs(MatrixPreviewArgs, PlanKwargs):
    """``MatrixForm.service_kwargs``: what ``tuning.matrix_create`` takes from the form."""

    name: str
    repeats: int
    order: str
    auto_resume: bool


class MatrixForm(LoadPlanForm):
    """A parameter matrix: one base profile, axes over its launch argv, the variants run as
    one experiment's arms (benchmarks.experiments.tuning.matrix_create)."""

    name = forms.CharField(
        max_length=200, required=False, help_text="Default: the profile and the axes"
    )
    base = ProfileChoiceField(queryset=ServerProfile.objects.none(), label="Base profile")
    axes = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "--speculative-num-steps 1, 3, 5"}),
        help_text="One axis per line: a flag and its values (--speculative-num-steps 1, 3, 5); "
        "a key inside a JSON flag as --speculative-config.num_speculative_tokens 1, 3. Several "
        "axes give their product",
    )
    include_off = forms.BooleanField(
        required=False,
        initial=True,
        label="Add speculation off",
        help_text="A variant without speculation, run first (arm A, the reference)",
    )
    repeats = repeats_field(per="variant")
    order = order_field()
    auto_resume = auto_resume_field()

    field_order = [
        "name", "base", "axes", "include_off", "levels", *LoadPlanForm.LOAD_FIELDS,
        *LoadPlanForm.SLO_FIELDS, "repeats", "order", "auto_resume", "notes", "tags",
    ]  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit_choices("base", selectors.experiment_profiles())

    def clean_axes(self) -> dict[str, list[int | float | str]]:
        return parse_axes_text(self.cleaned_data["axes"])

    def preview_kwargs(self) -> MatrixPreviewArgs:
        data = self.cleaned_data
        return {"base": data["base"], "axes": data["axes"], "include_off": data["include_off"]}

    def service_kwargs(self) -> MatrixCreateArgs:
        data = self.cleaned_data
        return {
            **self.preview_kwargs(),
            "name": data["name"],
            "repeats": data["repeats"],
            "order": data["order"],
            "auto_resume": data["auto_resume"],
            **self.plan_kwargs(),
        }


class VerifyForm(forms.Form):
    repeats = forms.IntegerField(min_value=1, max_value=services.MAX_REPEATS, required=False)


def parse_margin(value: str | None) -> tuple[float, str]:
    """The verdict's margin from a query string (a fraction, 0 to below 0.5): (margin, error);
    the default margin and a message for anything else."""
    if value is None or value == "":
        return DEFAULT_MARGIN, ""
    try:
        margin = float(value)
    except ValueError:
        margin = -1.0
    if not 0.0 <= margin < 0.5:
        return DEFAULT_MARGIN, (
            f"Margin {value!r} is not a fraction from 0 to below 0.5; "
            f"the default {DEFAULT_MARGIN:g} is used."
        )
    return margin, ""


MAX_ID = 2**63 - 1  # the database's largest integer: a larger id names no row


def parse_id(value: str) -> int | None:
    """An id from a query string: ASCII digits up to ``MAX_ID``, else None (``"²"`` is a
    digit to ``str.isdigit`` but not to ``int``; 2^63 overflows SQLite)."""
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        return None
    number = int(value)
    return number if 1 <= number <= MAX_ID else None


def parse_sweep_ids(values: list[str]) -> list[int]:
    """Sweep ids from the picker's query string, order kept, duplicates and junk dropped."""
    ids: list[int] = []
    for value in values:
        number = parse_id(value)
        if number is not None and number not in ids:
            ids.append(number)
    return ids
