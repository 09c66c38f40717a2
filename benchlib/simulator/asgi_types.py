"""The ASGI interface (asgiref's specification, version 3) between the simulator's app and the
servers that run it (its own lean server, uvicorn): the scope and the messages, as far as the
app and the lean server read or write them. Which keys a message has depends on its ``type``
(``http.request``, ``http.response.start``, ``lifespan.startup``, ...), hence ``total=False``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Required, TypedDict

Headers = list[tuple[bytes, bytes]]


class Scope(TypedDict, total=False):
    type: Required[str]  # "http" or "lifespan"
    asgi: dict[str, str]
    http_version: str
    method: str
    scheme: str
    path: str
    raw_path: bytes
    query_string: bytes
    root_path: str
    headers: Headers
    client: tuple[str, int] | None
    server: tuple[str, int] | None


class Message(TypedDict, total=False):
    type: Required[str]
    body: bytes  # http.request, http.response.body
    more_body: bool
    status: int  # http.response.start
    headers: Headers


Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
