"""A sweep's records file is the recorder's: not editable in the admin, and the exports (page
and API) serve only a file under the data directory, whatever path the row holds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from benchmarks.sweeps.models import Sweep, SweepState
from benchmarks.sweeps.recording import sweep_records_file
from core.tokens import api_token_create
from hosts.models import ServerProfile

pytestmark = pytest.mark.django_db

SECRET = "SECRET_KEY=do-not-show\n"


@pytest.fixture
def data_dir(tmp_path: Path, settings: Any) -> Path:
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    return tmp_path / "data"


@pytest.fixture
def sweep(make_profile: Callable[..., ServerProfile], data_dir: Path) -> Sweep:
    profile = make_profile()
    sweep = Sweep.objects.create(profile=profile, levels=[1], state=SweepState.COMPLETED)
    records = sweep_records_file(sweep_id=sweep.pk)
    records.parent.mkdir(parents=True)
    records.write_text('{"id":"a"}\n')
    Sweep.objects.filter(pk=sweep.pk).update(records_path=str(records))
    return sweep


def _downloads(viewer: User, sweep_id: int) -> tuple[int, int]:
    """(page status, API status) of the records download, for a viewer."""
    client = Client()
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep_id}/records.jsonl")
    _token, secret = api_token_create(user=viewer, name="t")
    api = Client().get(
        f"/api/v1/sweeps/{sweep_id}/records.jsonl", headers={"Authorization": f"Bearer {secret}"}
    )
    for response in (page, api):
        if response.status_code == 200:
            body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
            assert SECRET.encode() not in body
    return page.status_code, api.status_code


def test_the_records_file_under_the_data_dir_is_served(sweep: Sweep, viewer: User) -> None:
    assert _downloads(viewer, sweep.pk) == (200, 200)


def test_a_records_path_outside_the_data_dir_is_never_served(
    sweep: Sweep, viewer: User, tmp_path: Path, data_dir: Path
) -> None:
    outside = tmp_path / ".secret_key"
    outside.write_text(SECRET)
    link = data_dir / "sweeps" / "link.jsonl"
    link.symlink_to(outside)
    for path in (outside, data_dir / ".." / ".secret_key", link):
        Sweep.objects.filter(pk=sweep.pk).update(records_path=str(path))
        assert _downloads(viewer, sweep.pk) == (404, 404), path


def test_staff_cannot_edit_the_records_path_in_the_admin(
    sweep: Sweep, tmp_path: Path, roles: None
) -> None:
    admin = User.objects.create_superuser("admin", password="admin-pass-123")
    client = Client()
    client.force_login(admin)
    url = f"/admin/benchmarks/sweep/{sweep.pk}/change/"
    page = client.get(url).content.decode()
    assert 'name="records_path"' not in page
    before = Sweep.objects.get(pk=sweep.pk).records_path
    form = {
        "name": "renamed", "profile": sweep.profile_id, "levels": "[1]", "state": "completed",
        "load": "{}", "tags": "[]", "attempts": "1", "records_path": str(tmp_path / ".secret_key"),
        "level_results-TOTAL_FORMS": "0", "level_results-INITIAL_FORMS": "0",
    }  # fmt: skip
    response = client.post(url, form)
    assert response.status_code == 302, [
        (bf.name, bf.errors) for bf in response.context["adminform"].form if bf.errors
    ]
    saved = Sweep.objects.get(pk=sweep.pk)
    assert (saved.name, saved.records_path) == ("renamed", before)
