"""Traces over the API: list the folder, upload a checked trace (operators only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.test_trace_upload import BURSTGPT, MOONCAKE
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db


def test_an_operator_uploads_a_trace_and_finds_it_listed(
    as_operator: ApiClient, as_viewer: ApiClient, trace_folder: Path
) -> None:
    response = as_operator.post("/api/v1/traces", {"name": "mc.jsonl", "content": MOONCAKE})
    assert response.status_code == 201, response.content
    assert response.json() == {"name": "mc.jsonl", "format": "mooncake", "size": len(MOONCAKE),
                               "requests": 3, "rate": 2.0, "span_s": 1.0}  # fmt: skip
    assert (trace_folder / "mc.jsonl").read_text() == MOONCAKE
    assert (
        as_operator.post("/api/v1/traces", {"name": "b.csv", "content": BURSTGPT}).status_code
        == 201
    )
    listed = as_viewer.get("/api/v1/traces").json()
    assert [(t["name"], t["format"]) for t in listed] == [
        ("b.csv", "burstgpt"),
        ("mc.jsonl", "mooncake"),
    ]


@pytest.mark.parametrize(
    ("body", "field", "said"),
    [
        ({"name": "x.jsonl", "content": ""}, "file", "The file is empty."),
        ({"name": "x.jsonl", "content": '{"timestamp": 1}\n'}, "trace", "found: timestamp"),
        ({"name": "x.jsonl", "content": MOONCAKE + "oops\n"}, "trace", "x.jsonl:4: not JSON"),
        ({"name": "x.exe", "content": MOONCAKE}, "name", "A plain file name"),
    ],
)  # fmt: skip
def test_a_bad_upload_is_a_422_naming_its_field_and_stores_nothing(
    as_operator: ApiClient, trace_folder: Path, body: dict[str, str], field: str, said: str
) -> None:
    response = as_operator.post("/api/v1/traces", body)
    assert response.status_code == 422, response.content
    assert said in " ".join(error_of(response)["fields"][field])
    assert not trace_folder.exists() or list(trace_folder.iterdir()) == []


def test_a_viewer_cannot_upload(as_viewer: ApiClient, trace_folder: Path) -> None:
    response = as_viewer.post("/api/v1/traces", {"name": "mc.jsonl", "content": MOONCAKE})
    assert response.status_code == 403
    assert not trace_folder.exists()
