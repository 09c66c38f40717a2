from __future__ import annotations

# The simulator served by its lean HTTP server (`--http lean`): the same answers, truth log,
# keep-alive, disconnects and shutdown as under Daphne.
import json
import signal
import socket

import httpx
import pytest

from .conftest import wait_until


@pytest.fixture(scope="module")
def lean(module_sims):
    return module_sims.start(
        "--workers", "0", "--http", "lean", "--truth-log", str(module_sims.base / "truth.jsonl")
    )


def _truth(module_sims, request_id: str) -> dict:
    path = module_sims.base / "truth.jsonl"
    assert wait_until(lambda: request_id in path.read_text(), 5)
    return next(json.loads(x) for x in path.read_text().splitlines() if request_id in x)


def _raw(port: int, data: bytes, until: bytes, count: int = 1) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        got = b""
        while got.count(until) < count:
            part = sock.recv(65536)
            if not part:
                break
            got += part
        return got


def test_stream_matches_the_truth_log_and_the_connection_is_kept(lean, module_sims):
    body = {"prompt": "hi", "max_tokens": 6, "stream": True}
    body["stream_options"] = {"include_usage": True}
    with httpx.Client(timeout=10) as client:
        for rid in ("lean-1", "lean-2"):
            headers = {"X-Request-Id": rid}
            with client.stream(
                "POST", lean.url("/v1/completions"), json=body, headers=headers
            ) as resp:
                assert resp.headers["transfer-encoding"] == "chunked"
                assert resp.headers["x-request-id"] == rid
                lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
            assert lines[-1] == "data: [DONE]"
            assert json.loads(lines[-2][6:])["usage"]["completion_tokens"] == 6
            record = _truth(module_sims, rid)
            assert [n for _, n in record["chunks"]] == [1] * 6
            assert record["error"] is None


def test_unary_json_404_405_and_head(lean):
    resp = httpx.post(lean.url("/v1/completions"), json={"prompt": "x", "max_tokens": 3})
    assert resp.status_code == 200
    assert resp.headers["content-length"] == str(len(resp.content))
    assert resp.json()["usage"]["completion_tokens"] == 3
    missing = httpx.get(lean.url("/nowhere"))
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    wrong = httpx.get(lean.url("/v1/completions"))
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "POST"
    head = httpx.head(lean.url("/v1/models"))
    assert head.status_code == 200
    assert head.content == b""


def test_pipelined_and_chunked_requests_are_answered_in_order(lean):
    one = json.dumps({"prompt": "a", "max_tokens": 2, "stream": False}).encode()
    chunked = b"%x\r\n%b\r\n0\r\n\r\n" % (len(one), one)
    data = (
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n"
        b"x-request-id: pipe-1\r\n\r\n%b"
        % (len(one), one)
        + b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
        b"x-request-id: pipe-2\r\nconnection: close\r\n\r\n" + chunked
    )
    got = _raw(lean.port, data, b"HTTP/1.1 200", 2)
    first, second = got.index(b"pipe-1"), got.index(b"pipe-2")
    assert first < second
    assert got.count(b"HTTP/1.1 200 OK") == 2
    assert b"connection: close" in got[second:]


def test_bad_request_is_answered_400_and_closed(lean):
    got = _raw(lean.port, b"NOT HTTP\r\n\r\n", b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400 ")
    assert b"connection: close" in got


def test_a_client_disconnect_aborts_the_request(sims):
    truth = sims.base / "truth.jsonl"
    sim = sims.start("--workers", "0", "--http", "lean", "--t0-ms", "20", "--truth-log", str(truth))
    body = json.dumps({"prompt": "x", "max_tokens": 1000, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n"
            b"x-request-id: gone-1\r\n\r\n%b" % (len(body), body)
        )
        assert b"data: " in sock.recv(65536) or b"data: " in sock.recv(65536)
    assert wait_until(lambda: truth.exists() and "gone-1" in truth.read_text(), 10)
    record = json.loads(truth.read_text().splitlines()[-1])
    assert record["finish_reason"] == "abort"
    assert record["error"] == "client disconnected"
    assert record["completion_tokens"] < 1000


def test_sigterm_aborts_streams_and_exits_zero(sims):
    truth = sims.base / "truth.jsonl"
    sim = sims.start("--workers", "0", "--http", "lean", "--t0-ms", "20", "--truth-log", str(truth))
    body = {"prompt": "x", "max_tokens": 1000, "stream": True}
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", sim.url("/v1/completions"), json=body) as resp,
    ):
        lines = resp.iter_lines()
        assert next(lines).startswith("data: ")
        sim.proc.send_signal(signal.SIGTERM)
        list(lines)  # the aborted stream ends and the connection closes
    assert sim.proc.wait(10) == 0
    record = json.loads(truth.read_text().splitlines()[-1])
    assert record["finish_reason"] == "abort"
    assert record["error"] == "server shutdown"
    text = sim.text()
    assert "Received shutdown signal; aborting 1 requests" in text
    assert "Server stopped" in text
