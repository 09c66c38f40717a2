"""The dashboard's edges of the one load-settings model: the form and the API schema carry
every setting the model declares, and the form's values pass the service's validation."""

from __future__ import annotations

from typing import Annotated

import pytest
from django.core.exceptions import ValidationError
from pydantic import create_model

from benchlib.loadgen.settings import LoadSettings, flat_fields, input_fields
from benchlib.loadgen.settings_fields import Option, SloSettings
from benchmarks.sweeps import services
from benchmarks.sweeps.forms import LoadPlanForm, load_form_field
from specdash.api.schemas.sweeps import SloIn, SweepLoadIn


class Extended(LoadSettings):
    top_k: Annotated[int | None, Option("--top-k", label="Top k", low=1, high=100)] = None


def test_the_form_and_the_api_schema_have_exactly_the_models_fields() -> None:
    form_fields = set(LoadPlanForm().fields) - {"levels", "notes", "tags"}
    assert form_fields == {name for name, _ in flat_fields()}
    assert set(SweepLoadIn.model_fields) == set(LoadSettings.model_fields)
    assert set(SloIn.model_fields) == set(SloSettings.model_fields)


def test_a_field_added_to_the_model_appears_in_form_and_schema() -> None:
    fields = dict(flat_fields(Extended))
    assert load_form_field(fields["top_k"]).label == "Top k"
    schema = create_model("ExtendedIn", **input_fields(Extended, nested={"slo": SloIn}))
    assert "top_k" in schema.model_fields
    assert "(1 to 100)" in str(schema.model_fields["top_k"].description)


def test_the_forms_defaults_are_valid_settings() -> None:
    form = LoadPlanForm(data={"levels": "1, 2", "requests_per_level": "5", "slo_scope": "p99"})
    assert form.is_valid(), form.errors
    load = form.plan_kwargs()["load"]
    assert "slo" not in load
    assert services.sweep_clean_load(load) == LoadSettings(requests_per_level=5).to_stored()


def test_the_service_takes_the_model_itself() -> None:
    settings = LoadSettings(duration=3.0, burstiness=0.5, request_rate=2.0)
    assert services.sweep_clean_load(settings) == settings.to_stored()


def test_the_services_errors_land_on_the_forms_fields() -> None:
    form = LoadPlanForm(data={"levels": "1", "requests_per_level": "5", "max_tokens": "0"})
    assert form.is_valid(), form.errors
    with pytest.raises(ValidationError) as info:
        services.sweep_clean_load(form.plan_kwargs()["load"])
    form.add_service_error(info.value)
    assert "between 1" in str(form.errors["max_tokens"])
