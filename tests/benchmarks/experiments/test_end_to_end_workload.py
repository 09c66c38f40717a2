"""An experiment with two prompt categories and SLOs through the real Django path: the
experiment job on a job worker, each arm's server started and stopped by the lifecycle, the
sweep job driving the load generator, the comparison stored at the end, and the pages and the
audit reading what was stored.

The simulated EAGLE arm accepts by prompt category (test_workload_simulated's design: chat 3.0,
code 1.8 tokens per verify step); the load is small (one level) to keep it short.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from benchmarks import audit
from benchmarks.experiments import services
from benchmarks.experiments.models import Experiment, ExperimentState
from benchmarks.sweeps.models import Sweep
from core.jobs.worker import Worker
from hosts.models import ServerProfile
from tests.benchmarks.experiments.test_end_to_end import until
from tests.benchmarks.experiments.test_workload_simulated import BASELINE, CHAT_L, CODE_L, EAGLE

pytestmark = pytest.mark.django_db(transaction=True)

SLO = {"ttft_ms": 5000.0, "scope": "request", "attainment": 0.9}
LOAD = {"api": "generate", "prompt_set": "mixed", "requests_per_level": 16, "max_tokens": 96,
        "ignore_eos": True, "warmup_requests": 2, "slo": SLO}  # fmt: skip


def _row(comparison: dict[str, Any], label: str) -> dict[str, Any]:
    series = next(s for s in comparison["series"] if s["label"] == label)
    (row,) = series["levels"]
    return dict(row)


async def test_an_experiment_with_two_categories_and_slos_through_the_job_worker(
    sim_profile: Callable[..., ServerProfile], worker: Worker, client: Client, viewer: Any
) -> None:
    # The shared simulator arguments without their --profile (the fixture gives it).
    baseline = await sync_to_async(sim_profile)("baseline", *BASELINE[2:], name="Sim base")
    eagle = await sync_to_async(sim_profile)(
        "eagle3", *EAGLE[2:], name="Sim EAGLE", speculative=True
    )
    experiment = await sync_to_async(services.experiment_create)(
        profiles=[baseline, eagle], levels=[4], load=LOAD, repeats=1
    )
    await until(lambda: Experiment.objects.get(pk=experiment.pk).is_finished, timeout=100)
    experiment = await Experiment.objects.aget(pk=experiment.pk)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason

    comparison = experiment.comparison
    b = _row(comparison, "B")
    assert set(b["by_category"]) == {"chat", "code"}
    # Each category's accept length as configured, measured from the engine's per-request
    # figures over about 8 requests of 96 tokens each (a few percent of draw noise).
    assert b["by_category"]["chat"]["accept_length"] == pytest.approx(CHAT_L, rel=0.08)
    assert b["by_category"]["code"]["accept_length"] == pytest.approx(CODE_L, rel=0.08)
    assert _row(comparison, "A")["accept_length"] is None  # no speculation, no figure
    # The SLOs reached each level's summary through the sweep job: goodput per level and the
    # goodput verdict, both arms meeting a TTFT target this loose.
    assert comparison["slo"]["ttft_ms"] == 5000.0
    for label in ("A", "B"):
        row = _row(comparison, label)
        assert row["meets_slo"] is True and row["goodput_share"] == 1.0
        assert row["goodput_tok_s"] == pytest.approx(row["output_tok_s"], rel=1e-9)
    assert comparison["goodput_verdicts"] and comparison["goodput_verdicts"][0]["text"]

    # What the runner stored passes the audit (summaries, goodput and the comparison).
    report = await sync_to_async(audit.audit_experiment)(experiment=experiment)
    assert report.problems == [] and report.levels_checked == 2
    # The runner audited it at the end and kept the outcome (each sweep's on the sweep).
    assert experiment.audit["ok"] is True and experiment.audit["comparisons_checked"] == 1
    assert experiment.audit["levels_checked"] == 2

    # The eagle arm's sweep page shows the per-category acceptance and the goodput.
    sweep = await Sweep.objects.aget(
        experiment_step__experiment=experiment, experiment_step__arm__label="B"
    )
    await sync_to_async(client.force_login)(viewer)
    page = (await sync_to_async(client.get)(f"/sweeps/{sweep.pk}/")).content.decode()
    assert 'data-testid="category-row"' in page and 'data-category="code"' in page
    assert 'data-testid="goodput-row"' in page
