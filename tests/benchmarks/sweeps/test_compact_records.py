"""A sweep with SPECDASH_RECORDS_FORMAT=compact: the load generator writes records.sdrec, the
readers and the records.jsonl download give the same rows JSON lines would hold, and a resume
keeps the format the sweep began with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from benchlib.loadgen.recordstore import MAGIC, iter_rows
from benchmarks.sweeps import exports, handler, recording, services
from benchmarks.sweeps.models import Sweep, SweepLevel, SweepState
from benchmarks.sweeps.recordfile import read_record_file
from core.jobs import JobContext
from tests.benchmarks.conftest import Simulator, load


@pytest.fixture(autouse=True)
def _loopback_is_a_registered_host(local_host: Any) -> None:
    """The simulator listens on loopback: sweeps may run against it."""


@pytest.mark.django_db(transaction=True)
async def test_a_compact_sweep_writes_sdrec_and_serves_the_same_rows_as_json_lines(
    simulator: Simulator, settings: Any, tmp_path: Path
) -> None:
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    settings.SPECDASH_RECORDS_FORMAT = "compact"
    sweep = await sync_to_async(services.sweep_create)(
        base_url=simulator.base_url, levels=[1, 2],
        load=load(model=simulator.model, requests_per_level=12, max_tokens=4),
    )  # fmt: skip
    assert sweep.job_id is not None
    ctx = JobContext(job_id=sweep.job_id, kind="sweep.run", params={"sweep_id": sweep.pk},
                     worker_id="test")  # fmt: skip
    await handler.run_sweep(ctx)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.COMPLETED, sweep.reason
    path = Path(sweep.records_path)
    rows = await sync_to_async(_check_file)(sweep, path)
    # What the records.jsonl download (page and API) streams, under ASGI and WSGI.
    served = exports.records_file(sweep=sweep)
    assert served is not None and served.name == "records.sdrec"
    body = b"".join([chunk async for chunk in exports.aiter_file(served)])
    assert body == b"".join(await sync_to_async(lambda: list(exports.iter_file(served)))())
    assert [json.loads(line) for line in body.decode().splitlines()] == rows
    # A resume appends to the same compact file even with the setting flipped back.
    settings.SPECDASH_RECORDS_FORMAT = "jsonl"
    assert recording.sweep_records_file(sweep_id=sweep.pk) == path


def _check_file(sweep: Sweep, path: Path) -> list[dict[str, Any]]:
    """The compact file's rows, once its grouping agrees with the levels the sweep recorded."""
    assert path.name == "records.sdrec" and path.read_bytes().startswith(MAGIC)
    rows = list(iter_rows(path))
    assert len(rows) == 24
    grouped = read_record_file(path)
    assert sorted(grouped.by_level) == [(0, 1), (1, 1)]
    levels = list(SweepLevel.objects.filter(sweep=sweep))
    assert len(levels) == 2
    assert all(len(grouped.measured(lv.index, 1)) == lv.requests_ok == 12 for lv in levels)
    return rows
