"""The lifecycle jobs' async face onto the database: an ``async`` twin of each persisted step
(``hosts.lifecycle.steps``, ``hosts.lifecycle.verdicts``) and service the jobs await, in the
manner of contrib.sessions' ``load`` / ``aload``.

This module is the one place the lifecycle wraps synchronous code with ``sync_to_async``, so
the jobs (``jobs.py``, ``stopping.py``) read as plain ``await store.x(...)`` and never touch
the ORM. Each twin is its sync step wrapped once: its signature is the step's own (asgiref
types the wrap with the step's parameters), so the two cannot drift apart.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async

from hosts import services
from hosts.lifecycle import steps, verdicts
from hosts.models import ServerInstance

aload_plan = sync_to_async(steps.load_plan)
astop_requested = sync_to_async(steps.stop_requested)
arecord_baseline = sync_to_async(steps.record_baseline)
arecord_launch = sync_to_async(steps.record_launch)
areadiness_progress = sync_to_async(steps.readiness_progress)
amark_ready = sync_to_async(steps.mark_ready)
anote = sync_to_async(steps.note)
aupdate_log = sync_to_async(steps.update_log)
amark_stopping = sync_to_async(steps.mark_stopping)
amark_crashed = sync_to_async(steps.mark_crashed)
amark_lost = sync_to_async(steps.mark_lost)
afail = sync_to_async(steps.fail)

amark_dirty = sync_to_async(verdicts.mark_dirty)
afinish_stop = sync_to_async(verdicts.finish_stop)
afinish_crash_cleanup = sync_to_async(verdicts.finish_crash_cleanup)
abegin_cleanup = sync_to_async(verdicts.begin_cleanup)
afinish_cleanup = sync_to_async(verdicts.finish_cleanup)

# For a job that waits on another's server (an experiment stopping its last step's server).
ainstance_stop = sync_to_async(services.instance_stop)


async def ainstance_state(instance_id: int) -> str:
    """The instance's state as stored now (a verdict may have moved it since the plan)."""
    state = await ServerInstance.objects.values_list("state", flat=True).aget(pk=instance_id)
    return str(state)
