"""A minimal websocket client (RFC 6455) for the tests: connect with a session cookie and an
Origin, then read JSON text messages. Written here because the one websocket library in the
environment (autobahn, through Daphne) is bound to Twisted in a pytest-django process."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import struct
from typing import Any
from urllib.parse import urlparse

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONTINUATION, OP_TEXT, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x8, 0x9, 0xA


class WebSocket:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def connect(cls, url: str, *, cookie: str, origin: str) -> WebSocket:
        parsed = urlparse(url)
        assert parsed.hostname is not None and parsed.port is not None
        reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port)
        key = base64.b64encode(os.urandom(16))
        request = (
            f"GET {parsed.path} HTTP/1.1\r\nHost: {parsed.hostname}:{parsed.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key.decode()}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: {origin}\r\nCookie: {cookie}\r\n\r\n"
        )
        writer.write(request.encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
        status, *lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in status + " ":
            writer.close()
            raise ConnectionError(f"websocket refused: {status}")
        headers = {
            k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines if ":" in ln)
        }
        expected = base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode()
        if headers.get("sec-websocket-accept") != expected:
            writer.close()
            raise ConnectionError("bad Sec-WebSocket-Accept")
        return cls(reader, writer)

    async def _frame(self) -> tuple[bool, int, bytes]:
        b1, b2 = await self._reader.readexactly(2)
        length = b2 & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await self._reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await self._reader.readexactly(8))
        mask = await self._reader.readexactly(4) if b2 & 0x80 else b""
        data = await self._reader.readexactly(length)
        if mask:
            data = bytes(c ^ mask[i % 4] for i, c in enumerate(data))
        return bool(b1 & 0x80), b1 & 0x0F, data

    def _send(self, opcode: int, payload: bytes) -> None:
        # Client frames are masked (RFC 6455 5.3); payloads here are tiny control frames.
        mask = os.urandom(4)
        masked = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
        self._writer.write(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    async def _message(self) -> dict[str, Any]:
        parts: list[bytes] = []
        while True:
            fin, opcode, data = await self._frame()
            if opcode == OP_PING:
                self._send(OP_PONG, data[:125])
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else None
                return {"type": "closed", "code": code}
            if opcode in (OP_TEXT, OP_CONTINUATION):
                parts.append(data)
                if fin:
                    message: dict[str, Any] = json.loads(b"".join(parts).decode("utf-8"))
                    return message

    async def receive(self, timeout: float) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(self._message(), timeout)
        except asyncio.IncompleteReadError:
            return {"type": "closed", "code": None}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._send(OP_CLOSE, struct.pack("!H", 1000))
        self._writer.close()
