"""The audit recomputes stored figures from the raw records and reports every disagreement."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command
from django.test import Client

from benchlib.loadgen.recordstore import RecordWriter, encode_block, is_compact, iter_rows
from benchmarks import audit, audit_comparison, audit_levels
from benchmarks.experiments import recording as experiment_recording
from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment
from benchmarks.sweeps import handler, recording, services
from benchmarks.sweeps.models import Sweep, SweepLevel, SweepState
from benchmarks.sweeps.scrapes import scrapes_path, scrapes_read
from core.jobs import JobContext
from core.models import Job
from hosts.models import Host, HostKind, ServerProfile
from tests.benchmarks.conftest import Simulator, load
from tests.benchmarks.experiments.constructed import make_sweep


@pytest.fixture
def measured(simulator: Simulator, transactional_db: Any) -> Sweep:
    """A sweep measured for real by the load generator against the simulator."""
    return _measure(simulator, [1, 3], requests_per_level=9, max_tokens=6)


def _measure(simulator: Simulator, levels: list[int], **fields: Any) -> Sweep:
    # The simulator runs on this machine: a registered local host makes loopback a target.
    Host.objects.get_or_create(name="local", kind=HostKind.LOCAL)
    sweep = services.sweep_create(
        base_url=simulator.base_url, levels=levels, load=load(model=simulator.model, **fields)
    )
    assert sweep.job_id is not None
    job = Job.objects.get(pk=sweep.job_id)
    ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")

    async def run() -> handler.SweepRunResult:
        return await asyncio.wait_for(handler.run_sweep(ctx), 90)

    result = async_to_sync(run)()
    assert result["state"] == SweepState.COMPLETED
    sweep.refresh_from_db()
    return sweep


def _rewrite(path: Path, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    """The file's rows changed and written back in its format (told by its suffix)."""
    records = list(iter_rows(path))
    writer = RecordWriter(path, append=False)
    for row in change(records):
        writer.write(row)
    writer.close()


def _tear(path: Path) -> None:
    """A last record cut mid-write, as a killed writer leaves it in the file's format."""
    torn = {"level": 1, "id": "torn", "start": 1.0}
    with path.open("ab") as f:
        if is_compact(path):
            f.write(encode_block([torn])[:-4])
        else:
            f.write(json.dumps(torn).encode()[:-10])


def test_a_sweep_as_measured_passes_the_audit(measured: Sweep) -> None:
    report = audit_levels.audit_sweep(sweep=measured)
    assert report.problems == []
    assert report.levels_checked == 2 and report.records_checked == 18
    # The sweep job audited the sweep at its end and kept the outcome.
    kept = Sweep.objects.get(pk=measured.pk).audit
    assert kept["ok"] is True and kept["levels_checked"] == 2 and kept["checked_at"]
    call_command("specdash", "audit", "--sweep", str(measured.pk))  # exit status 0


