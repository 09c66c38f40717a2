from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile

from benchlib.loadgen.events import EventWriter


def test_a_failed_write_to_a_closed_pipe_reports_broken_once_and_stops_writing():
    r, w = os.pipe()
    calls: list[int] = []
    stream = os.fdopen(w, "w")
    try:
        writer = EventWriter(stream, on_broken=lambda: calls.append(1))
        writer.emit("sample", n=1)
        assert os.read(r, 1000) == b'{"event":"sample","n":1}\n'
        os.close(r)
        writer.emit("sample", n=2)
        writer.emit("sample", n=3)
        writer.close()
        assert writer.broken is True
        assert writer.stream is None
        assert calls == [1]
    finally:
        with contextlib.suppress(BrokenPipeError):
            stream.close()  # the undeliverable line is still buffered


async def test_the_pipe_watch_notices_a_closed_reader_without_any_write():
    r, w = os.pipe()
    calls: list[int] = []
    with os.fdopen(w, "w") as stream:
        writer = EventWriter(stream, on_broken=lambda: calls.append(1))
        watch = asyncio.create_task(writer.watch(interval=0.01))
        await asyncio.sleep(0.05)
        assert calls == []  # an open reader is left alone
        os.close(r)
        await asyncio.wait_for(watch, timeout=10)
        assert calls == [1]
        assert writer.broken is True


async def test_the_pipe_watch_leaves_a_regular_file_alone():
    with tempfile.TemporaryFile("w") as f:
        writer = EventWriter(f, on_broken=lambda: None)
        watch = asyncio.create_task(writer.watch(interval=0.01))
        await asyncio.sleep(0.1)
        assert not watch.done()
        assert writer.broken is False
        watch.cancel()
