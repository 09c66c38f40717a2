"""Traces uploaded through the dashboard: stored in the trace folder only when the whole file
reads as a trace in its detected format, never over a different file, by those who may run
sweeps; then a choice of the sweep form's Trace setting."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings
from django.urls import reverse

from benchmarks.sweeps import services, traces
from specdash.limits import TRACE_UPLOAD_PATH

pytestmark = pytest.mark.django_db

MOONCAKE = (
    '{"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]}\n'
    '{"timestamp": 250, "input_length": 540, "output_length": 12, "hash_ids": [0, 2]}\n'
    '{"timestamp": 1000, "input_length": 100, "output_length": 8, "hash_ids": [3]}\n'
)
BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "7,ChatGPT,1087,0,1087,Conversation log\n"
    "9,GPT-4,310,52,362,API log\n"
)
OURS = '{"t": 0.0, "input_tokens": 32, "output_tokens": 8}\n{"t": 0.5, "input_tokens": 40, "output_tokens": 4}\n'


@pytest.fixture
def folder(tmp_path: Path) -> Any:
    with override_settings(SPECDASH_TRACE_DIR=tmp_path / "traces"):
        yield tmp_path / "traces"


def _upload(client: Client, name: str, text: str | bytes, *, as_name: str = "") -> Any:
    data = text.encode() if isinstance(text, str) else text
    body = {"file": SimpleUploadedFile(name, data), "name": as_name}
    return client.post("/traces/upload/", body)


def _errors(page: str) -> list[str]:
    return re.findall(r'<span class="error" data-testid="error-\w+">(.*?)</span>', page, re.S)


@pytest.mark.parametrize(
    ("name", "text", "fmt", "requests", "span"),
    [
        ("mc.jsonl", MOONCAKE, "mooncake", 3, 1.0),
        ("burst.csv", BURSTGPT, "burstgpt", 2, 4.0),  # the 0-token row is a failed request
        ("ours.jsonl", OURS, "jsonl", 2, 0.5),
    ],
)
def test_a_trace_in_each_format_is_stored_as_sent_and_offered_on_the_sweep_form(
    client: Client, operator: Any, folder: Path, name: str, text: str, fmt: str,
    requests: int, span: float,
) -> None:  # fmt: skip
    client.force_login(operator)
    response = _upload(client, name, text)
    assert response.status_code == 302, _errors(response.content.decode())
    assert (folder / name).read_bytes() == text.encode()  # nothing lost, nothing added
    assert [p.name for p in folder.iterdir()] == [name]  # no part file left behind
    page = client.get(response["Location"]).content.decode()
    assert f"Stored {name}: {fmt}, {requests} requests over {span:.1f} s" in page
    assert f'data-name="{name}"' in page and f'data-testid="trace-format">{fmt}<' in page
    form = client.get("/sweeps/new/").content.decode()
    assert f'<option value="{name}">{name} ({fmt})</option>' in form
    load = services.sweep_clean_load({"requests_per_level": 5, "trace": name, "trace_format": fmt})
    assert load["trace"] == name
    other = "burstgpt" if fmt != "burstgpt" else "mooncake"
    with pytest.raises(ValidationError) as info:
        services.sweep_clean_load({"requests_per_level": 5, "trace": name, "trace_format": other})
    assert info.value.message_dict["trace_format"] == [f"{name} is a {fmt} trace, not {other}."]


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("notes.csv", "just some words\nand more\n", "neither JSON lines nor a CSV header"),
        ("keys.jsonl", '{"ts": 1, "len": 4}\n', "found: len, ts"),
        ("bad3.jsonl", MOONCAKE + '{"timestamp": 9, "input_length": -4, "output_length": 2}\n',
         "bad3.jsonl:4: input_length must be a whole number above 0"),
        ("cut.jsonl", MOONCAKE + '{"timestamp": 9, "input_le', "cut.jsonl:4: not JSON"),
        ("cols.csv", "Timestamp,Request tokens,Response tokens\n1,abc,3\n",
         "cols.csv:2: Request tokens must be a whole number"),
        ("binary.jsonl", b"\xff\xfe\x00{", "binary.jsonl: not UTF-8 text"),
        ("empty.jsonl", "", "The submitted file is empty."),  # the form's own check
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_trace_is_refused_with_the_line_at_fault_and_nothing_stored(
    client: Client, operator: Any, folder: Path, name: str, content: str | bytes, said: str
) -> None:
    client.force_login(operator)
    response = _upload(client, name, content)
    assert response.status_code == 400
    errors = _errors(response.content.decode())
    assert any(said in e for e in errors), errors
    assert not folder.exists() or list(folder.iterdir()) == []


def test_a_file_over_the_size_limit_is_refused(client: Client, operator: Any, folder: Path) -> None:
    client.force_login(operator)
    with override_settings(SPECDASH_TRACE_MAX_BYTES=100):
        response = _upload(client, "big.jsonl", MOONCAKE)
    assert response.status_code == 400
    assert _errors(response.content.decode()) == [
        "Larger than the limit of 100 bytes (SPECDASH_TRACE_MAX_BYTES)."
    ]
    assert list(folder.iterdir()) == []


def test_a_stored_trace_is_never_replaced_by_different_bytes(
    client: Client, operator: Any, folder: Path
) -> None:
    client.force_login(operator)
    assert _upload(client, "mc.jsonl", MOONCAKE).status_code == 302
    refused = _upload(client, "other.jsonl", OURS, as_name="mc.jsonl")
    assert refused.status_code == 400
    assert _errors(refused.content.decode()) == [
        "A different trace named &#x27;mc.jsonl&#x27; is there already: choose another name."
    ]
    assert (folder / "mc.jsonl").read_text() == MOONCAKE
    assert _upload(client, "again.jsonl", MOONCAKE, as_name="mc.jsonl").status_code == 302
    assert sorted(p.name for p in folder.iterdir()) == ["mc.jsonl"]


@pytest.mark.parametrize("name", ["../up.jsonl", ".hidden.jsonl", "trace.txt", "a b.jsonl"])
def test_only_a_plain_name_with_a_trace_suffix_is_taken(
    client: Client, operator: Any, folder: Path, name: str
) -> None:
    client.force_login(operator)
    response = _upload(client, "t.jsonl", OURS, as_name=name)
    assert response.status_code == 400
    assert "A plain file name" in _errors(response.content.decode())[0]
    assert not folder.exists() or list(folder.iterdir()) == []
    assert not (folder.parent / "up.jsonl").exists()


def test_a_viewer_sees_the_traces_but_cannot_upload(
    client: Client, viewer: Any, folder: Path
) -> None:
    folder.mkdir()
    (folder / "mc.jsonl").write_text(MOONCAKE)
    client.force_login(viewer)
    page = client.get("/traces/").content.decode()
    assert 'data-name="mc.jsonl"' in page and 'data-testid="trace-upload-form"' not in page
    assert _upload(client, "new.jsonl", OURS).status_code == 403
    assert sorted(p.name for p in folder.iterdir()) == ["mc.jsonl"]
    # The service holds the rule too, whatever interface calls it.
    with pytest.raises(PermissionDenied):
        traces.trace_upload(user=viewer, name="new.jsonl", chunks=[OURS.encode()])
    assert sorted(p.name for p in folder.iterdir()) == ["mc.jsonl"]


def test_a_trace_larger_than_the_request_body_limit_goes_through_the_form(
    client: Client, operator: Any, folder: Path, settings: Any
) -> None:
    # Mooncake's published traces are several MB; other pages keep the 2.5 MB body limit.
    assert reverse("benchmarks:trace-upload") == TRACE_UPLOAD_PATH
    line = '{"timestamp": %d, "input_length": 700, "output_length": 30, "hash_ids": [1, 2]}\n'
    text = "".join(line % (i * 10) for i in range(45_000))
    assert len(text) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    client.force_login(operator)
    response = _upload(client, "big.jsonl", text)
    assert response.status_code == 302, _errors(response.content.decode())
    assert (folder / "big.jsonl").stat().st_size == len(text)
    other = client.post("/sweeps/new/", {"notes": "x" * len(text)})
    assert other.status_code == 413
