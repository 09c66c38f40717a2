from __future__ import annotations

from typing import Any

from benchmarks.experiments import store as experiment_store
from core import realtime
from core.consumers import ViewerConsumer


class ExperimentConsumer(ViewerConsumer):
    """Step and state changes of one experiment (its sweeps have their own groups)."""

    def group_name(self) -> str:
        return realtime.experiment_group(self.scope["url_route"]["kwargs"]["experiment_id"])

    async def snapshot(self) -> dict[str, Any] | None:
        experiment_id = self.scope["url_route"]["kwargs"]["experiment_id"]
        return await experiment_store.aexperiment_snapshot(experiment_id=experiment_id)

    # Each event goes to the page as it is (Channels calls the method named after its type).
    experiment_state = experiment_step = ViewerConsumer.forward
