"""A break-even map through the real Django path on the simulator: the map experiment (the
job worker, each arm's server started and stopped, the sweeps, the stored comparison), a
workload experiment with two categories placed on it, and "Verify this prediction" queued,
run and kept on the map's page beside the prediction it checks.

Short levels: 3 to 20 minutes on 2 cores as busy as they come; the figures are not judged here
(``make bench-breakeven`` does that); what is checked is that each surface shows what was
measured and stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from benchmarks.experiments import breakeven, services
from benchmarks.experiments.models import BreakevenCheck, Experiment, ExperimentState
from core.jobs.worker import Worker
from hosts.models import ServerProfile
from tests.benchmarks.experiments.test_end_to_end import until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(1200)]

EAGLE = ["--t0-ms", "12", "--k-ms", "2.9", "--spec-steps", "3"]
CHAT_L, CODE_L = 3.0, 1.8
LEVELS = [1, 8]
# 32 requests: a single run's interval needs 3 time blocks of C requests (batch means), at C=8.
LOAD = {"api": "generate", "requests_per_level": 32, "max_tokens": 64, "ignore_eos": True}


async def _finished(experiment_id: int, timeout: float) -> Experiment:
    await until(lambda: Experiment.objects.get(pk=experiment_id).is_finished, timeout=timeout)
    experiment = await Experiment.objects.aget(pk=experiment_id)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason
    return experiment


def _first_arm_profile(experiment: Experiment) -> ServerProfile:
    return experiment.arms.order_by("position").first().profile  # type: ignore[union-attr]


async def test_a_simulated_map_places_a_workload_and_keeps_the_check_of_its_prediction(
    sim_profile: Callable[..., ServerProfile], worker: Worker, client: Client, operator: Any
) -> None:
    base = await sync_to_async(sim_profile)("eagle3", *EAGLE, name="Map base", speculative=True)
    mapped = await sync_to_async(breakeven.map_create)(
        base=base, acceptances=[1.5, 3.5], levels=LEVELS, load=LOAD, user=None, repeats=1
    )
    mapped = await _finished(mapped.pk, timeout=420)
    data = await sync_to_async(breakeven.experiment_map)(experiment=mapped)
    assert data is not None
    assert data.bmap.acceptances == (1.5, 3.5) and data.bmap.levels == tuple(LEVELS)
    stored = {v["candidate_name"]: v["decision"] for v in mapped.comparison["verdicts"]}
    for cell in data.bmap.cells:
        (decision,) = [
            d for name, d in stored.items() if f"accept-length={cell.accept_length:g}" in name
        ]
        (level,) = [lv for lv in decision["levels"] if lv["concurrency"] == cell.concurrency]
        assert (cell.status, cell.ratio.point) == (level["status"], level["ratio"]["point"])

    # The workload: the same server with acceptance by category, against the map's baseline.
    workload = await sync_to_async(sim_profile)(
        "eagle3", *EAGLE, "--category-accept-length", f"chat={CHAT_L},code={CODE_L}",
        name="Workload", speculative=True,
    )  # fmt: skip
    off = await sync_to_async(_first_arm_profile)(mapped)
    run = await sync_to_async(services.experiment_create)(
        profiles=[off, workload], levels=LEVELS, load=LOAD | {"prompt_set": "mixed"}, repeats=1
    )
    run = await _finished(run.pk, timeout=300)
    placement = await sync_to_async(breakeven.placement_source)(data=data, experiment_id=run.pk)
    placed = {p.category: p for p in placement.categories}
    assert set(placed) == {"chat", "code"}
    for name, length in (("chat", CHAT_L), ("code", CODE_L)):
        for c in LEVELS:  # measured from the engine's per-request figures, about as set
            assert placed[name].acceptance[c] == pytest.approx(length, rel=0.1)
        for level in placed[name].decision.levels:
            expected = data.bmap.predict(
                placed[name].acceptance[level.concurrency], level.concurrency
            )
            assert level.ratio == expected  # the map's interpolation, carried

    # "Verify this prediction" from the page, as an operator: the real A/B of code alone.
    await sync_to_async(client.force_login)(operator)
    response = await sync_to_async(client.post)(
        f"/experiments/{mapped.pk}/breakeven/verify/", {"category": "code", "experiment": run.pk}
    )
    assert response.status_code == 302
    check = await BreakevenCheck.objects.select_related("verification").aget(map_experiment=mapped)
    assert check.verification.load["prompt_set"] == "humaneval"
    assert check.verification.repeats == 2  # the default protocol
    await _finished(check.verification_id, timeout=420)
    check = await BreakevenCheck.objects.select_related("verification").aget(pk=check.pk)
    result = await sync_to_async(breakeven.check_result)(check)
    assert result is not None and [lv.concurrency for lv in result.levels] == LEVELS
    measured = check.verification.comparison["verdicts"][0]["decision"]
    for lv, stored_level in zip(result.levels, measured["levels"], strict=True):
        assert lv.measured_status == stored_level["status"]
        low, high = stored_level["ratio"]["low"], stored_level["ratio"]["high"]
        assert lv.within == (low <= lv.predicted.point <= high)
    assert result.measured_crossover == measured["behind_from"]
    page = await sync_to_async(client.get)(
        f"/experiments/{mapped.pk}/breakeven/", {"experiment": run.pk}
    )
    text = page.content.decode()
    assert 'data-testid="check-summary"' in text and 'data-testid="placed-category"' in text
