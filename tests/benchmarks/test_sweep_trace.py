"""A sweep replays a trace the operator put in the trace folder, and nothing else on the disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings

from benchlib.loadgen.cli_args import build_parser, trace_from_args
from benchmarks.sweeps import services
from benchmarks.sweeps.runner import loadgen_argv


def test_a_trace_missing_from_the_folder_is_refused_on_its_field(tmp_path: Path) -> None:
    with override_settings(SPECDASH_TRACE_DIR=tmp_path), pytest.raises(ValidationError) as info:
        services.sweep_clean_load({"requests_per_level": 5, "trace": "absent.jsonl"})
    assert "trace folder" in str(info.value.message_dict["trace"])


def test_a_path_outside_the_folder_is_refused_even_when_the_file_exists(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text("{}\n")
    with (
        override_settings(SPECDASH_TRACE_DIR=tmp_path / "traces"),
        pytest.raises(ValidationError) as info,
    ):
        services.sweep_clean_load({"requests_per_level": 5, "trace": "../t.jsonl"})
    assert "trace" in info.value.message_dict


def test_a_rate_beside_a_trace_is_said_on_the_rate(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        services.sweep_clean_load(
            {"requests_per_level": 5, "trace": "t.jsonl", "request_rate": 2.0}
        )
    assert "arrival times" in str(info.value.message_dict["request_rate"])


def test_the_load_generator_reads_the_sweeps_trace_from_the_folder(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("Timestamp,Request tokens,Response tokens\n0,5,2\n")
    with override_settings(SPECDASH_TRACE_DIR=tmp_path):
        load = services.sweep_clean_load(
            {"requests_per_level": 5, "trace": "t.csv", "trace_format": "burstgpt",
             "trace_speed": 3.0}
        )  # fmt: skip
        argv = loadgen_argv(
            base_url="http://x", model="m", levels=[2], load=load, records_path=tmp_path / "r"
        )
    assert load["trace"] == "t.csv" and load["trace_speed"] == 3.0
    args = build_parser().parse_args(argv[3:])
    assert (args.trace_dir, args.trace, args.trace_format) == (tmp_path, "t.csv", "burstgpt")
    assert trace_from_args(args) is not None
