"""POST /experiments/matrix, POST /experiments/{id}/verify, GET /experiments/{id}/verification."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import Client

from benchmarks.experiments import services
from benchmarks.experiments.matrix import matrix_variants
from benchmarks.experiments.models import Experiment
from benchmarks.sweeps.models import SweepLevel
from hosts.models import ServerProfile
from perf.bench_schedule import print_check
from specdash.api.client import SpecdashClient
from tests.benchmarks.experiments.test_tuning import LOAD, MATRIX, SIM, complete_with
from tests.fixtures.statements import html_statements, normalized
from tests.specdash.api.conftest import ApiClient, error_of


def test_matrix_creates_the_variants_and_an_experiment_with_them_as_arms(
    as_operator: ApiClient, make_profile: Callable[..., ServerProfile]
) -> None:
    base = make_profile(name="Sim", launch_argv=SIM, speculative=True)
    response = as_operator.post(
        "/api/v1/experiments/matrix",
        {"profile": base.pk, "axes": {"--speculative-num-steps": [1, 3]}, "include_off": True,
         "levels": [1, 2], "load": LOAD},
    )  # fmt: skip
    assert response.status_code == 202, response.content
    body = response.json()
    experiment = Experiment.objects.get(pk=body["experiment"]["id"])
    arms = list(experiment.arms.order_by("position").select_related("profile"))
    assert [a.profile.name for a in arms] == ["Sim [off]", "Sim [K=1]", "Sim [K=3]"]
    assert arms[1].profile.launch_argv == [*SIM, "--speculative-num-steps", "1"]
    assert experiment.levels == [1, 2]
    assert (experiment.repeats, experiment.order) == (2, "interleaved")
    steps = experiment.steps.order_by("index").values_list("arm__label", flat=True)
    assert list(steps) == ["A", "B", "C", "C", "B", "A"]
    assert body["job_url"] == f"/api/v1/jobs/{body['job']['id']}"


def test_matrix_with_a_key_axis_on_a_flag_the_base_lacks_is_422_and_creates_nothing(
    as_operator: ApiClient, make_profile: Callable[..., ServerProfile]
) -> None:
    base = make_profile(launch_argv=SIM)
    profiles, experiments = ServerProfile.objects.count(), Experiment.objects.count()
    response = as_operator.post(
        "/api/v1/experiments/matrix",
        {"profile": base.pk, "axes": {"--speculative-config.num_speculative_tokens": [1, 3]},
         "levels": [1]},
    )  # fmt: skip
    assert response.status_code == 422
    error = error_of(response)
    assert "--speculative-config is not in the base argv" in error["message"]
    assert "axes" in error["fields"]
    assert (ServerProfile.objects.count(), Experiment.objects.count()) == (profiles, experiments)


def test_matrix_with_empty_or_non_scalar_values_is_422(
    as_operator: ApiClient, make_profile: Callable[..., ServerProfile]
) -> None:
    base = make_profile(launch_argv=SIM)
    for values, message in (([], "non-empty list"), ([[1]], "numbers or strings")):
        response = as_operator.post(
            "/api/v1/experiments/matrix",
            {"profile": base.pk, "axes": {"--spec-steps": values}, "levels": [1]},
        )
        assert response.status_code == 422
        assert message in error_of(response)["message"]


def test_matrix_needs_the_operator_role(
    as_viewer: ApiClient, make_profile: Callable[..., ServerProfile]
) -> None:
    base = make_profile(launch_argv=SIM)
    response = as_viewer.post(
        "/api/v1/experiments/matrix",
        {"profile": base.pk, "axes": {"--spec-steps": [1, 2]}, "levels": [1]},
    )
    assert response.status_code == 403
    assert ServerProfile.objects.count() == 1 and Experiment.objects.count() == 0


def test_matrix_of_an_unknown_profile_is_404(as_operator: ApiClient) -> None:
    response = as_operator.post(
        "/api/v1/experiments/matrix",
        {"profile": 999, "axes": {"--spec-steps": [1, 2]}, "levels": [1]},
    )
    assert response.status_code == 404


def test_verify_queues_the_tuned_arm_with_every_fixed_variant_and_reports_per_level(
    as_operator: ApiClient, as_viewer: ApiClient, make_profile: Callable[..., ServerProfile],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(settings, "SPECDASH_DATA_DIR", tmp_path / "data")
    base = make_profile(name="Sim", launch_argv=SIM, speculative=True)
    variants = matrix_variants(
        user=None, base=base, axes={"--speculative-num-steps": [1, 3]}, include_off=True
    )
    first = services.experiment_create(profiles=variants, levels=[1, 2, 8], load=LOAD, repeats=2)
    complete_with(first, MATRIX, tmp_path)

    assert as_viewer.post(f"/api/v1/experiments/{first.pk}/verify").status_code == 403
    response = as_operator.post(f"/api/v1/experiments/{first.pk}/verify", {"repeats": 2})
    assert response.status_code == 202, response.content
    follow_up = Experiment.objects.get(pk=response.json()["experiment"]["id"])
    assert follow_up.repeats == 2
    names = list(follow_up.arms.order_by("position").values_list("profile__name", flat=True))
    assert names == ["Sim [schedule]", "Sim [off]", "Sim [K=1]", "Sim [K=3]"]

    # The follow-up measured: the tuned arm matches the best fixed choice at each level.
    tuned_values = {1: (201, 202), 2: (331, 332), 8: (601, 604)}
    complete_with(follow_up, {c: (tuned_values[c], *MATRIX[c]) for c in MATRIX}, tmp_path)
    report = as_viewer.get(f"/api/v1/experiments/{follow_up.pk}/verification")
    assert report.status_code == 200
    body = report.json()
    assert body["ok"] is True and body["tuned"] == "Sim [schedule]"
    assert [row["best_fixed"] for row in body["levels"]] == ["Sim [K=3]", "Sim [K=3]", "Sim [off]"]
    assert body["verdict"].startswith("The schedule is at least as good as every fixed choice")
    # The decision behind it: the schedule against each fixed variant, per level, with its
    # status (what bench_schedule prints).
    pairs = body["decision"]["pairwise"]
    assert [p["reference"]["name"] for p in pairs] == body["fixed"]
    assert all(p["candidate"]["name"] == "Sim [schedule]" for p in pairs)
    assert all(lv["status"] != "behind" for p in pairs for lv in p["levels"])
    assert body["decision"]["statements"][0] == body["verdict"]
    # Margin 0 by default (the verification's repeats hold the run-to-run spread), stated in
    # the verdict; a margin asked for is stated instead.
    assert body["margin"] == 0.0 and "margin ±0%" in body["verdict"]
    loose = as_viewer.get(f"/api/v1/experiments/{follow_up.pk}/verification?margin=0.05")
    assert loose.status_code == 200 and loose.json()["margin"] == 0.05
    assert "margin ±5%" in loose.json()["verdict"]
    for bad in ("-0.01", "0.5", "x"):
        refused = as_viewer.get(f"/api/v1/experiments/{follow_up.pk}/verification?margin={bad}")
        assert refused.status_code == 422, bad


def test_verify_of_an_unfinished_experiment_is_422_and_report_of_another_is_422(
    as_operator: ApiClient, make_profile: Callable[..., ServerProfile]
) -> None:
    experiment = services.experiment_create(
        profiles=[make_profile(), make_profile()], levels=[1], load=LOAD, repeats=1
    )
    response = as_operator.post(f"/api/v1/experiments/{experiment.pk}/verify")
    assert response.status_code == 422
    assert "not completed" in error_of(response)["message"]
    response = as_operator.get(f"/api/v1/experiments/{experiment.pk}/verification")
    assert response.status_code == 422
    assert "not a schedule verification" in error_of(response)["message"]


def test_verify_runs_three_repeats_by_default_and_refuses_a_bad_count(
    as_operator: ApiClient, make_profile: Callable[..., ServerProfile],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(settings, "SPECDASH_DATA_DIR", tmp_path / "data")
    base = make_profile(name="Sim", launch_argv=SIM, speculative=True)
    variants = matrix_variants(
        user=None, base=base, axes={"--speculative-num-steps": [1, 3]}, include_off=True
    )
    first = services.experiment_create(profiles=variants, levels=[1, 2, 8], load=LOAD, repeats=2)
    complete_with(first, MATRIX, tmp_path)
    experiments = Experiment.objects.count()
    for bad in (0, 11, "three"):
        refused = as_operator.post(f"/api/v1/experiments/{first.pk}/verify", {"repeats": bad})
        assert refused.status_code == 422, bad
    refused = as_operator.post(f"/api/v1/experiments/{first.pk}/verify", {"repeat": 3})
    assert refused.status_code == 422
    assert Experiment.objects.count() == experiments

    response = as_operator.post(f"/api/v1/experiments/{first.pk}/verify")
    assert response.status_code == 202, response.content
    follow_up = Experiment.objects.get(pk=response.json()["experiment"]["id"])
    assert follow_up.repeats == 3
    assert follow_up.steps.filter(arm__position=0).count() == 3
    # Interleaved whatever the matrix's own order: A B C D D C B A A B C D.
    order = list(follow_up.steps.order_by("index").values_list("arm__label", flat=True))
    assert order == [*"ABCD", *"DCBA", *"ABCD"]


def test_the_management_command_verifies_with_the_repeat_count_and_prints_the_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[Any] = []
    report = {
        "ok": False, "verdict": "The schedule is not at least as good ...",
        "levels": [{"concurrency": 8, "best_fixed": "Sim [off]",
                    "ratio": {"point": 0.9, "low": 0.85, "high": 0.93, "method": "welch"}}],
    }  # fmt: skip

    def post(self: Any, path: str, body: Any = None) -> Any:
        sent.append((path, body))
        return {"experiment": {"id": 7, "state": "queued"}}

    def get(self: Any, path: str, **params: Any) -> Any:
        sent.append((path, params))
        return report

    def wait_finished(self: Any, path: str, *, timeout: float = 0) -> Any:
        return {"id": 7, "state": "completed"}

    monkeypatch.setattr(SpecdashClient, "post", post)
    monkeypatch.setattr(SpecdashClient, "get", get)
    monkeypatch.setattr(SpecdashClient, "wait_finished", wait_finished)
    out = io.StringIO()
    call_command("specdash", "--token", "t", "experiment", "verify", "3", stdout=out)
    assert sent == [("/experiments/3/verify", {})]
    assert out.getvalue().strip() == "experiment 7 queued"
    sent.clear()
    with pytest.raises(CommandError, match="not at least as good"):
        call_command("specdash", "--token", "t", "experiment", "verify", "3", "--repeats", "5",
                     "--margin", "0", "--wait", stdout=out)  # fmt: skip
    assert sent == [
        ("/experiments/3/verify", {"repeats": 5}),
        ("/experiments/7/verification", {"margin": 0.0}),
    ]
    assert "C=8: tuned / Sim [off] 0.900x [0.850, 0.930]" in out.getvalue()


# The strict check's quiet run, condensed to levels 1, 2 and 8 (docs/measurement.md): K=1 ahead
# at C=1, off ahead from C=2. Two repeats per level per arm (off, K=1, K=3).
QUIET_MATRIX = {
    1: ((90.9, 91.0), (101.8, 101.7), (84.4, 84.5)),
    2: ((159.0, 159.2), (157.7, 157.5), (132.0, 132.2)),
    8: ((400.0, 401.0), (330.0, 331.0), (250.0, 251.0)),
}
# What each stored level says about its step: TPOT p50 (ms) and the accept length the
# servers' counters gave, per arm position, per C.
QUIET_STEPS = {
    0: {1: (10.80, 1.0), 2: (12.09, 1.0), 8: (20.0, 1.0)},
    1: {1: (9.44, 1.722), 2: (11.35, 1.687), 8: (24.0, 1.70)},
    2: {1: (11.36, 2.436), 2: (13.18, 2.51), 8: (32.0, 2.56)},
}


def _with_step_evidence(
    experiment: Experiment, steps: dict[int, dict[int, tuple[float, float]]]
) -> None:
    for step in experiment.steps.select_related("arm"):
        for level in SweepLevel.objects.filter(sweep__experiment_step=step):
            tpot, accept = steps[step.arm.position][level.concurrency]
            level.tpot_p50_ms = tpot
            level.summary = {
                "output_tokens": 32 * level.requests_ok,
                "requests": {"total": level.requests_ok, "ok": level.requests_ok, "failed": 0},
            }
            level.server_metrics = {"accept_length": accept, "accept_length_source": "counters"}
            level.save(update_fields=["tpot_p50_ms", "summary", "server_metrics"])


def test_the_schedule_states_its_switch_cost_and_the_verification_sets_it_beside_the_measured(
    as_operator: ApiClient, as_viewer: ApiClient, make_profile: Callable[..., ServerProfile],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: Client, viewer: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setattr(settings, "SPECDASH_DATA_DIR", tmp_path / "data")
    base = make_profile(name="Sim", launch_argv=SIM, speculative=True)
    variants = matrix_variants(
        user=None, base=base, axes={"--speculative-num-steps": [1, 3]}, include_off=True
    )
    first = services.experiment_create(profiles=variants, levels=[1, 2, 8], load=LOAD, repeats=2)
    complete_with(first, QUIET_MATRIX, tmp_path)
    _with_step_evidence(first, QUIET_STEPS)

    schedule = as_viewer.get(f"/api/v1/experiments/{first.pk}/schedule").json()
    decision = schedule["decision"]
    assert [(s["start"], s["end"], s["draft_length"]) for s in decision["steps"]] == [
        (1, 1, 1), (2, None, 0),
    ]  # fmt: skip
    (cost,) = decision["switch_costs"]
    # 159.1 / 32 completions a second x (1.722 x 9.44 - 10.80) ms at batch 1.
    assert (cost["concurrency"], cost["own"], cost["turnaround"]) == (2, "Sim [off]", "Sim [K=1]")
    assert cost["predicted_ratio"] == pytest.approx(1 / (1 + 159.1 / 32 * 5.4557e-3), abs=2e-4)
    assert cost["trade_off"] is True
    assert cost["sentence"] in decision["statements"]
    trade_off = "This is a trade-off, not a schedule never behind a fixed choice"
    assert trade_off in decision["recommendation"]
    # The page's schedule section and the HTML report print the decision's statements, the
    # cost among them, and write none of their own.
    client.force_login(viewer)
    for surface in ("comparison/", "report.html"):
        html = client.get(f"/experiments/{first.pk}/{surface}").content.decode()
        assert html_statements(html, "schedule-statement") == normalized(decision["statements"])

    response = as_operator.post(f"/api/v1/experiments/{first.pk}/verify", {"repeats": 2})
    assert response.status_code == 202, response.content
    follow_up = Experiment.objects.get(pk=response.json()["experiment"]["id"])
    # Kept from before the run: what the report compares the measurement with.
    assert follow_up.schedule_prediction == decision["switch_costs"]
    tuned = {1: (101.7, 101.8), 2: (154.8, 154.9), 8: (400.4, 400.6)}
    complete_with(follow_up, {c: (tuned[c], *QUIET_MATRIX[c]) for c in tuned}, tmp_path)
    body = as_viewer.get(f"/api/v1/experiments/{follow_up.pk}/verification").json()
    # The strict check stays strict: off is conclusively ahead at C=2, predicted or not.
    assert body["ok"] is False
    by_c = {row["concurrency"]: row for row in body["levels"]}
    # (K=1 too, as in the quiet run: 0.983 there.)
    assert by_c[2]["conclusively_worse_than"] == ["Sim [off]", "Sim [K=1]"]
    predicted = by_c[2]["predicted"]
    assert (predicted["fixed"], predicted["ratio"]) == ("Sim [off]", cost["predicted_ratio"])
    assert by_c[1]["predicted"] is None and by_c[8]["predicted"] is None
    off_pair = next(
        p for p in body["decision"]["pairwise"] if p["reference"]["name"] == "Sim [off]"
    )
    measured = next(lv for lv in off_pair["levels"] if lv["concurrency"] == 2)["ratio"]
    assert (
        f"C=2 against Sim [off]: predicted {cost['predicted_ratio']:.3f} (its turnarounds run the "
        f"K=1 step at batch 1), measured {measured['point']:.3f} (95% {measured['low']:.3f}-"
        f"{measured['high']:.3f})"
    ) in body["verdict"]
    page = client.get(f"/experiments/{follow_up.pk}/comparison/").content.decode()
    assert html_statements(page, "verification-verdict") == normalized([body["verdict"]])

    # The strict check's table prints the prediction beside the measured ratio, and still
    # counts C=2 as a failure (so it exits 1).
    comparison = as_viewer.get(f"/api/v1/experiments/{follow_up.pk}/comparison").json()
    failures, unjudged = print_check(body, comparison)
    text = f"{measured['point']:.3f} ({measured['low']:.3f}-{measured['high']:.3f})"
    guess = f"{cost['predicted_ratio']:.3f}"
    assert failures[0] == f"C=2: off ahead, {text}, predicted {guess} (a stated trade-off)"
    assert [f.split(":")[0] for f in failures] == ["C=2", "C=2"] and not unjudged
    printed = capsys.readouterr().out.splitlines()
    row = next(line.split() for line in printed if line.split()[:1] == ["2"] and "off" in line)
    assert row[row.index(text.split()[0]) + 2] == guess
