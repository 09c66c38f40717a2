"""The ``instance.*`` events of a server instance's group on the channel layer
(core.realtime), with the declared shape of each payload. ``hosts.services`` sends the state
and history changes after commit, the lifecycle job (``hosts.lifecycle.steps``) its readiness
stages and log tail as they come; ``hosts.consumers.InstanceConsumer`` forwards them to the
instance page as they are."""

from __future__ import annotations

from typing import TypedDict

from core.realtime import ChannelEvent
from hosts.selectors import InstanceEventRow, InstanceRow


class InstanceStatePayload(TypedDict):
    instance: InstanceRow


class InstanceReadinessPayload(TypedDict):
    """A stage of the wait for a launched server to answer, while it loads."""

    stage: str
    detail: str


class InstanceLogPayload(TypedDict):
    log_tail: str  # the last lines of the server's log, the newest last; secrets masked


INSTANCE_STATE = ChannelEvent("instance.state", InstanceStatePayload)
# An event of the instance's history, as its page lists it.
INSTANCE_EVENT = ChannelEvent("instance.event", InstanceEventRow)
INSTANCE_READINESS = ChannelEvent("instance.readiness", InstanceReadinessPayload)
INSTANCE_LOG = ChannelEvent("instance.log", InstanceLogPayload)
