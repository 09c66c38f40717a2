from __future__ import annotations

from benchmarks.sweeps import store as sweep_store
from benchmarks.sweeps.rows import SweepSnapshot
from core import realtime
from core.consumers import ViewerConsumer


class SweepConsumer(ViewerConsumer):
    """Live samples, finished levels and state changes of one sweep."""

    def group_name(self) -> str:
        return realtime.sweep_group(self.scope["url_route"]["kwargs"]["sweep_id"])

    async def snapshot(self) -> SweepSnapshot | None:
        sweep_id = self.scope["url_route"]["kwargs"]["sweep_id"]
        return await sweep_store.asweep_snapshot(sweep_id=sweep_id)

    # Each event goes to the page as it is (Channels calls the method named after its type).
    sweep_samples = sweep_level = sweep_state = ViewerConsumer.forward
