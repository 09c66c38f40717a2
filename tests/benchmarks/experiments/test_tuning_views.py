"""The parameter-matrix page, the "Verify this schedule" button and the verification's result
on the comparison page: who may do what, and what bad input gives."""

from __future__ import annotations

from collections.abc import Callable
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from benchlib.stats.decision_verification import decide_verification
from benchmarks.experiments import forms, services, tuning
from benchmarks.experiments.level_runs import series_curve
from benchmarks.experiments.matrix import matrix_variants
from benchmarks.experiments.models import Experiment
from benchmarks.experiments.series import experiment_series
from hosts.models import ServerProfile
from tests.benchmarks.experiments.test_tuning import LOAD, MATRIX, SIM, complete_with

pytestmark = pytest.mark.django_db

PLAN = {
    "levels": "1, 4", "requests_per_level": "10", "input_tokens": "16", "max_tokens": "8",
    "api": "completions", "ignore_eos": "on", "repeats": "2", "order": "sequential",
    "warmup_requests": "0", "include_off": "on",
}  # fmt: skip


@pytest.fixture
def base(make_profile: Callable[..., ServerProfile]) -> ServerProfile:
    return make_profile(name="Sim", launch_argv=SIM, speculative=True)


@pytest.fixture
def matrix_done(base: ServerProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Experiment:
    monkeypatch.setattr(settings, "SPECDASH_DATA_DIR", tmp_path / "data")
    variants = matrix_variants(
        user=None, base=base, axes={"--speculative-num-steps": [1, 3]}, include_off=True
    )
    first = services.experiment_create(profiles=variants, levels=[1, 2, 8], load=LOAD, repeats=2)
    return complete_with(first, MATRIX, tmp_path)


def test_axes_text_is_parsed_per_line_and_bad_lines_are_named() -> None:
    axes = forms.parse_axes_text(
        "--speculative-num-steps 1, 2,3\n\n--speculative-config.method = eagle3, 0.5\n"
    )
    assert axes == {
        "--speculative-num-steps": [1, 2, 3],
        "--speculative-config.method": ["eagle3", 0.5],
    }
    for text, message in (
        ("speculative-num-steps 1", "Line 1"),
        ("--spec-steps", "Line 1"),
        ("--spec-steps 1\n--spec-steps 2", "given twice"),
        ("  \n", "at least one axis"),
    ):
        with pytest.raises(Exception, match=message):
            forms.parse_axes_text(text)


def test_preview_shows_the_variants_and_saves_nothing(
    client: Client, operator: Any, base: ServerProfile
) -> None:
    client.force_login(operator)
    data = {**PLAN, "base": base.pk, "axes": "--speculative-num-steps 1, 3", "preview": "1"}
    response = client.post("/experiments/matrix/", data)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('data-testid="matrix-variant"') == 3
    # In arm order: off first, then the axis' values, each with its argv.
    assert html.index(">off ") < html.index(">K=1<") < html.index(">K=3<")
    assert "--speculative-num-steps 3</code>" in html
    # What was typed is still in the form.
    assert "--speculative-num-steps 1, 3</textarea>" in html
    assert ServerProfile.objects.count() == 1 and not Experiment.objects.exists()


def test_launch_creates_the_variants_and_the_experiment(
    client: Client, operator: Any, base: ServerProfile
) -> None:
    client.force_login(operator)
    data = {**PLAN, "base": base.pk, "axes": "--speculative-num-steps 1, 3"}
    response = client.post("/experiments/matrix/", data)
    experiment = Experiment.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/experiments/{experiment.pk}/"
    names = list(experiment.arms.order_by("position").values_list("profile__name", flat=True))
    assert names == ["Sim [off]", "Sim [K=1]", "Sim [K=3]"]
    assert (experiment.levels, experiment.repeats) == ([1, 4], 2)
    assert experiment.created_by == operator


@pytest.mark.parametrize(
    ("axes", "field", "message"),
    [
        ("--speculative-num-steps", "axes", "write a flag then its values"),
        ("--speculative-config.num_speculative_tokens 1, 3", "axes", "not in the base argv"),
        ("--speculative-num-steps 1, 1", "axes", "repeated values"),
    ],
)
def test_bad_axes_are_shown_on_the_field_and_keep_what_was_typed(
    client: Client, operator: Any, base: ServerProfile, axes: str, field: str, message: str
) -> None:
    client.force_login(operator)
    for extra in ({"preview": "1"}, {}):
        response = client.post("/experiments/matrix/", {**PLAN, "base": base.pk, "axes": axes,
                                                         **extra})  # fmt: skip
        assert response.status_code == 400
        html = response.content.decode()
        assert f'data-testid="error-{field}"' in html and message in html
        assert f"{axes}</textarea>" in html
        assert 'value="1, 4"' in html  # the plan too
    assert ServerProfile.objects.count() == 1 and not Experiment.objects.exists()


def test_a_bad_plan_on_launch_creates_no_variant(
    client: Client, operator: Any, base: ServerProfile
) -> None:
    client.force_login(operator)
    data = {**PLAN, "base": base.pk, "axes": "--speculative-num-steps 1, 3", "levels": "0"}
    response = client.post("/experiments/matrix/", data)
    assert response.status_code == 400
    assert b'data-testid="error-levels"' in response.content
    assert ServerProfile.objects.count() == 1 and not Experiment.objects.exists()


def test_a_viewer_cannot_open_or_post_the_matrix(
    client: Client, viewer: Any, base: ServerProfile
) -> None:
    client.force_login(viewer)
    assert client.get("/experiments/matrix/").status_code == 403
    data = {**PLAN, "base": base.pk, "axes": "--speculative-num-steps 1, 3"}
    assert client.post("/experiments/matrix/", data).status_code == 403
    assert ServerProfile.objects.count() == 1 and not Experiment.objects.exists()


def test_the_experiment_form_links_to_the_matrix(client: Client, operator: Any) -> None:
    client.force_login(operator)
    response = client.get("/experiments/new/")
    assert b'href="/experiments/matrix/"' in response.content
    assert client.get("/experiments/matrix/").status_code == 200


def test_the_comparison_page_offers_verify_to_an_operator_only(
    client: Client, operator: Any, viewer: Any, matrix_done: Experiment
) -> None:
    url = f"/experiments/{matrix_done.pk}/comparison/"
    client.force_login(viewer)
    page = client.get(url).content.decode()
    assert 'data-testid="chart-schedule"' in page and 'data-testid="schedule-config"' in page
    assert 'data-testid="verify-schedule"' not in page
    assert client.post(f"/experiments/{matrix_done.pk}/verify/").status_code == 403
    assert Experiment.objects.count() == 1

    client.force_login(operator)
    page = client.get(url).content.decode()
    assert 'data-testid="verify-schedule"' in page
    assert f'action="/experiments/{matrix_done.pk}/verify/"' in page
    assert 'name="repeats" min="1" max="10" value="3"' in page


def test_verify_needs_post_and_the_csrf_token(operator: Any, matrix_done: Experiment) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.get(f"/experiments/{matrix_done.pk}/verify/").status_code == 405
    assert client.post(f"/experiments/{matrix_done.pk}/verify/").status_code == 403
    assert Experiment.objects.count() == 1
    page = client.get(f"/experiments/{matrix_done.pk}/comparison/")
    token = page.cookies["csrftoken"].value
    response = client.post(f"/experiments/{matrix_done.pk}/verify/", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Experiment.objects.count() == 2


def test_verify_queues_the_follow_up_with_three_repeats_by_default(
    client: Client, operator: Any, matrix_done: Experiment
) -> None:
    client.force_login(operator)
    response = client.post(f"/experiments/{matrix_done.pk}/verify/")
    follow_up = Experiment.objects.exclude(pk=matrix_done.pk).get()
    assert response.status_code == 302
    assert response["Location"] == f"/experiments/{follow_up.pk}/"
    assert follow_up.repeats == 3 and tuning.VERIFY_TAG in follow_up.tags
    assert follow_up.created_by == operator
    names = list(follow_up.arms.order_by("position").values_list("profile__name", flat=True))
    assert names == ["Sim [schedule]", "Sim [off]", "Sim [K=1]", "Sim [K=3]"]


def test_verify_with_bad_repeats_or_an_unfinished_experiment_says_why(
    client: Client, operator: Any, matrix_done: Experiment, make_profile: Any
) -> None:
    client.force_login(operator)
    for bad in ("0", "11", "x"):
        response = client.post(
            f"/experiments/{matrix_done.pk}/verify/", {"repeats": bad}, follow=True
        )
        assert response.redirect_chain[-1][0] == f"/experiments/{matrix_done.pk}/comparison/"
        assert "Not verified: repeats" in response.content.decode()
    queued = services.experiment_create(
        profiles=[make_profile(), make_profile()], levels=[1], load=LOAD, repeats=1
    )
    response = client.post(f"/experiments/{queued.pk}/verify/", follow=True)
    assert "not completed" in response.content.decode()
    assert client.post("/experiments/9999/verify/").status_code == 404
    assert Experiment.objects.count() == 2


def _verified(operator: Any, matrix_done: Experiment, tmp_path: Path, client: Client) -> str:
    client.force_login(operator)
    client.post(f"/experiments/{matrix_done.pk}/verify/", {"repeats": "2"})
    follow_up = Experiment.objects.exclude(pk=matrix_done.pk).get()
    tuned = {1: (201, 202), 2: (331, 332), 8: (601, 604)}
    complete_with(follow_up, {c: (tuned[c], *MATRIX[c]) for c in MATRIX}, tmp_path)
    return f"/experiments/{follow_up.pk}/comparison/"


def test_the_verification_result_per_level_with_the_verdict_and_margin(
    client: Client, operator: Any, viewer: Any, matrix_done: Experiment, tmp_path: Path
) -> None:
    url = _verified(operator, matrix_done, tmp_path, client)
    client.force_login(viewer)
    html = client.get(url).content.decode()
    assert 'data-testid="verification-section"' in html
    assert html.count('data-testid="verification-level" data-ok="true"') == 3
    assert 'data-testid="verification-verdict" data-ok="true"' in html
    assert "at least as good as every fixed choice" in html and "margin ±0%" in html
    assert "Sim [K=3]" in html and "Sim [off]" in html
    assert "margin ±5%" in client.get(url + "?margin=0.05").content.decode()
    for bad in ("x", "0.5", "-1"):
        page = client.get(url + f"?margin={bad}")
        assert page.status_code == 200
        text = page.content.decode()
        assert 'data-testid="margin-error"' in text and "margin ±0%" in text


def _verdict(html: str) -> str:
    start = html.index('data-testid="verification-verdict"')
    return unescape(html[html.index(">", start) + 1 : html.index("</p>", start)])


def test_a_verification_at_0_84x_never_says_keep_speculation_on(
    client: Client, viewer: Any, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    # tuned, off, K=1 (two runs each): tuned / K=1 is 0.84x at every level, wholly below 1.
    names = ["Sim [schedule]", "Sim [off]", "Sim [K=1]"]
    profiles = [make_profile(name=n, speculative=n != "Sim [off]") for n in names]
    values = {
        1: ((84.0, 84.2), (60.0, 60.2), (100.0, 100.2)),
        4: ((168.0, 168.4), (190.0, 190.4), (200.0, 200.4)),
    }
    experiment = services.experiment_create(
        profiles=profiles, levels=[1, 4], load=LOAD, repeats=2, tags=[tuning.VERIFY_TAG]
    )
    complete_with(experiment, values, tmp_path)
    client.force_login(viewer)
    html = client.get(f"/experiments/{experiment.pk}/comparison/").content.decode()
    assert "keep speculation on" not in html.lower()
    assert 'data-testid="verification-verdict" data-ok="false"' in html
    curves = [series_curve(s) for s in experiment_series(experiment=experiment)]
    decision = decide_verification(curves[0], curves[1:])
    # The page says the decision's own sentence, and it names K=1 ahead at both levels.
    assert _verdict(html) == decision.verdict
    assert decision.margin == 0.0 and "margin ±0%" in decision.verdict
    assert "C=1 (Sim [K=1]: 0.840x" in decision.verdict
    assert "C=4 (" in decision.verdict and "Sim [K=1]: 0.840x" in decision.verdict
    assert [lv.ahead_of_tuned for lv in decision.levels] == [
        ("Sim [K=1]",),
        ("Sim [off]", "Sim [K=1]"),
    ]


def test_a_comparison_that_is_not_a_verification_has_no_verification_section(
    client: Client, viewer: Any, matrix_done: Experiment
) -> None:
    client.force_login(viewer)
    html = client.get(f"/experiments/{matrix_done.pk}/comparison/").content.decode()
    assert 'data-testid="verification-section"' not in html


def test_a_schedule_that_keeps_one_variant_offers_no_verification(
    client: Client, operator: Any, base: ServerProfile, tmp_path: Path
) -> None:
    variants = matrix_variants(
        user=None, base=base, axes={"--speculative-num-steps": [3]}, include_off=True
    )
    experiment = services.experiment_create(profiles=variants, levels=[1, 8], load=LOAD, repeats=2)
    complete_with(experiment, {1: ((100, 101), (200, 201)), 8: ((300, 301), (400, 401))}, tmp_path)
    client.force_login(operator)
    html = client.get(f"/experiments/{experiment.pk}/comparison/").content.decode()
    assert 'data-testid="chart-schedule"' in html
    assert 'data-testid="verify-nothing"' in html and 'data-testid="verify-schedule"' not in html
