"""The load generator's hot path alone on each transport (http1, aiohttp, one httpx pool):
one process, closed loop, the same SSE decoder and chunk handler (`bench_peers --transports`)."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from perf.bench_loadgen import MODEL, simulator
from perf.sglang_peer import PEER_DIR, SIM_PROFILE, Setup


async def _transport_run(kind: str, url: str, setup: Setup) -> str:
    """Closed loop of `setup` through one transport, the same SSE decoder and chunk handler."""
    from benchlib.loadgen.apis import Api, build_body, make_handler
    from benchlib.loadgen.client import _DECODE, make_client, make_httpx_client, send_request
    from benchlib.loadgen.records import RequestRecord
    from benchlib.loadgen.sse import DONE, SSEDecoder

    body = build_body(
        Api.COMPLETIONS,
        model=MODEL,
        prompt="x " * setup.input_len,
        max_tokens=setup.output_len,
        ignore_eos=True,
    )
    content = json.dumps(body).encode()
    path = url + "/v1/completions"
    c = setup.concurrency
    aiohttp: Any = None
    session: Any = None
    if kind == "aiohttp":  # the peer venv's, not a dependency of the project
        aiohttp = __import__("aiohttp")
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=c + 4),
            timeout=aiohttp.ClientTimeout(total=600),
        )
    client = make_httpx_client(c) if kind == "httpx" else make_client(c)

    async def via_aiohttp(rec: RequestRecord) -> None:
        rec.start = time.perf_counter()
        handler = make_handler(Api.COMPLETIONS, rec, None)
        decoder = SSEDecoder()
        headers = {"Content-Type": "application/json", "X-Request-Id": rec.request_id}
        async with session.post(path, data=content, headers=headers) as resp:
            async for raw in resp.content.iter_any():
                now = time.perf_counter()
                for payload in decoder.feed(raw):
                    if payload == DONE:
                        rec.end = now
                    elif not handler.handle_fast(payload, now):
                        handler.handle(_DECODE(payload.decode()), now)
        handler.finish()

    records: list[RequestRecord] = []
    numbers = iter(range(setup.requests))

    async def worker() -> None:
        for i in numbers:
            rec = RequestRecord(request_id=f"{kind}-{i}")
            if session is not None:
                await via_aiohttp(rec)
            else:
                await send_request(client, api=Api.COMPLETIONS, url=path, content=content, rec=rec)
            records.append(rec)

    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(c)))
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    await client.aclose()
    if session is not None:
        await session.close()
    tokens = sum(r.output_tokens for r in records)
    ttft = sorted(1e3 * (r.first_token - r.start) for r in records if r.first_token is not None)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    ok = sum(r.ok for r in records)
    version = f" {aiohttp.__version__}" if aiohttp is not None else ""
    return (
        f"{kind + version:<15} ok {ok:>5}  {tokens / (t1 - t0):>8,.0f} tok/s  TTFT p50 "
        f"{statistics.median(ttft):>6.0f} ms  client CPU {100 * cpu / (t1 - t0):>3.0f}%  "
        f"{1e6 * cpu / max(tokens, 1):>6.1f} us/token"
    )


def transports(setup: Setup, tmp: Path, cores: tuple[int | None, ...], rounds: int) -> None:
    """The hot path alone on http1, aiohttp and one httpx pool, in this process on core 1."""
    site = next((PEER_DIR / "lib").glob("python3*/site-packages"))
    sys.path.append(str(site))  # aiohttp from the peer venv, after the project's own packages
    print(
        "\n== the hot path alone, per transport: one process, closed loop, same setup, same SSE "
        "decoder and chunk handler; 'us/token' = this process's CPU per output token"
    )
    if cores[1] is not None:
        os.sched_setaffinity(0, {cores[1]})
    kinds = ["http1", "aiohttp", "httpx"]
    try:
        for rnd in range(1, rounds + 1):
            for kind in kinds if rnd % 2 else kinds[::-1]:
                work = tmp / f"transport-{kind}-{rnd}"
                work.mkdir()
                with simulator(SIM_PROFILE, work, cores[0], *setup.sim_args) as (url, _, _):
                    print(f"{rnd:>5} " + asyncio.run(_transport_run(kind, url, setup)), flush=True)
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
