"""Routes of experiments and comparisons (joined with the sweeps' in benchmarks.urls, one
namespace)."""

from __future__ import annotations

from django.urls import path

from benchmarks.experiments import breakeven_views, views

urlpatterns = [
    path("experiments/", views.experiment_list, name="experiment-list"),
    path("experiments/new/", views.experiment_new, name="experiment-new"),
    path("experiments/matrix/", views.experiment_matrix, name="experiment-matrix"),
    path(
        "experiments/<int:experiment_id>/verify/",
        views.experiment_verify,
        name="experiment-verify",
    ),
    path("experiments/<int:experiment_id>/", views.experiment_detail, name="experiment-detail"),
    path(
        "experiments/<int:experiment_id>/cancel/",
        views.experiment_cancel,
        name="experiment-cancel",
    ),
    path(
        "experiments/<int:experiment_id>/resume/",
        views.experiment_resume,
        name="experiment-resume",
    ),
    path(
        "experiments/<int:experiment_id>/rerun/",
        views.experiment_rerun,
        name="experiment-rerun",
    ),
    path(
        "experiments/<int:experiment_id>/comparison/",
        views.experiment_comparison,
        name="experiment-comparison",
    ),
    path(
        "experiments/<int:experiment_id>/comparison.csv",
        views.experiment_comparison_csv,
        name="experiment-comparison-csv",
    ),
    path(
        "experiments/<int:experiment_id>/report.html",
        views.experiment_report,
        name="experiment-report",
    ),
    path(
        "experiments/<int:experiment_id>/breakeven/",
        breakeven_views.breakeven_map,
        name="breakeven",
    ),
    path(
        "experiments/<int:experiment_id>/breakeven.csv",
        breakeven_views.breakeven_csv,
        name="breakeven-csv",
    ),
    path(
        "experiments/<int:experiment_id>/breakeven/verify/",
        breakeven_views.breakeven_verify,
        name="breakeven-verify",
    ),
    path("compare/", views.compare, name="compare"),
    path("compare/table.csv", views.compare_csv, name="compare-csv"),
    path("compare/report.html", views.compare_report, name="compare-report"),
    path("compare/history/<int:profile_id>/", views.profile_history, name="profile-history"),
]
