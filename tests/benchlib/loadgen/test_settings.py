"""The load settings, declared once: every field survives model -> argv -> the load
generator's parser -> model, and a field added to the model gets a flag with no other edit."""

from __future__ import annotations

import argparse
from typing import Annotated

import pytest

from benchlib.loadgen.cli_args import build_parser
from benchlib.loadgen.level_config import LevelConfig
from benchlib.loadgen.settings import LoadSettings, LoadSettingsError, flat_fields
from benchlib.loadgen.settings_args import add_load_arguments, settings_from_args
from benchlib.loadgen.settings_fields import Option

# Every field away from its default, so a flag that is dropped or misread shows.
EVERY_FIELD = LoadSettings.clean(
    {
        "api": "chat",
        "model": "m-1",
        "duration": 12.5,
        "warmup_requests": 3,
        "input_tokens": 64,
        "max_tokens": 32,
        "temperature": 0.7,
        "request_timeout": 90.0,
        "ignore_eos": True,
        "prompt_set": "humaneval",
        "request_rate": [0.5, 2.0],
        "burstiness": 0.5,
        "ramp": "exponential",
        "ramp_start_rate": 0.1,
        "ramp_slices": 5,
        "controller_tracking": True,
        "prefix_count": 4,
        "prefix_tokens": 256,
        "prefix_share": 0.5,
        "slo": {"ttft_ms": 800, "tpot_ms": 40, "itl_ms": 30, "e2e_ms": 4000, "scope": "request",
                "attainment": 0.9},
    }
)  # fmt: skip
# A trace gives the arrivals (no request rate beside it): its fields away from their defaults.
EVERY_TRACE_FIELD = LoadSettings.clean(
    {"requests_per_level": 9, "trace": "t.csv", "trace_format": "burstgpt", "trace_speed": 2.5,
     "trace_start": 30.0, "trace_duration": 60.0}
)  # fmt: skip


# Sessions: chat in a closed loop (no rate, no trace).
EVERY_SESSION_FIELD = LoadSettings.clean(
    {"requests_per_level": 6, "api": "chat", "session_turns": 3, "turn_tokens": 8,
     "think_time": 0.5}
)  # fmt: skip


class Extended(LoadSettings):
    top_k: Annotated[int | None, Option("--top-k", low=1, high=100)] = None


def _parse(argv: list[str], model: type[LoadSettings] = LoadSettings) -> LoadSettings:
    parser = argparse.ArgumentParser()
    add_load_arguments(parser, model)
    return settings_from_args(parser.parse_args(argv), model)


def test_every_field_differs_from_its_default() -> None:
    defaults = LoadSettings(requests_per_level=1)
    same = [
        n
        for n in LoadSettings.model_fields
        if getattr(EVERY_FIELD, n) == getattr(defaults, n)
        and getattr(EVERY_TRACE_FIELD, n) == getattr(defaults, n)
        and getattr(EVERY_SESSION_FIELD, n) == getattr(defaults, n)
    ]
    assert same == []  # requests_per_level too: None here (duration is given), 1 there


def test_every_field_round_trips_through_the_load_generators_own_parser() -> None:
    argv = EVERY_FIELD.to_argv()
    args = build_parser().parse_args(["--base-url", "http://x", *argv])
    assert settings_from_args(args) == EVERY_FIELD
    args = build_parser().parse_args(["--base-url", "http://x", *EVERY_TRACE_FIELD.to_argv()])
    assert settings_from_args(args) == EVERY_TRACE_FIELD
    argv = EVERY_SESSION_FIELD.to_argv()
    parsed = settings_from_args(build_parser().parse_args(["--base-url", "x", *argv]))
    assert parsed == EVERY_SESSION_FIELD
    counted = LoadSettings.clean({"requests_per_level": 7, "api": "generate"})
    assert _parse(counted.to_argv()) == counted


def test_the_stored_form_round_trips() -> None:
    stored = EVERY_FIELD.to_stored()
    assert stored["slo"] == {"ttft_ms": 800.0, "tpot_ms": 40.0, "itl_ms": 30.0, "e2e_ms": 4000.0,
                             "scope": "request", "attainment": 0.9}  # fmt: skip
    assert LoadSettings.from_stored(stored) == EVERY_FIELD
    assert LoadSettings.from_stored(stored).to_argv() == EVERY_FIELD.to_argv()
    assert LoadSettings.from_stored(EVERY_TRACE_FIELD.to_stored()) == EVERY_TRACE_FIELD
    assert LoadSettings.from_stored(EVERY_SESSION_FIELD.to_stored()) == EVERY_SESSION_FIELD


def test_a_field_added_to_the_model_gets_its_flag_and_round_trips() -> None:
    settings = Extended.clean({"requests_per_level": 2, "top_k": 5})
    assert settings.to_argv()[-2:] == ["--top-k", "5"]
    assert _parse(settings.to_argv(), Extended) == settings
    assert "top_k" in dict(flat_fields(Extended))
    with pytest.raises(LoadSettingsError) as info:
        Extended.clean({"requests_per_level": 2, "top_k": 500})
    assert info.value.errors == {"top_k": ["Must be between 1 and 100."]}


def test_the_cli_takes_values_outside_a_sweeps_bounds_but_not_of_the_wrong_type() -> None:
    assert _parse(["--duration", "1", "--max-tokens", "100000"]).max_tokens == 100_000
    with pytest.raises(SystemExit):
        _parse(["--duration", "1", "--max-tokens", "many"])


def test_the_level_config_is_built_from_the_settings() -> None:
    cfg = LevelConfig.from_settings(
        EVERY_FIELD, base_url="http://x", concurrency=4, request_rate=2.0, level_index=1
    )
    assert (cfg.api.value, cfg.model, cfg.duration, cfg.warmup_requests) == ("chat", "m-1", 12.5, 3)
    assert (cfg.max_tokens, cfg.temperature, cfg.request_timeout) == (32, 0.7, 90.0)
    assert (cfg.ignore_eos, cfg.burstiness, cfg.request_rate) == (True, 0.5, 2.0)
    # without --max-tokens the load generator leaves the output length to the dataset
    bare = _parse(["--requests-per-level", "3"])
    assert bare.max_tokens == 128 and "max_tokens" not in bare.model_fields_set
    cfg = LevelConfig.from_settings(bare, base_url="http://x", concurrency=1, request_rate=None)
    assert cfg.max_tokens is None and cfg.num_requests == 3
