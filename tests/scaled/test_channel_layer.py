"""The channel layer of the scaled layout, as settings configure it, against a real
redis-server: a consumer that waits longer than one blocking pop still gets its next event."""

from __future__ import annotations

import asyncio

import pytest
from channels_redis.core import RedisChannelLayer  # type: ignore[import-untyped]

from specdash.settings import redis_channel_layer
from tests.scaled.servers import Redis

pytestmark = [pytest.mark.redis]


async def test_a_receive_idle_longer_than_the_blocking_pop_gets_the_next_event(
    redis_server: Redis,
) -> None:
    # With redis-py's default 5 s read timeout this raised TimeoutError after 5 s of
    # silence, every time; a websocket consumer died with it and Daphne closed it with 1011.
    layer = RedisChannelLayer(**redis_channel_layer(redis_server.url)["CONFIG"])
    try:
        channel = await layer.new_channel()
        receiving = asyncio.ensure_future(layer.receive(channel))
        # At least one whole pop answered empty by Redis before the event comes.
        await asyncio.sleep(layer.brpop_timeout + 2)
        await layer.send(channel, {"type": "sweep.state", "sweep_id": 7})
        message = await asyncio.wait_for(receiving, timeout=60)
        assert message == {"type": "sweep.state", "sweep_id": 7}
    finally:
        await layer.close_pools()
