from __future__ import annotations

# An incremental Server-Sent Events decoder over raw bytes.
#
# Network reads split events anywhere (inside a line, between CR and LF), so the decoder keeps the
# unfinished tail between calls. Only `data:` fields matter to the load generator: comments
# (`: keep-alive`), `event:`, `id:` and `retry:` lines are skipped. Several `data:` lines in one
# event are joined with a newline, as the SSE specification says.

DONE = b"[DONE]"


class SSEDecoder:
    __slots__ = ("_data", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._data: bytes | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        """Return the data payloads of the events completed by `chunk`, in order."""
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        self._tail = lines.pop()
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if line.startswith(b"data:"):
                value = line[5:]
                if value[:1] == b" ":
                    value = value[1:]
                if value[-1:] == b"\r":
                    value = value[:-1]
                data = value if data is None else data + b"\n" + value
            elif data is not None and (not line or line == b"\r"):
                out.append(data)
                data = None
            # anything else (comments, event:, id:, retry:) carries nothing we use
        self._data = data
        return out

    def flush(self) -> list[bytes]:
        """At end of stream: an event whose terminating blank line never came still counts."""
        out = self.feed(b"\n\n") if self._tail or self._data is not None else []
        self._tail = b""
        self._data = None
        return out
