"""Case 14 with real concurrency: two operators press Start at the same moment, from two
threads with their own database connections. Exactly one wins; the other gets a refusal
that names the holder."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from hosts import services
from hosts.models import GpuClaim, ServerInstance, ServerProfile
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 5


def race(profiles: list[ServerProfile]) -> list[Any]:
    """Call instance_start for each profile in its own thread, released together."""
    barrier = threading.Barrier(len(profiles))
    outcomes: list[Any] = [None] * len(profiles)

    def attempt(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            outcomes[index] = services.instance_start(profile=profiles[index])
        except Exception as exc:
            outcomes[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(len(profiles))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


@pytest.mark.parametrize("shared", ["port", "gpus"])
def test_two_simultaneous_starts_on_one_port_or_gpu_exactly_one_wins(
    make_profile: Callable[..., ServerProfile], shared: str
) -> None:
    for round_ in range(ROUNDS):
        if shared == "port":
            port = free_port()
            first = make_profile(port=port, gpu_ids=[])
            second = make_profile(port=port, gpu_ids=[])
        else:
            first = make_profile(gpu_ids=[round_, 7])
            second = make_profile(gpu_ids=[7])
        outcomes = race([first, second])
        won = [o for o in outcomes if isinstance(o, ServerInstance)]
        refused = [o for o in outcomes if isinstance(o, services.ServerConflict)]
        assert len(won) == 1 and len(refused) == 1, outcomes
        winner = won[0]
        message = str(refused[0])
        assert f"#{winner.pk}" in message
        assert (f"Port {first.port}" if shared == "port" else "GPU 7") in message
        assert ServerInstance.objects.filter(profile__in=[first, second]).count() == 1
        claims = set(GpuClaim.objects.filter(instance=winner).values_list("gpu_index", flat=True))
        assert claims == set(winner.gpu_ids)
        # Free the port and GPUs for the next round, as a verified stop would.
        services.instance_transition(instance_id=winner.pk, state="failed", message="test")
