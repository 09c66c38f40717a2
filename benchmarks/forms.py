"""The New sweep form: parses what a person types; the rules live in services.sweep_create."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from benchmarks import selectors, services
from benchmarks.models.sweeps import DEFAULT_LEVELS
from hosts.models import ServerInstance


class InstanceChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: ServerInstance) -> str:
        return f"{obj.profile.name} · #{obj.pk} on {obj.host.name}:{obj.port}"


class LoadPlanForm(forms.Form):
    """What sweeps and experiments share: the levels, the load settings, notes and tags,
    and how the service's validation errors are shown on the fields."""

    levels = forms.CharField(
        initial=", ".join(str(c) for c in DEFAULT_LEVELS),
        help_text=f"Concurrency levels, comma separated (1 to {services.MAX_CONCURRENCY}); "
        "with several request rates, one: the cap on requests in flight",
    )
    requests_per_level = forms.IntegerField(
        required=False, initial=100, help_text="Or leave empty and give a duration"
    )
    duration = forms.FloatField(required=False, label="Duration per level (s)")
    warmup_requests = forms.IntegerField(initial=0, required=False, label="Warm-up requests")
    input_tokens = forms.IntegerField(initial=128)
    max_tokens = forms.IntegerField(initial=128, label="Max output tokens")
    api = forms.ChoiceField(choices=[(a, a) for a in services.APIS], initial="completions")
    ignore_eos = forms.BooleanField(required=False, initial=True, label="Ignore EOS")
    temperature = forms.FloatField(required=False)
    prompt_set = forms.ChoiceField(
        choices=[
            ("synthetic", "synthetic (random words of the input length)"),
            ("sharegpt", "ShareGPT (chat)"),
            ("humaneval", "HumanEval (code)"),
            ("mixed", "ShareGPT + HumanEval alternating (chat, code)"),
        ],
        initial="synthetic",
        required=False,
        label="Prompts",
        help_text="The same prompts in the same order for every profile",
    )
    request_rate = forms.CharField(
        required=False,
        label="Request rates (req/s)",
        help_text="Empty: closed loop. One rate: open-loop arrivals at every level, each level's "
        "C capping what is in flight. Several (0.5, 1, 2, 4): a rate sweep, one level per rate "
        "under one concurrency cap in Levels",
    )
    burstiness = forms.FloatField(
        required=False, initial=1.0, help_text="Gamma shape of arrival gaps: 1 Poisson, <1 bursty"
    )
    slo_ttft_ms = forms.FloatField(required=False, label="SLO: TTFT (ms)")
    slo_tpot_ms = forms.FloatField(required=False, label="SLO: TPOT (ms)")
    slo_itl_ms = forms.FloatField(required=False, label="SLO: token ITL (ms)")
    slo_e2e_ms = forms.FloatField(required=False, label="SLO: E2E (ms)")
    slo_scope = forms.ChoiceField(
        choices=[("p99", "p99 of the level within each limit"), ("request", "per request")],
        initial="p99",
        required=False,
        label="SLO applies to",
        help_text="Per request: a level meets it when 99% of its requests meet every limit",
    )
    notes = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    tags = forms.CharField(required=False, help_text="Comma separated")

    LOAD_FIELDS = (
        "requests_per_level",
        "duration",
        "warmup_requests",
        "input_tokens",
        "max_tokens",
        "api",
        "ignore_eos",
        "temperature",
        "prompt_set",
        "request_rate",
        "burstiness",
    )
    SLO_FIELDS = ("slo_ttft_ms", "slo_tpot_ms", "slo_itl_ms", "slo_e2e_ms", "slo_scope")

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

    def plan_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        load = {name: data.get(name) for name in self.LOAD_FIELDS}
        slo = {name[4:]: data.get(name) for name in self.SLO_FIELDS[:-1]}
        if any(v is not None for v in slo.values()):
            load["slo"] = {**slo, "scope": data.get("slo_scope") or "p99"}
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


class SweepForm(LoadPlanForm):
    instance = InstanceChoiceField(
        queryset=ServerInstance.objects.none(),
        label="Target server",
        empty_label="Choose a ready server",
    )
    name = forms.CharField(max_length=200, required=False)

    field_order = ["instance", "name", "levels"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["instance"]
        assert isinstance(field, InstanceChoiceField)
        field.queryset = selectors.sweep_target_instances()

    def service_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {"instance": data["instance"], "name": data["name"], **self.plan_kwargs()}
