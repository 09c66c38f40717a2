"""The real vLLM (CPU build) with ngram speculation, swept twice through the sweep job: both
speculative figures of every level (tokens per engine step from the ITL counters, accept length
per drafted step from the speculative counters), each with its source, on the comparison of the
two sweeps and in its CSV; the server's counters moved by the measured requests alone (two
warm-up requests before every level, outside its interval).

One server start (1-5 minutes on 2 busy cores).
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from benchlib.loadgen.recordstore import iter_rows
from benchmarks.experiments import comparison as comparisons
from benchmarks.experiments import report
from benchmarks.experiments.series import sweep_series
from benchmarks.sweeps import handler, services
from benchmarks.sweeps.models import Sweep, SweepLevel, SweepState
from core.jobs import JobContext
from core.models import Job
from hosts.models import Host
from tests.engines.vllm.conftest import vllm_api_server
from tests.fixtures.ports import free_port

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]

# The tiny target walks a cycle of 95 characters (engines/models_hf.py): past it, the output
# repeats itself, so the prompt lookup finds its n-grams and drafts are accepted.
MAX_TOKENS = 160
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
         "prompt_lookup_max": 4}  # fmt: skip


@pytest.fixture
def vllm_ngram(hf_models: dict[str, Path], tmp_path: Path) -> Iterator[str]:
    extra = ["--max-model-len", "512", "--max-num-seqs", "8",
             "--speculative-config", json.dumps(NGRAM)]  # fmt: skip
    with vllm_api_server(
        hf_models["tiny-llama-target"], free_port(), tmp_path / "vllm.log", extra
    ) as base_url:
        yield base_url


def _swept(base_url: str) -> Sweep:
    sweep = services.sweep_create(
        base_url=base_url, levels=[1, 2],
        load={"api": "completions", "model": "tiny", "requests_per_level": 4,
              "max_tokens": MAX_TOKENS, "input_tokens": 12, "temperature": 0.0,
              "ignore_eos": True, "warmup_requests": 2},
    )  # fmt: skip
    assert sweep.job_id is not None
    job = Job.objects.get(pk=sweep.job_id)
    ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")

    async def run() -> handler.SweepRunResult:
        return await asyncio.wait_for(handler.run_sweep(ctx), 600)

    assert async_to_sync(run)()["state"] == SweepState.COMPLETED
    return Sweep.objects.get(pk=sweep.pk)


def _measured_out(sweep: Sweep, index: int) -> list[int]:
    rows = list(iter_rows(Path(sweep.records_path)))
    return [r["out"] for r in rows if r["level"] == index and not r.get("warmup")]


def test_ngram_speculation_shows_both_figures_with_their_sources(
    vllm_ngram: str, transactional_db: Any, local_host: Host, settings: Any, tmp_path: Path
) -> None:
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    sweeps = [_swept(vllm_ngram), _swept(vllm_ngram)]
    for sweep in sweeps:
        for level in SweepLevel.objects.filter(sweep=sweep).order_by("index"):
            m = level.server_metrics
            assert m["available"], m
            # The counters moved by the measured requests alone: the warm-up is outside.
            assert m["generation_tokens"] == sum(_measured_out(sweep, level.index)), m
            assert m["tokens_per_step_source"] == "itl_counters"
            assert m["accept_length_source"] == "counters", m
            # Past the cycle the lookup's drafts are the target's own next tokens: accepted.
            assert m["spec_drafts"] > 0 and m["accept_length"] > 1.5, m
            # Per engine step at most what a drafted step gives (not every step drafts).
            assert 1.0 <= m["tokens_per_step"] <= m["accept_length"] + 1e-9, m
    series = sweep_series(sweeps=sweeps)
    comparison = comparisons.comparison_build(series=series, slo=None)
    lines = list(csv.DictReader(io.StringIO(report.comparison_csv(comparison))))
    assert len(lines) == len(comparison["rows"]) == 2
    for row, line in zip(comparison["rows"], lines, strict=True):
        for label in ("A", "B"):
            cell = next(c for c in row["cells"] if c["label"] == label)
            assert cell["accept_length_source"] == "counters"
            assert cell["tokens_per_step_source"] == "itl_counters"
            assert line[f"{label}_accept_length_source"] == "counters"
            assert line[f"{label}_tokens_per_step_source"] == "itl_counters"
            assert float(line[f"{label}_accept_length"]) == pytest.approx(cell["accept_length"])
            assert float(line[f"{label}_tokens_per_step"]) == pytest.approx(cell["tokens_per_step"])