def test_the_sweep_and_compare_pages_show_the_kept_outcome_of_a_failed_audit(
    measured: Sweep, client: Client, viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.force_login(viewer)
    other = Sweep.objects.create(name="other", levels=[1], state=SweepState.COMPLETED)
    pages = (f"/sweeps/{measured.pk}/", f"/compare/?sweeps={measured.pk}&sweeps={other.pk}",
             f"/compare/report.html?sweeps={measured.pk}&sweeps={other.pk}")  # fmt: skip
    for url in pages:
        assert 'data-testid="audit-warning"' not in client.get(url).content.decode(), url
    SweepLevel.objects.filter(sweep=measured, index=0).update(output_tok_s=12345.0)
    with pytest.raises(CommandError):
        call_command("specdash", "audit", "--sweep", str(measured.pk))

    def must_not_run(**_: Any) -> None:
        raise AssertionError("a GET ran the audit")

    for module, name in (
        (audit_levels, "audit_sweep"),
        (audit, "audit_sweeps"),
        (audit, "audit_experiment"),
        (audit_comparison, "audit_comparison"),
    ):
        monkeypatch.setattr(module, name, must_not_run)
    for url in pages:
        page = client.get(url).content.decode()
        assert 'data-testid="audit-warning"' in page, url
        assert "column output_tok_s is 12345.0" in page, url


def test_a_lost_record_is_reported_with_its_level_and_fails_the_command(measured: Sweep) -> None:
    path = Path(measured.records_path)
    dropped = False

    def drop_one_of_level_1(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        nonlocal dropped
        out = []
        for r in records:
            if r["level"] == 1 and not dropped:
                dropped = True
                continue
            out.append(r)
        return out

    _rewrite(path, drop_one_of_level_1)
    report = audit_levels.audit_sweep(sweep=measured)
    assert any("level 1 (C=3, attempt 1): requests total: stored 9, records give 8" in p
               for p in report.problems), report.problems  # fmt: skip
    assert not any("level 0" in p for p in report.problems)
    with pytest.raises(CommandError) as failure:
        call_command("specdash", "audit", "--sweep", str(measured.pk))
    assert failure.value.returncode == 1


def test_an_altered_or_duplicated_record_and_a_torn_line_are_reported(measured: Sweep) -> None:
    path = Path(measured.records_path)

    def alter(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        records[0] = {**records[0], "out": records[0]["out"] + 50}
        return [*records, records[-1]]

    _rewrite(path, alter)
    _tear(path)
    problems = audit_levels.audit_sweep(sweep=measured).problems
    assert any("level 0" in p and "output_tokens" in p for p in problems), problems
    assert any("level 1" in p and "requests total: stored 9, records give 10" in p
               for p in problems), problems  # fmt: skip
    assert any("is not a record" in p for p in problems), problems


def test_levels_whose_records_are_interleaved_are_audited_whole(measured: Sweep) -> None:
    """Two writers appending at once (a level's shards) can interleave its rows with
    another's: the level-at-a-time pass then falls back to the whole file grouped."""
    path = Path(measured.records_path)

    def interleave(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        zero = [r for r in records if r["level"] == 0]
        one = [r for r in records if r["level"] == 1]
        return [r for pair in itertools.zip_longest(zero, one) for r in pair if r is not None]

    _rewrite(path, interleave)
    report = audit_levels.audit_sweep(sweep=measured)
    assert report.problems == []
    assert report.levels_checked == 2 and report.records_checked == 18
    # A changed row is still found in an interleaved file.
    _rewrite(path, lambda rs: [{**rs[0], "out": rs[0]["out"] + 50}, *rs[1:]])
    assert any("output_tokens" in p for p in audit_levels.audit_sweep(sweep=measured).problems)


def test_records_under_a_level_or_attempt_the_sweep_never_had_are_reported(
    measured: Sweep,
) -> None:
    path = Path(measured.records_path)
    _rewrite(path, lambda rs: [*rs, {**rs[0], "level": 7}, {**rs[0], "attempt": 3}])
    problems = audit_levels.audit_sweep(sweep=measured).problems
    assert any("records of level 7 attempt 1 belong to no level" in p for p in problems)
    assert any("records of level 0 attempt 3 belong to no level" in p for p in problems)


def _resume(sweep: Sweep, resume_from: int) -> Sweep:
    """The start of a resumed run, as its job makes it."""
    Sweep.objects.filter(pk=sweep.pk).update(state=SweepState.QUEUED)
    assert recording.sweep_begin(sweep_id=sweep.pk, resume_from=resume_from) is not None
    return Sweep.objects.get(pk=sweep.pk)


def test_a_level_its_load_generator_started_unheard_is_given_its_records_at_the_resume(
    measured: Sweep,
) -> None:
    """The worker is lost after the load generator emitted level 1's start and before the
    database stored it: level 1's records are in the file, and no row knows them. The resume
    gives them a partial row of that attempt, which the level's rerun keeps as an earlier
    attempt; nothing is counted twice and the audit finds every record a place."""
    SweepLevel.objects.filter(sweep=measured, index=1).delete()
    Sweep.objects.filter(pk=measured.pk).update(state=SweepState.INTERRUPTED)
    assert any(
        "9 records of level 1 attempt 1 belong to no level" in p
        for p in audit_levels.audit_sweep(sweep=measured).problems
    )
    resumed = _resume(measured, resume_from=1)
    assert resumed.attempts == 2
    level = SweepLevel.objects.get(sweep=measured, index=1)
    assert (level.state, level.attempt, level.concurrency) == ("partial", 1, 3)
    assert (level.requests_ok, level.requests_failed, level.summary) == (9, 0, {})
    assert level.output_tok_s is None
    assert level.reason.startswith("attempt 1 was started by the load generator after the")
    assert audit_levels.audit_sweep(sweep=resumed).problems == []

    recording.sweep_level_started(sweep_id=measured.pk, index=1, concurrency=3, t=1.0)
    level.refresh_from_db()
    assert (level.state, level.attempt, level.requests_ok) == ("running", 2, 0)
    assert [(e["attempt"], e["state"], e["requests_ok"]) for e in level.earlier_attempts] == [
        (1, "partial", 9)
    ]
    assert not any(
        "belong to no level" in p for p in audit_levels.audit_sweep(sweep=resumed).problems
    )


def test_an_unheard_rerun_of_a_level_with_a_row_joins_its_earlier_attempts(
    measured: Sweep,
) -> None:
    """Run 2 restarted level 0 unheard (its records carry attempt 2; the row still stands for
    attempt 1). Run 3's start keeps them as an earlier attempt of level 0; records of a level
    the sweep never had, or of a run not yet begun, are left for the audit to report."""
    path = Path(measured.records_path)
    Sweep.objects.filter(pk=measured.pk).update(attempts=2, state=SweepState.INTERRUPTED)

    def rerun(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        zero = [r for r in records if r["level"] == 0]
        failed = {**zero[1], "attempt": 2, "error_kind": "disconnect"}
        again = [{**zero[0], "attempt": 2}, failed, {**zero[2], "attempt": 2}]
        return [*records, *again, {**zero[0], "level": 7}, {**zero[0], "attempt": 9}]

    _rewrite(path, rerun)
    resumed = _resume(measured, resume_from=0)
    level = SweepLevel.objects.get(sweep=measured, index=0)
    assert (level.attempt, level.state, level.requests_ok) == (1, "completed", 9)
    assert [
        (e["attempt"], e["requests_ok"], e["requests_failed"]) for e in level.earlier_attempts
    ] == [(2, 2, 1)]
    assert SweepLevel.objects.filter(sweep=measured).count() == 2
    problems = [p for p in audit_levels.audit_sweep(sweep=resumed).problems if "belong" in p]
    assert len(problems) == 2, problems
    assert "1 records of level 0 attempt 9 belong" in problems[0]
    assert "1 records of level 7 attempt 1 belong" in problems[1]


def test_a_corrupted_summary_or_headline_column_is_reported(measured: Sweep) -> None:
    level = SweepLevel.objects.get(sweep=measured, index=1)
    level.summary = {**level.summary, "ttft_ms": {**level.summary["ttft_ms"], "p50": 1e6}}
    level.save(update_fields=["summary"])
    SweepLevel.objects.filter(sweep=measured, index=0).update(output_tok_s=12345.0)
    problems = audit_levels.audit_sweep(sweep=measured).problems
    assert any("level 1" in p and "ttft_ms p50: stored 1000000.0" in p for p in problems)
    assert any("level 0" in p and "column output_tok_s is 12345.0" in p for p in problems)


@pytest.mark.django_db
def test_a_stored_comparison_that_its_records_no_longer_give_is_reported_on_page_and_api(
    client: Client, viewer: Any, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    pair = make_profile(name="baseline"), make_profile(name="eagle", speculative=True)
    experiment = experiment_services.experiment_create(
        profiles=list(pair), levels=[1, 8], load={"requests_per_level": 5}, repeats=1
    )
    for step in experiment.steps.select_related("arm"):
        values = {1: 92, 8: 400} if step.arm.label == "A" else {1: 96, 8: 260}
        make_sweep(step.arm.profile, values, tmp=tmp_path, step=step)
    experiment_recording.experiment_store_comparison(experiment_id=experiment.pk)
    experiment_recording.experiment_finish(experiment_id=experiment.pk, state="completed")
    client.force_login(viewer)
    assert audit.audit_experiment(experiment=experiment).problems == []
    page = client.get(f"/experiments/{experiment.pk}/comparison/").content.decode()
    assert 'data-testid="audit-warning"' not in page
    assert client.get("/api/v1/audit", {"experiment": experiment.pk}).json()["ok"] is True

    # The stored comparison claims another figure for B at C=8 than its levels hold.
    stored = Experiment.objects.get(pk=experiment.pk).comparison
    for row in stored["rows"]:
        if row["concurrency"] == 8:
            row["ratios"][0]["point"] *= 1.5
    Experiment.objects.filter(pk=experiment.pk).update(comparison=stored)

    report = audit.audit_experiment(experiment=experiment)
    problems = report.problems
    assert any("C=8: ratio point" in p and "is not the row's" in p for p in problems), problems
    assert any("stored comparison's rows[C=8].ratios[B/A].point" in p for p in problems)
    # The page shows the outcome of the last audit run, kept by the command.
    with pytest.raises(CommandError):
        call_command("specdash", "audit", "--experiment", str(experiment.pk))
    page = client.get(f"/experiments/{experiment.pk}/comparison/").content.decode()
    assert 'data-testid="audit-warning"' in page and "is not the row&#x27;s" in page
    body = client.get("/api/v1/audit", {"experiment": experiment.pk}).json()
    assert body["ok"] is False and body["problems"] == problems
    assert client.get("/api/v1/audit", {"sweep": 1, "all": True}).status_code == 422


@pytest.mark.django_db
def test_the_audit_endpoint_needs_a_login(client: Client) -> None:
    assert client.get("/api/v1/audit", {"all": True}).status_code == 401


@pytest.fixture
def measured_with_slo(simulator: Simulator, transactional_db: Any) -> Sweep:
    """A sweep with SLOs measured for real: its levels store goodput."""
    slo = {"ttft_ms": 60_000, "e2e_ms": 120_000, "scope": "request", "attainment": 0.9}
    return _measure(simulator, [2], requests_per_level=6, max_tokens=4, slo=slo)


def test_stored_goodput_is_recomputed_and_a_tampered_figure_fails_the_audit(
    measured_with_slo: Sweep, client: Client, viewer: Any
) -> None:
    level = SweepLevel.objects.get(sweep=measured_with_slo, index=0)
    goodput = level.summary["goodput"]
    assert goodput["requests"] == 6 and goodput["goodput_tok_s"] > 0
    assert audit_levels.audit_sweep(sweep=measured_with_slo).problems == []

    level.summary = {**level.summary, "goodput": {**goodput, "goodput_tok_s": 9999.0}}
    level.save(update_fields=["summary"])
    problems = audit_levels.audit_sweep(sweep=measured_with_slo).problems
    assert len(problems) == 1, problems
    assert (
        "level 0 (C=2, attempt 1): goodput goodput_tok_s: stored 9999.0, records give"
        in (problems[0])
    )
    with pytest.raises(CommandError) as failure:
        call_command("specdash", "audit", "--sweep", str(measured_with_slo.pk))
    assert failure.value.returncode == 1
    client.force_login(viewer)
    body = client.get("/api/v1/audit", {"sweep": measured_with_slo.pk}).json()
    assert body["ok"] is False and body["problems"] == problems


def test_goodput_stored_under_another_slo_than_the_sweeps_is_reported(
    measured_with_slo: Sweep,
) -> None:
    level = SweepLevel.objects.get(sweep=measured_with_slo, index=0)
    tighter = {**level.summary["goodput"]["slo"], "ttft_ms": 1.0}
    level.summary = {**level.summary, "goodput": {**level.summary["goodput"], "slo": tighter}}
    level.save(update_fields=["summary"])
    problems = audit_levels.audit_sweep(sweep=measured_with_slo).problems
    assert any("goodput slo: stored" in p for p in problems), problems


def test_a_tampered_steady_figure_or_acceptance_is_reported(measured: Sweep) -> None:
    level = SweepLevel.objects.get(sweep=measured, index=1)
    steady = level.summary["steady"]
    assert steady["output_tok_s"] is not None
    level.summary = {
        **level.summary,
        "steady": {**steady, "output_tok_s": steady["output_tok_s"] * 1.3},
    }
    level.summary["prompt_tokens"] = level.summary["prompt_tokens"] + 1
    level.save(update_fields=["summary"])
    problems = audit_levels.audit_sweep(sweep=measured).problems
    assert any("level 1" in p and "steady output_tok_s: stored" in p for p in problems)
    assert any("level 1" in p and "prompt_tokens: stored" in p for p in problems)
    assert not any("level 0" in p for p in problems)


def test_server_figures_are_recomputed_from_the_kept_boundary_scrapes(measured: Sweep) -> None:
    # The load generator's boundary scrapes of each level are kept, compressed, beside the
    # records; the audit recomputes the level's server figures from them.
    levels = list(SweepLevel.objects.filter(sweep=measured).order_by("index"))
    for level in levels:
        path = scrapes_path(Path(measured.records_path), index=level.index, attempt=level.attempt)
        kept = scrapes_read(path)
        assert kept is not None and path.suffix == ".gz"
        assert "_total" in kept["open"]["text"] and kept["open"]["t"] < kept["close"]["t"]
        assert level.server_metrics["available"] is True
    assert audit_levels.audit_sweep(sweep=measured).problems == []
    level = levels[1]
    level.server_metrics = {
        **level.server_metrics,
        "generation_tokens": level.server_metrics["generation_tokens"] + 5,
    }
    level.save(update_fields=["server_metrics"])
    problems = audit_levels.audit_sweep(sweep=measured).problems
    assert len(problems) == 1
    assert "level 1" in problems[0] and "server generation_tokens: stored" in problems[0]
