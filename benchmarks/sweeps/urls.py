"""Routes of sweeps and the trace folder (joined with the experiments' in benchmarks.urls, one
namespace)."""

from __future__ import annotations

from django.urls import path

from benchmarks.sweeps import views

urlpatterns = [
    path("sweeps/", views.sweep_list, name="sweep-list"),
    path("sweeps/new/", views.sweep_new, name="sweep-new"),
    path("sweeps/<int:sweep_id>/", views.sweep_detail, name="sweep-detail"),
    path("sweeps/<int:sweep_id>/cancel/", views.sweep_cancel, name="sweep-cancel"),
    path("sweeps/<int:sweep_id>/resume/", views.sweep_resume, name="sweep-resume"),
    path("sweeps/<int:sweep_id>/abandon/", views.sweep_abandon, name="sweep-abandon"),
    path("sweeps/<int:sweep_id>/rerun/", views.sweep_rerun, name="sweep-rerun"),
    path("sweeps/<int:sweep_id>/levels.csv", views.sweep_export_csv, name="sweep-export-csv"),
    path("sweeps/<int:sweep_id>/levels.json", views.sweep_export_json, name="sweep-export-json"),
    path(
        "sweeps/<int:sweep_id>/records.jsonl",
        views.sweep_export_records,
        name="sweep-export-records",
    ),
    path("traces/", views.trace_list, name="trace-list"),
    path("traces/upload/", views.trace_upload, name="trace-upload"),
]
