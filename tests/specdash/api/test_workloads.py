"""Prompt sets, arrivals and SLOs over the API, and the server-side figures in levels and exports."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from benchlib.loadgen.cli_args import build_parser, slo_from_args
from benchmarks.sweeps.distributed import split_needed
from benchmarks.sweeps.forms import LoadPlanForm
from benchmarks.sweeps.models import Sweep, SweepLevel
from benchmarks.sweeps.runner import loadgen_argv
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db

SERVER = {
    "available": True,
    "engine": "sglang",
    "accept_length": 2.62,
    "acceptance_rate": 0.54,
    "spec_drafts": 400,
    "spec_draft_tokens": 1200,
    "spec_accepted_tokens": 648,
    "generation_tokens": 1048,
}


@pytest.fixture
def ready(make_profile: Any, make_instance: Any) -> Any:
    return make_instance(make_profile(served_model_name="sim"))


def test_prompt_set_rate_and_slo_are_stored_and_reach_the_load_generator(
    as_operator: ApiClient, ready: Any, tmp_path: Any
) -> None:
    load = {
        "requests_per_level": 8,
        "prompt_set": "mixed",
        "request_rate": 4.5,
        "burstiness": 0.5,
        "slo": {"ttft_ms": 1000, "tpot_ms": 50},
    }
    response = as_operator.post(
        "/api/v1/sweeps", {"instance_id": ready.pk, "levels": [2], "load": load}
    )
    assert response.status_code == 202, response.content
    stored = Sweep.objects.get().load
    assert stored["prompt_set"] == "mixed"
    assert stored["request_rate"] == 4.5 and stored["burstiness"] == 0.5
    assert stored["slo"] == {"ttft_ms": 1000.0, "tpot_ms": 50.0, "scope": "p99", "attainment": 0.99}
    argv = loadgen_argv(
        base_url="http://127.0.0.1:1", model="m", levels=[2], load=stored, records_path=tmp_path
    )
    joined = " ".join(argv)
    assert "--prompt-set mixed" in joined
    assert "--request-rate 4.5 --burstiness 0.5" in joined
    assert "--slo-ttft-ms 1000.0 --slo-tpot-ms 50.0 --slo-scope p99" in joined
    # and the load generator's own parser accepts exactly that command line
    args = build_parser().parse_args(argv[3:])
    assert args.prompt_set == "mixed" and args.burstiness == 0.5
    slo = slo_from_args(args)
    assert slo is not None and (slo.ttft_ms, slo.tpot_ms) == (1000.0, 50.0)


@pytest.mark.parametrize(
    ("load", "field"),
    [
        ({"requests_per_level": 1, "prompt_set": "mtbench"}, "prompt_set"),
        ({"requests_per_level": 1, "slo": {"ttft_ms": -5}}, "slo"),
        ({"requests_per_level": 1, "request_rate": 0}, "request_rate"),
        ({"requests_per_level": 1, "burstiness": 0}, "burstiness"),
    ],
)
def test_bad_workload_settings_are_422_with_the_field_named(
    as_operator: ApiClient, ready: Any, load: dict[str, Any], field: str
) -> None:
    response = as_operator.post(
        "/api/v1/sweeps", {"instance_id": ready.pk, "levels": [1], "load": load}
    )
    assert response.status_code == 422, response.content
    assert error_of(response)["fields"].get(field), response.content
    assert not Sweep.objects.exists()


def _sweep_with_server_figures(instance: Any) -> Sweep:
    sweep = Sweep.objects.create(
        instance=instance, profile=instance.profile, levels=[4], state="completed"
    )
    summary = {
        "concurrency": 4,
        "output_tok_s": 300.0,
        "acceptance": {"accept_length": 2.5, "acceptance_rate": 0.5, "by_category": {}},
        "goodput": {
            "share": 0.75,
            "goodput_req_s": 3.0,
            "goodput_tok_s": 240.0,
            "meets_slo": False,
        },
    }
    SweepLevel.objects.create(
        sweep=sweep, index=0, concurrency=4, state="completed", output_tok_s=300.0,
        summary=summary, requests_ok=8, server_metrics=SERVER,
    )  # fmt: skip
    return sweep


def test_levels_api_carries_the_server_figures(as_viewer: ApiClient, ready: Any) -> None:
    sweep = _sweep_with_server_figures(ready)
    levels = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/levels").json()
    assert levels[0]["server_metrics"]["accept_length"] == 2.62
    assert levels[0]["server_metrics"]["acceptance_rate"] == 0.54


def test_exports_carry_server_figures_acceptance_and_goodput(
    as_viewer: ApiClient, ready: Any
) -> None:
    sweep = _sweep_with_server_figures(ready)
    text = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/levels.csv").content.decode()
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["server_accept_length"] == "2.62"
    assert row["server_acceptance_rate"] == "0.54"
    assert row["server_spec_accepted_tokens"] == "648"
    assert row["request_accept_length"] == "2.5"
    assert row["goodput_tok_s"] == "240.0" and row["meets_slo"] == "False"
    exported = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/levels.json").json()
    assert exported["levels"][0]["server_metrics"]["accept_length"] == 2.62


def test_the_form_turns_prompt_set_rate_and_slo_fields_into_load_settings() -> None:
    form = LoadPlanForm(
        data={
            "levels": "1, 4",
            "requests_per_level": "10",
            "input_tokens": "64",
            "max_tokens": "32",
            "api": "completions",
            "prompt_set": "humaneval",
            "request_rate": "2.5",
            "burstiness": "1",
            "slo_ttft_ms": "800",
            "slo_e2e_ms": "4000",
            "slo_scope": "request",
        }
    )
    assert form.is_valid(), form.errors
    load = form.plan_kwargs()["load"]
    assert load["prompt_set"] == "humaneval" and load["request_rate"] == 2.5
    assert load["slo"] == {
        "ttft_ms": 800.0,
        "tpot_ms": None,
        "itl_ms": None,
        "max_gap_ms": None,
        "e2e_ms": 4000.0,
        "scope": "request",
    }
    without = LoadPlanForm(data={**form.data, "slo_ttft_ms": "", "slo_e2e_ms": ""})
    assert without.is_valid(), without.errors
    assert "slo" not in without.plan_kwargs()["load"]


def _goodput_sweep(instance: Any, levels: dict[int, tuple[float, float, bool]], slo: Any) -> Sweep:
    sweep = Sweep.objects.create(
        instance=instance, profile=instance.profile, levels=list(levels), state="completed",
        load={"requests_per_level": 8, "slo": slo},
    )  # fmt: skip
    for index, (c, (tok_s, good_tok_s, met)) in enumerate(levels.items()):
        summary = {
            "concurrency": c, "output_tok_s": tok_s, "duration_s": 2.0,
            "goodput": {"goodput_tok_s": good_tok_s, "goodput_req_s": good_tok_s / 100,
                        "share": good_tok_s / tok_s, "meets_slo": met},
            "acceptance": {"accept_length": None, "acceptance_rate": None, "by_category": {}},
        }  # fmt: skip
        SweepLevel.objects.create(
            sweep=sweep, index=index, concurrency=c, state="completed", output_tok_s=tok_s,
            summary=summary, requests_ok=8,
            server_metrics={"available": True, "accept_length": 2.4},
        )  # fmt: skip
    return sweep


def test_comparison_api_speaks_goodput_when_the_reference_sweep_had_an_slo(
    as_viewer: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    slo = {"ttft_ms": 1000.0, "tpot_ms": 50.0, "scope": "p99", "attainment": 0.99}
    base = make_instance(make_profile(name="base"))
    eagle = make_instance(make_profile(name="eagle", speculative=True, port=39001))
    # B is faster in raw tok/s at every level, but meets the SLO only at C=1.
    ref = _goodput_sweep(base, {1: (90.0, 90.0, True), 4: (300.0, 300.0, True)}, slo)
    cand = _goodput_sweep(eagle, {1: (120.0, 120.0, True), 4: (400.0, 100.0, False)}, slo)
    body = as_viewer.get(f"/api/v1/comparisons?sweep={ref.pk}&sweep={cand.pk}").json()
    assert body["slo"] == slo
    (raw,) = body["verdicts"]
    assert {r["concurrency"]: r["point"] for r in raw["ratios"]} == pytest.approx(
        {1: 120 / 90, 4: 400 / 300}
    )
    (good,) = body["goodput_verdicts"]
    # the point estimate is the ratio of the rows' goodput figures
    assert {r["concurrency"]: r["point"] for r in good["ratios"]} == pytest.approx(
        {1: 120 / 90, 4: 100 / 300}
    )
    assert "TTFT p99 <= 1000 ms, TPOT p99 <= 50 ms" in good["text"]
    assert "base (A) meets them up to C=4; eagle (B) meets them up to C=1" in good["text"]
    reach = {s["label"]: s["slo_max_concurrency"] for s in body["series"]}
    assert reach == {"A": 4, "B": 1}
    row4 = next(r for r in body["rows"] if r["concurrency"] == 4)
    assert row4["goodput_ratios"][0]["point"] == pytest.approx(1 / 3)
    assert row4["cells"][1]["accept_length"] == 2.4  # the server's figure for that level


def test_open_loop_levels_are_never_split_across_processes(settings: Any) -> None:
    settings.SPECDASH_LOADGEN_MAX_STREAMS = 4
    assert split_needed([16], {"requests_per_level": 64})
    # each shard would send the whole rate: the arrivals stay one process's schedule
    assert not split_needed([16], {"requests_per_level": 64, "request_rate": 10.0})
