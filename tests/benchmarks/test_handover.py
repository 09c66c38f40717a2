"""The audit the app's wiring hands to the slices' job stores, and a handover asked too early."""

from __future__ import annotations

import pytest

from benchmarks import audit
from benchmarks.experiments import store as experiment_store
from benchmarks.handover import Handover
from benchmarks.sweeps import store as sweep_store


def test_asking_before_the_wiring_ran_names_what_is_missing() -> None:
    handover: Handover[object] = Handover("sweep audit")
    with pytest.raises(RuntimeError, match="no sweep audit registered"):
        handover.get()


def test_the_registered_function_is_the_one_handed_back() -> None:
    handover: Handover[object] = Handover("check")
    handover.register(print)
    assert handover.get() is print


def test_the_app_hands_each_job_store_its_audit() -> None:
    assert sweep_store._sweep_audit.get() is audit.audit_sweep_store
    assert experiment_store._experiment_audit.get() is audit.audit_experiment_store
