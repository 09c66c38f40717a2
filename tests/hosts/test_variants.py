"""A parameter matrix's variant profiles are listed under their base: folded on the Servers
page, counted on the overview, hidden in the admin's list unless asked for."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from benchmarks.experiments.matrix import matrix_variants
from hosts.models import ServerProfile

pytestmark = pytest.mark.django_db

SIM = [sys.executable, "-m", "benchlib.simulator", "--profile", "eagle3"]


@pytest.fixture
def base(make_profile: Callable[..., ServerProfile]) -> ServerProfile:
    return make_profile(name="Sim EAGLE", launch_argv=SIM, speculative=True)


def _variants(base: ServerProfile) -> list[ServerProfile]:
    return matrix_variants(
        user=None, base=base, axes={"--speculative-num-steps": [1, 3]}, include_off=True
    )


def test_a_matrix_links_each_variant_to_its_base_and_a_variants_variant_to_the_root(
    base: ServerProfile,
) -> None:
    variants = _variants(base)
    assert [v.variant_of_id for v in variants] == [base.pk] * 3
    deeper = matrix_variants(user=None, base=variants[1], axes={"--speculative-num-steps": [5]})
    assert deeper[0].variant_of_id == base.pk


def test_the_servers_page_folds_variants_under_their_base(
    client: Client, operator: User, base: ServerProfile
) -> None:
    variants = _variants(base)
    client.force_login(operator)
    page = client.get(reverse("hosts:server-list")).content.decode()
    folded = re.search(
        rf'<details data-testid="variants-{base.pk}">(.*?)</details>', page, re.DOTALL
    )
    assert folded, page
    assert "3 matrix variants of Sim EAGLE" in folded.group(1)
    outside = page.replace(folded.group(0), "")
    assert f'id="profile-{base.pk}"' in outside
    for v in variants:
        # Each still startable, from inside the fold only.
        assert f'data-testid="start-{v.pk}"' in folded.group(1)
        assert f'id="profile-{v.pk}"' not in outside


def test_the_overview_counts_variants_without_listing_them(
    client: Client, viewer: User, base: ServerProfile
) -> None:
    variants = _variants(base)
    client.force_login(viewer)
    page = client.get("/").content.decode()
    assert f'data-testid="variant-count-{base.pk}">+ 3 matrix variants<' in page
    for v in variants:
        assert v.name not in page


def test_the_admin_list_hides_variants_unless_asked(
    admin_client: Client, base: ServerProfile
) -> None:
    variants = _variants(base)
    url = reverse("admin:hosts_serverprofile_changelist")
    hidden = admin_client.get(url).content.decode()
    shown = admin_client.get(url + "?variants=shown").content.decode()
    only = admin_client.get(url + "?variants=only").content.decode()
    for v in variants:
        assert v.name not in hidden and v.name in shown and v.name in only
    assert ">Sim EAGLE</a>" in hidden and ">Sim EAGLE</a>" not in only  # the name column


def test_the_migration_links_variants_made_before_the_link_by_their_notes(
    base: ServerProfile, make_profile: Callable[..., Any]
) -> None:
    old = make_profile(name="Sim EAGLE [K=2]", notes=f"Variant of Sim EAGLE (#{base.pk}): K=2.")
    orphan = make_profile(name="x [K=2]", notes="Variant of Gone (#999999): K=2.")
    plain = make_profile(name="by hand", notes="Variant of nothing in particular")
    migration = importlib.import_module("hosts.migrations.0010_profile_variant_of")
    migration.link_existing_variants(apps, None)
    for profile in (old, orphan, plain):
        profile.refresh_from_db()
    assert (old.variant_of_id, orphan.variant_of_id, plain.variant_of_id) == (base.pk, None, None)
