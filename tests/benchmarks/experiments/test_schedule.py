"""The speculation schedule of a completed experiment: draft lengths read from the arms'
launch argv, bands from their stored levels, the engine configuration, and the page section."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from benchlib.stats.engines import ENGINE_NAMES
from benchmarks.experiments import services, tuning
from benchmarks.experiments.drafts import draft_length
from benchmarks.experiments.matrix import matrix_variants
from benchmarks.experiments.models import Experiment, ExperimentState
from benchmarks.experiments.schedule import RATE_MODE_MESSAGE, experiment_schedule
from benchmarks.experiments.series import experiment_arm_series, running_batches
from benchmarks.sweeps.models import SweepLevel
from hosts.models import ServerProfile, TelemetrySample
from tests.benchmarks.experiments.constructed import make_sweep
from tests.benchmarks.experiments.schedule_data import (
    BASELINE,
    EAGLE3,
    VLLM_EAGLE3,
    constructed_experiment,
    vllm_argv,
)
from tests.fixtures.statements import html_statements, normalized

pytestmark = pytest.mark.django_db

SIM_VLLM = ["sim", "--profile", "eagle3", "--metrics-style", "vllm"]


@pytest.mark.parametrize(
    ("engine", "argv", "expected"),
    [
        ("vllm", vllm_argv(None), 0),
        ("vllm", vllm_argv(VLLM_EAGLE3), 3),
        ("vllm", ["vllm", "serve", "m", '--speculative-config={"num_speculative_tokens": 5}'], 5),
        ("vllm", vllm_argv({"method": "ngram"}), None),
        ("vllm", vllm_argv({**VLLM_EAGLE3, "num_speculative_tokens_per_batch_size": []}), None),
        ("sglang", ["python", "-m", "sglang.launch_server"], 0),
        (
            "sglang",
            ["sglang", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "4"],
            4,
        ),
        ("sglang", ["sglang", "--speculative-algorithm", "EAGLE3"], None),
        ("llamacpp", ["llama-server", "-m", "m.gguf"], 0),
        ("llamacpp", ["llama-server", "-md", "d.gguf", "--spec-draft-n-max", "8"], 8),
        ("llamacpp", ["llama-server", "-md", "d.gguf"], None),
        ("simulator", ["python", "-m", "benchlib.simulator"], 0),
        ("simulator", ["sim", "--profile", "eagle3"], 3),
        ("simulator", ["sim", "--profile", "eagle3", "--spec-steps", "5"], 5),
        ("simulator", ["sim", "--profile", "eagle3", "--spec-steps", "0"], 0),
        ("simulator", ["sim", "--profile", "eagle3", "--speculative-num-steps", "0"], 0),
        ("simulator", ["sim", "--profile", "eagle3", "--speculative-num-steps=1"], 1),
        ("simulator", [*SIM_VLLM, '--speculative-config={"num_speculative_tokens":0}'], 0),
        ("simulator", [*SIM_VLLM, "--speculative-config", '{"num_speculative_tokens":2}'], 2),
        # The simulator refuses vLLM's flag without vLLM's metrics, and a load-adaptive one
        # has no single length.
        ("simulator", ["sim", "--speculative-config", '{"num_speculative_tokens":2}'], None),
        ("simulator", ["sim", "--speculative-adaptive", "--speculative-num-steps", "3"], None),
        ("custom", ["server"], None),
    ],
)
def test_the_draft_length_is_read_where_each_engine_states_it(
    engine: str, argv: list[str], expected: int | None
) -> None:
    assert draft_length(engine, argv) == expected


@pytest.mark.parametrize(
    ("extra", "axis"),
    [
        ([], "--speculative-num-steps"),
        (
            ["--metrics-style", "vllm", "--speculative-config", '{"num_speculative_tokens":2}'],
            "--speculative-config.num_speculative_tokens",
        ),
    ],
    ids=["sglang-flags", "vllm-flags"],
)
def test_matrix_simulator_variants_read_as_off_and_their_k_on_the_schedule(
    make_profile: Callable[..., ServerProfile], tmp_path: Path, extra: list[str], axis: str
) -> None:
    # The variants keep the speculative --profile eagle3 (3 drafts) and set the draft length
    # with the engine flag, which the simulator honours over the profile.
    base = make_profile(
        name="Sim", launch_argv=["sim", "--profile", "eagle3", *extra], speculative=True
    )
    variants = matrix_variants(user=None, base=base, axes={axis: [1, 3]}, include_off=True)
    experiment = services.experiment_create(
        profiles=variants, levels=sorted(BASELINE), load={"requests_per_level": 40}, repeats=1
    )
    k1 = {c: (BASELINE[c] + EAGLE3[c]) / 2 for c in BASELINE}
    figures = {"Sim [off]": BASELINE, "Sim [K=1]": k1, "Sim [K=3]": EAGLE3}
    for i, step in enumerate(experiment.steps.select_related("arm__profile")):
        make_sweep(
            step.arm.profile, figures[step.arm.profile.name], tmp=tmp_path, step=step, seed=i
        )
    schedule = experiment_schedule(experiment=experiment)
    assert schedule["available"], schedule["message"]
    assert {v["name"]: v["draft_length"] for v in schedule["variants"]} == {
        "Sim [off]": 0, "Sim [K=1]": 1, "Sim [K=3]": 3,
    }  # fmt: skip


def test_a_clean_crossover_gives_two_bands_and_the_vllm_schedule(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    experiment = constructed_experiment(
        make_profile,
        [("eagle3", "vllm", vllm_argv(VLLM_EAGLE3), EAGLE3),
         ("baseline", "vllm", vllm_argv(None), BASELINE)],
        tmp_path,
    )  # fmt: skip
    schedule = experiment_schedule(experiment=experiment)
    assert schedule["available"], schedule["message"]
    assert schedule["reference"] == "baseline"  # the simplest arm, whatever the arm order
    bands = [(b["start"], b["end"], b["draft_length"], b["levels"]) for b in schedule["bands"]]
    assert bands == [(1, 8, 3, [1, 8]), (9, None, 0, [64])]
    first: Any
    last: Any
    first, last = schedule["bands"]
    assert first["gain_low"] > 1.0 and first["expected_gain"] > first["gain_low"]
    assert last["gain_low"] > 1.0  # baseline conclusively ahead when saturated
    (vllm,) = schedule["configs"]
    assert vllm["engine"] == ENGINE_NAMES["vllm"]
    argv = shlex.split(vllm["value"])
    assert argv[0] == "--speculative-config"
    assert json.loads(argv[1]) == {
        **VLLM_EAGLE3, "num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 256, 0]],
    }  # fmt: skip


def test_simulator_arms_get_every_engines_configuration(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    experiment = constructed_experiment(
        make_profile,
        [("sim base", "simulator", ["sim", "--profile", "baseline"], BASELINE),
         ("sim eagle3", "simulator", ["sim", "--profile", "eagle3"], EAGLE3)],
        tmp_path,
    )  # fmt: skip
    schedule = experiment_schedule(experiment=experiment)
    assert [b["draft_length"] for b in schedule["bands"]] == [3, 0]
    assert len(schedule["configs"]) == 4
    sglang = next(c for c in schedule["configs"] if c["file_name"])
    assert json.loads(sglang["file_text"]) == {
        "1": {"candidate_steps": [3]}, "9": {"candidate_steps": [0]},
    }  # fmt: skip


def test_arms_without_a_readable_draft_length_are_named(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    experiment = constructed_experiment(
        make_profile,
        [("plain", "sglang", ["sglang"], BASELINE),
         ("eagle default", "sglang", ["sglang", "--speculative-algorithm", "EAGLE3"], EAGLE3)],
        tmp_path,
    )  # fmt: skip
    schedule = experiment_schedule(experiment=experiment)
    assert schedule["available"] is False
    assert "arm B (eagle default)" in schedule["message"]
    assert "--speculative-num-steps" in schedule["message"]
    assert "plain" not in schedule["message"]


def _three_arms(make_profile: Callable[..., ServerProfile], tmp: Path, n: int) -> object:
    arms = [(f"base {n}", "vllm", vllm_argv(None), BASELINE),
            (f"eagle3 {n}", "vllm", vllm_argv(VLLM_EAGLE3), EAGLE3),
            (f"eagle3 k1 {n}", "vllm", vllm_argv({**VLLM_EAGLE3, "num_speculative_tokens": 1}),
             {c: v * 1.01 for c, v in BASELINE.items()})]  # fmt: skip
    return constructed_experiment(make_profile, arms[:n], tmp)


def test_the_comparison_page_shows_the_schedule_in_a_fixed_number_of_queries(
    make_profile: Callable[..., ServerProfile], tmp_path: Path, client: Client, viewer: object
) -> None:
    two = _three_arms(make_profile, tmp_path, 2)
    three = _three_arms(make_profile, tmp_path, 3)
    counts = []
    for experiment in (two, three):
        with CaptureQueriesContext(connection) as queries:
            experiment_schedule(experiment=experiment)  # type: ignore[arg-type]
        counts.append(len(queries))
    assert counts[0] == counts[1]
    client.force_login(viewer)  # type: ignore[arg-type]
    page = client.get(f"/experiments/{two.pk}/comparison/")  # type: ignore[attr-defined]
    html = page.content.decode()
    assert page.status_code == 200
    assert "Speculation schedule" in html and 'data-testid="chart-schedule"' in html
    assert "num_speculative_tokens_per_batch_size" in html
    figures = json.loads(
        html.split('id="comparison-figures" type="application/json">', 1)[1].split("</script>", 1)[
            0
        ]
    )
    steps = figures["schedule"]["data"][0]
    assert steps["line"]["shape"] == "hv" and steps["y"] == [3, 0, 0]
    assert figures["schedule"]["data"][1]["error_y"]["arrayminus"][0] > 0


def test_the_schedule_and_the_verdict_on_one_page_say_the_same(
    make_profile: Callable[..., ServerProfile], tmp_path: Path, client: Client, viewer: object
) -> None:
    # Once this page's schedule said "serve without speculation" while its verdict said
    # "disable speculation above C=1": both now come from the same statuses.
    experiment = constructed_experiment(
        make_profile,
        [("baseline", "vllm", vllm_argv(None), BASELINE),
         ("eagle3", "vllm", vllm_argv(VLLM_EAGLE3), EAGLE3)],
        tmp_path,
    )  # fmt: skip
    ServerProfile.objects.filter(name="eagle3").update(speculative=True)  # as a matrix sets it
    schedule = experiment_schedule(experiment=experiment)
    decision = schedule["decision"]
    (pairwise,) = decision["pairwise"]
    # The schedule drafts at a level exactly where the speculative arm's verdict says "on".
    on_levels = {c for b in decision["bands"] if b["action"] == "on" for c in b["levels"]}
    verdict_on = {c for b in pairwise["bands"] if b["action"] == "on" for c in b["levels"]}
    assert on_levels == verdict_on == {1, 8}
    assert [(s["start"], s["end"], s["draft_length"]) for s in decision["steps"]] == [
        (s["start"], s["end"], s["draft_length"]) for s in schedule["steps"]
    ]
    client.force_login(viewer)  # type: ignore[arg-type]
    html = client.get(f"/experiments/{experiment.pk}/comparison/").content.decode()
    assert html_statements(html, "schedule-statement") == normalized(decision["statements"])
    verdict = html_statements(html)
    assert verdict[-1] == normalized([pairwise["recommendation"]])[0]
    assert "on up to C=8, off above" in verdict[-1]
    assert "Schedule: C=1-8 K=3; C=9 and above off" in decision["recommendation"]


def test_no_schedule_is_ranked_on_throughput_at_a_fixed_request_rate(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    experiment = constructed_experiment(
        make_profile,
        [("baseline", "vllm", vllm_argv(None), BASELINE),
         ("eagle3", "vllm", vllm_argv(VLLM_EAGLE3), EAGLE3)],
        tmp_path,
    )  # fmt: skip
    SweepLevel.objects.filter(sweep__experiment_step__experiment=experiment).update(
        summary={"mode": "rate", "target_rate": 3.0}
    )
    schedule = experiment_schedule(experiment=experiment)
    assert schedule == {"available": False, "message": RATE_MODE_MESSAGE}
    Experiment.objects.filter(pk=experiment.pk).update(state=ExperimentState.COMPLETED)
    experiment.refresh_from_db()
    with pytest.raises(ValidationError, match="fixed request rate"):
        tuning.derive(experiment)


def _record_running(experiment: Experiment, running: dict[int, list[int]]) -> None:
    """Give every completed level a steady window and the running-requests gauge readings the
    telemetry keeps with its sweep: ``running`` per C, read one a second inside the window,
    plus a reading before it and one of another kind, which must not count."""
    for level in SweepLevel.objects.filter(sweep__experiment_step__arm__experiment=experiment):
        start = 5000.0 + 100.0 * level.pk
        values = running[level.concurrency]
        level.summary = {"steady": {"window_wall": [start, start + len(values)]}}
        level.save(update_fields=["summary"])
        host = level.sweep.profile.host  # type: ignore[union-attr]
        rows = [
            TelemetrySample(host=host, sweep=level.sweep, t=start + 0.5 + i, kind="server",
                            data={"running": n})
            for i, n in enumerate(values)
        ]  # fmt: skip
        rows.append(
            TelemetrySample(host=host, sweep=level.sweep, t=start - 1, kind="server",
                            data={"running": 1})
        )  # fmt: skip
        rows.append(
            TelemetrySample(host=host, sweep=level.sweep, t=start + 1, kind="host",
                            data={"running": 1})
        )  # fmt: skip
        TelemetrySample.objects.bulk_create(rows)


def test_the_schedule_switches_on_the_batch_sizes_the_servers_reported(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    experiment = constructed_experiment(
        make_profile,
        [("eagle3", "vllm", vllm_argv(VLLM_EAGLE3), EAGLE3),
         ("baseline", "vllm", vllm_argv(None), BASELINE)],
        tmp_path,
    )  # fmt: skip
    # At C=8 the server ran 6 or 7 requests (8 in one reading of 21 per level: under the 5%
    # a batch size needs), at C=64 never below 40.
    eight = [7] * 11 + [6] * 9 + [8]
    _record_running(experiment, {1: [1] * 10, 8: eight, 64: [64] * 8 + [40, 48]})
    arms = experiment_arm_series(experiment=experiment)
    observed = running_batches(series=[series for _, series in arms])
    # Both arms' readings pooled per level; the reading before the window and the host
    # sample are left out.
    assert observed == {1: {1: 20}, 8: {6: 18, 7: 22, 8: 2}, 64: {40: 2, 48: 2, 64: 16}}
    schedule = experiment_schedule(experiment=experiment)
    bands = [(b["start"], b["end"], b["draft_length"]) for b in schedule["bands"]]
    # On C the switch is at 9 (test_a_clean_crossover_gives_two_bands_and_the_vllm_schedule);
    # here the batch sizes no level ran (8-39) go to the simpler variant: off from 8.
    assert bands == [(1, 7, 3), (8, None, 0)]
    statements = schedule["decision"]["statements"]
    assert statements[-1] == (
        "Switches placed on the running batch sizes the server reported at each level (each "
        "batch size read for at least 5% of the level's readings: C=1: 1; C=8: 6-7; "
        "C=64: 40-64)."
    )
