"""A start whose run root another user took over fails with the reason, and runs nothing."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from hosts.models import InstanceState, ServerInstance
from tests.hosts.lifecycle.conftest import marker_pids, start

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_run_root_owned_by_another_user_fails_the_start_with_the_reason(
    jobs: Any, sim_profile: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = await sync_to_async(sim_profile)()
    taken = tmp_path / "shared-runs"
    taken.mkdir(mode=0o700)
    os.chown(taken, 65534, 65534)  # as if another local user had created it first
    monkeypatch.setattr(settings, "SPECDASH_RUN_ROOT", str(taken))
    instance = await start(profile)
    await asyncio.wait_for(jobs.run_next(instance.pk), 60)
    failed = await ServerInstance.objects.aget(pk=instance.pk)
    assert failed.state == InstanceState.FAILED
    assert "unsafe run directory" in failed.reason and "belongs to uid 65534" in failed.reason
    assert list(taken.iterdir()) == []
    assert marker_pids(failed.run_id) == []
