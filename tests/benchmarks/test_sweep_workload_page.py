"""The sweep page shows goodput under the sweep's SLOs, acceptance per prompt category, and a
rate sweep's levels by their offered rate, without a query per level."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from benchmarks.sweeps import recording, selectors, services
from benchmarks.sweeps.models import Sweep, SweepLevel
from hosts.models import ServerInstance
from tests.benchmarks.conftest import level_summary_event, load

pytestmark = pytest.mark.django_db

SLO = {"ttft_ms": 500, "e2e_ms": 2000}


def _summary(index: int, concurrency: int, *, rate: float | None = None) -> Any:
    summary = level_summary_event(index, concurrency)["summary"]
    summary["target_rate"] = rate
    summary["goodput"] = {
        "requests": 10, "met": 10 - index, "share": (10 - index) / 10,
        "goodput_req_s": 5.0 - index, "goodput_tok_s": 400.0 - 50 * index,
        "meets_slo": index == 0,
    }  # fmt: skip
    by_category = {
        "chat": {"requests": 6, "accept_length": 2.7 - 0.1 * index, "acceptance_rate": 0.57},
        "code": {"requests": 4, "accept_length": 1.9, "acceptance_rate": 0.3},
    }
    summary["acceptance"] = {
        "accept_length": 2.38,
        "acceptance_rate": 0.46,
        "by_category": by_category,
    }
    return summary


def _sweep(instance: ServerInstance, levels: int, **extra: Any) -> Sweep:
    sweep = services.sweep_create(
        instance=instance, levels=list(range(1, levels + 1)), load=load(slo=SLO, **extra)
    )
    for i in range(levels):
        recording.sweep_level_finished(sweep_id=sweep.pk, summary=_summary(i, i + 1))
    return sweep


def _rows(page: str, testid: str) -> list[str]:
    return re.findall(rf'<tr data-testid="{testid}".*?</tr>', page, flags=re.S)


def test_the_sweep_page_shows_goodput_and_acceptance_per_category(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = _sweep(ready_instance, 2)
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    goodput = _rows(page, "goodput-row")
    assert len(goodput) == 2
    assert 'data-testid="goodput-share">0.900<' in goodput[1]
    assert 'data-testid="goodput-req-s">4.00<' in goodput[1]
    assert 'data-testid="goodput-tok-s">350.0<' in goodput[1]
    assert 'data-testid="goodput-meets">yes<' in goodput[0]
    assert 'data-testid="goodput-meets">no<' in goodput[1]
    assert "TTFT ≤ 500.0 ms" in page and "E2E ≤ 2000.0 ms" in page
    categories = _rows(page, "category-row")
    assert len(categories) == 2
    assert 'data-category="chat">2.60<' in categories[1]
    assert 'data-category="code">1.90<' in categories[1]
    # The htmx refresh of the results carries them too.
    partial = client.get(f"/sweeps/{sweep.pk}/", headers={"HX-Request": "true"}).content.decode()
    assert len(_rows(partial, "goodput-row")) == 2 and len(_rows(partial, "category-row")) == 2


def test_the_sweep_page_says_its_workload_with_its_parameters(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(
        instance=ready_instance, levels=[4], load=load(api="chat", session_turns=3)
    )
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert (
        'data-testid="sweep-workload-description">synthetic prompts · closed loop · sessions '
        "of 3 turns (32-token follow-ups, 0 s think time)<"
    ) in page


def test_each_level_shows_the_servers_prefix_cache_hit_rate_with_its_source(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=load())
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=level_summary_event(0, 1)["summary"])
    metrics = {"available": True, "prefix_cache_hit_rate": 0.7182,
               "prefix_cache_hit_rate_source": "counters"}  # fmt: skip
    SweepLevel.objects.filter(sweep=sweep).update(server_metrics=metrics)
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    cell = re.search(r'data-testid="level-prefix-cache" data-source="counters">([^<]*)<', page)
    assert cell is not None and cell.group(1) == "0.718"
    assert "hits/queries, this level" in page


def test_a_sweep_without_slos_or_categories_shows_neither_table(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=load())
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=level_summary_event(0, 1)["summary"])
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'data-testid="goodput-table"' not in page
    assert 'data-testid="category-table"' not in page


def test_the_page_makes_as_many_queries_for_six_levels_as_for_two(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    small, large = _sweep(ready_instance, 2), _sweep(ready_instance, 6)
    client.force_login(viewer)
    counts = []
    for sweep in (small, large):
        with CaptureQueriesContext(connection) as queries:
            page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
        counts.append(len(queries))
        assert len(_rows(page, "goodput-row")) == len(sweep.levels)
    assert counts[0] == counts[1], counts


def test_a_rate_sweep_names_its_levels_by_offered_rate(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(
        instance=ready_instance, levels=[16], load=load(request_rate=[0.5, 2], slo=SLO)
    )
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=_summary(0, 16, rate=0.5))
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=_summary(1, 16, rate=2.0))
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert "Rate (req/s)" in page
    cells = re.findall(r'data-testid="level-x">([^<]*)<', page)
    assert cells == ["0.5", "2"]
    assert re.search(r'data-testid="sweep-levels">0.5, 2.0 req/s under C=16<', page)
    goodput = _rows(page, "goodput-row")
    assert "2 req/s" in goodput[1] and "C=16" not in goodput[1]
    listed = client.get("/sweeps/").content.decode()
    assert 'data-testid="sweep-rates">at 0.5, 2.0 req/s<' in listed
    exported = client.get(f"/sweeps/{sweep.pk}/levels.csv").content.decode()
    rows = list(csv.DictReader(io.StringIO(exported)))
    assert [(r["concurrency"], r["target_rate"]) for r in rows] == [("16", "0.5"), ("16", "2.0")]


def test_a_rate_sweeps_live_snapshot_puts_levels_on_the_offered_rate_axis(
    ready_instance: ServerInstance,
) -> None:
    sweep = services.sweep_create(
        instance=ready_instance, levels=[16], load=load(request_rate=[0.5, 2])
    )
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=_summary(0, 16, rate=0.5))
    recording.sweep_level_started(sweep_id=sweep.pk, index=1, concurrency=16, t=0.0)
    snapshot = selectors.sweep_snapshot(sweep_id=sweep.pk)
    assert snapshot is not None
    assert snapshot["sweep"]["x_values"] == [0.5, 2.0]
    assert snapshot["sweep"]["x_title"] == "offered request rate (req/s)"
    # The running level has no summary yet: its rate is the planned one.
    assert [(lv["x"], lv["label"]) for lv in snapshot["levels"]] == [
        (0.5, "0.5 req/s"),
        (2.0, "2 req/s"),
    ]
    closed = services.sweep_create(instance=ready_instance, levels=[1, 4], load=load())
    recording.sweep_level_finished(sweep_id=closed.pk, summary=_summary(0, 1))
    snapshot = selectors.sweep_snapshot(sweep_id=closed.pk)
    assert snapshot is not None and snapshot["sweep"]["x_values"] == [1, 4]
    assert [(lv["x"], lv["label"]) for lv in snapshot["levels"]] == [(1, "C=1")]


def test_categories_without_reported_acceptance_show_no_acceptance_table(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=load())
    summary = level_summary_event(0, 1)["summary"]
    unreported = {"requests": 10, "accept_length": None, "acceptance_rate": None}
    summary["acceptance"] = {"accept_length": None, "by_category": {"synthetic": unreported}}
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=summary)
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'data-testid="category-table"' not in page


def test_a_levels_server_figures_arriving_keep_its_rate_label(
    ready_instance: ServerInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The level row broadcast when a level's server figures are stored is built with its sweep:
    # built without it, a rate sweep's finished levels flipped from "2 req/s" to "C=16".
    from benchmarks.sweeps import recording
    from benchmarks.sweeps.channel import SWEEP_LEVEL
    from core import realtime

    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        realtime, "broadcast_on_commit", lambda group, kind, payload: sent.append((kind, payload))
    )
    sweep = services.sweep_create(
        instance=ready_instance, levels=[16], load=load(request_rate=[0.5, 2])
    )
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=_summary(0, 16, rate=0.5))
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=_summary(1, 16, rate=2.0))
    sent.clear()
    assert recording.sweep_level_server_metrics_save(
        sweep_id=sweep.pk, index=1, metrics={"available": False, "reason": "test"}
    )
    levels = [payload["level"] for kind, payload in sent if kind == SWEEP_LEVEL.name]
    assert [(lv["x"], lv["label"]) for lv in levels] == [(2.0, "2 req/s")]
    assert not recording.sweep_level_server_metrics_save(
        sweep_id=sweep.pk, index=5, metrics={"available": False}
    )
