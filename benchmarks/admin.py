from __future__ import annotations

from django.contrib import admin

from benchmarks.experiments.models import Experiment, ExperimentArm, ExperimentStep
from benchmarks.sweeps.models import Sweep, SweepLevel


class SweepLevelInline(admin.TabularInline):  # type: ignore[type-arg]
    model = SweepLevel
    extra = 0
    fields = ("index", "concurrency", "state", "output_tok_s", "ttft_p50_ms", "itl_p50_ms")
    readonly_fields = fields


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["pk", "__str__", "profile", "state", "created_by", "created_at"]
    list_filter = ["state", "profile"]
    search_fields = ["name", "notes"]
    # Written by the recorder only: the exports serve this file to every viewer.
    readonly_fields = ["records_path"]
    inlines = [SweepLevelInline]


class ExperimentArmInline(admin.TabularInline):  # type: ignore[type-arg]
    model = ExperimentArm
    extra = 0


class ExperimentStepInline(admin.TabularInline):  # type: ignore[type-arg]
    model = ExperimentStep
    extra = 0
    readonly_fields = ["index", "arm", "repeat", "state", "instance", "reason"]


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["pk", "name", "state", "repeats", "order", "created_at"]
    list_filter = ["state", "order"]
    search_fields = ["name", "notes"]
    inlines = [ExperimentArmInline, ExperimentStepInline]
