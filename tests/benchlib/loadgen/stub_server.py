from __future__ import annotations

# A tiny streaming OpenAI/SGLang-like server on loopback for the load generator's tests.
#
# Raw asyncio HTTP/1.1 with keep-alive and chunked SSE, so it needs nothing but the standard library
# and records what it was asked: request ids, bodies, and how many requests were in flight.
import argparse
import asyncio
import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STUB_MODEL = "stub-model"


@dataclass
class StubConfig:
    tokens_per_chunk: int = 1
    chunk_delay: float = 0.002
    first_delay: float = 0.005
    usage: str = "continuous"  # "continuous" | "final" | "none"
    status: int = 200


@dataclass
class StubState:
    in_flight: int = 0
    max_in_flight: int = 0
    request_ids: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    in_flight_log: list[tuple[float, int]] = field(default_factory=list)


class StubServer:
    def __init__(self, cfg: StubConfig | None = None, port: int = 0) -> None:
        self.cfg = cfg or StubConfig()
        self.state = StubState()
        self.port = port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> StubServer:
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", self.port, backlog=2048)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()  # like a process dying: no orderly end of any stream
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> StubServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                await self._handle(method, path, headers, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def _mark(self, delta: int) -> None:
        s = self.state
        s.in_flight += delta
        s.max_in_flight = max(s.max_in_flight, s.in_flight)
        s.in_flight_log.append((time.perf_counter(), s.in_flight))

    async def _handle(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        raw: bytes,
        writer: asyncio.StreamWriter,
    ) -> None:
        cfg = self.cfg
        if method == "GET" and path == "/stats":  # for tests that watch the server from outside
            st = self.state
            stats = {"in_flight": st.in_flight, "requests": len(st.request_ids)}
            payload = json.dumps(stats).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
            return
        if method == "GET" and path == "/v1/models":  # what a run without --model asks first
            models = {"object": "list", "data": [{"id": STUB_MODEL, "object": "model"}]}
            payload = json.dumps(models).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
            return
        if cfg.status != 200:
            payload = json.dumps({"error": {"message": "stub failure"}}).encode()
            writer.write(
                f"HTTP/1.1 {cfg.status} Error\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
            return
        body = json.loads(raw)
        self.state.request_ids.append(headers.get("x-request-id", ""))
        self.state.bodies.append(body)
        self._mark(1)
        try:
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            n_out = body.get("max_tokens") or body.get("sampling_params", {}).get("max_new_tokens")
            await asyncio.sleep(cfg.first_delay)
            sent = 0
            while sent < n_out:
                n = min(cfg.tokens_per_chunk, n_out - sent)
                sent += n
                last = sent >= n_out
                await self._send(writer, self._event(path, n, sent, last))
                if not last:
                    await asyncio.sleep(cfg.chunk_delay)
            if cfg.usage != "none" and path != "/generate":
                usage = {"prompt_tokens": 7, "completion_tokens": sent, "total_tokens": 7 + sent}
                await self._send(writer, {"choices": [], "usage": usage})
            await self._send_raw(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            self._mark(-1)

    def _event(self, path: str, n: int, total: int, last: bool) -> dict[str, Any]:
        if path == "/generate":
            meta = {
                "completion_tokens": total,
                "prompt_tokens": 7,
                "finish_reason": {"type": "length"} if last else None,
            }
            return {"text": "x" * total, "meta_info": meta}
        if path == "/v1/chat/completions":
            choice: dict[str, Any] = {"index": 0, "delta": {"content": "tok" * n}}
        else:
            choice = {"index": 0, "text": "tok" * n}
        choice["finish_reason"] = "length" if last else None
        obj: dict[str, Any] = {"choices": [choice]}
        if self.cfg.usage == "continuous":
            obj["usage"] = {"prompt_tokens": 7, "completion_tokens": total}
        return obj

    async def _send(self, writer: asyncio.StreamWriter, obj: dict[str, Any]) -> None:
        await self._send_raw(writer, b"data: " + json.dumps(obj).encode() + b"\n\n")

    async def _send_raw(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()


def _write_port(path: Path, port: int) -> None:
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(str(port))
    tmp.replace(path)  # atomic: the test never reads a half-written port


async def _main(args: argparse.Namespace) -> None:
    cfg = StubConfig(
        tokens_per_chunk=args.tokens_per_chunk,
        chunk_delay=args.chunk_delay,
        first_delay=args.first_delay,
        usage=args.usage,
    )
    server = await StubServer(cfg, port=args.port).start()
    if args.port_file:
        _write_port(args.port_file, server.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--chunk-delay", type=float, default=0.002)
    parser.add_argument("--first-delay", type=float, default=0.005)
    parser.add_argument("--usage", default="continuous")
    asyncio.run(_main(parser.parse_args()))
