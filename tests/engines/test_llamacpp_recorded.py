"""The load generator's parse of llama.cpp's per-request `timings`, on bytes a real llama-server
sent (no server needed to run these).

The fixture data/llamacpp-0c1e570/ was recorded by tests/engines/record_llamacpp.py from the
`make engines` llama-server: llama.cpp 0c1e570 as vendored in the llama-cpp-python 0.3.36
sdist, serving the project's GGUF target and draft (engines/models.py, agreement 2/3) with
`--spec-type draft-simple --spec-draft-n-max 3`, two slots. One level of five requests, two at
a time: streamed chat and completions bodies as the load generator builds them and one
non-streamed completion, with `/metrics` scraped before and after. The streams carry `timings`
on their last data event without being asked (tools/server/server-context.cpp
send_final_response copies the slot's stats into every final result; `timings_per_token` would
only add them to every event).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchlib.loadgen.acceptance import level_acceptance
from benchlib.loadgen.apis import Api, read_llamacpp_timings
from benchlib.loadgen.records import RequestRecord
from engines.models import agreement_pattern, expected_speculation
from hosts.telemetry.prometheus import parse_samples
from tests.fixtures.replay import replay

DATA = Path(__file__).parent / "data" / "llamacpp-0c1e570"
META: dict[str, Any] = json.loads((DATA / "meta.json").read_text())


async def _replay(api: Api, body: bytes) -> RequestRecord:
    return (await replay(api, body)).record


def _server_timings(body: bytes) -> dict[str, Any]:
    """The `timings` of the last event that has one, read straight from the bytes."""
    found = [
        json.loads(line[6:])["timings"]
        for line in body.decode().splitlines()
        if line.startswith("data: {") and '"timings"' in line
    ]
    assert found, "the stream carried no timings"
    timings: dict[str, Any] = found[-1]
    return timings


async def _records() -> list[tuple[RequestRecord, dict[str, Any]]]:
    out = []
    for req in META["requests"]:
        body = (DATA / req["file"]).read_bytes()
        if req["stream"]:
            rec, timings = await _replay(Api(req["api"]), body), _server_timings(body)
        else:
            timings = json.loads(body)["timings"]
            rec = RequestRecord(request_id="r", output_tokens=timings["predicted_n"])
            read_llamacpp_timings(timings, rec)
        out.append((rec, timings))
    return out


def _counter_delta(name: str) -> float:
    def value(file: str) -> float:
        return parse_samples((DATA / file).read_text())[name][()]

    return value("metrics_after.txt") - value("metrics_before.txt")


def test_the_recording_is_of_the_pinned_build_with_speculation_on() -> None:
    assert META["build_info"] == "b1-0c1e570" and META["llama_cpp_python_sdist"] == "0.3.36"
    argv = META["argv"]
    assert argv[argv.index("--spec-type") + 1] == "draft-simple" and "-md" in argv


async def test_each_request_carries_the_drafts_the_server_reported_for_it() -> None:
    expected = expected_speculation(
        agreement_pattern(META["agreement"]), n_max=META["n_max"], max_tokens=META["max_tokens"]
    )
    for rec, timings in await _records():
        assert rec.ok, rec.error
        assert rec.output_tokens == timings["predicted_n"] == META["max_tokens"]
        assert (rec.spec_drafted, rec.spec_accepted) == (
            timings["draft_n"], timings["draft_n_accepted"],
        )  # fmt: skip
        # ... which are what the construction makes llama-server's draft loop do.
        assert (rec.spec_drafted, rec.spec_accepted) == (expected.draft_tokens, expected.accepted)
        # Verify steps: the first token came from the prompt, each step gave accepted + 1.
        assert rec.spec_steps == expected.drafts


async def test_a_levels_per_request_sums_equal_the_servers_counter_deltas() -> None:
    records = [rec for rec, _ in await _records()]
    assert len(records) == len(META["requests"]) == 5
    got = level_acceptance(records)
    assert got["reporting"] == 5
    assert got["draft_tokens"] == _counter_delta("llamacpp:spec_decode_num_draft_tokens_total")
    assert got["accepted_tokens"] == _counter_delta(
        "llamacpp:spec_decode_num_accepted_tokens_total"
    )
    assert got["verify_steps"] == _counter_delta("llamacpp:spec_decode_num_drafts_total")
    assert got["output_tokens"] == _counter_delta("llamacpp:tokens_predicted_total")
    # The acceptance rate from the requests is the counters' rate, exactly.
    assert got["acceptance_rate"] == pytest.approx(
        _counter_delta("llamacpp:spec_decode_num_accepted_tokens_total")
        / _counter_delta("llamacpp:spec_decode_num_draft_tokens_total")
    )
