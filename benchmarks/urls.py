from __future__ import annotations

from django.urls import path

from benchmarks import views

app_name = "benchmarks"

urlpatterns = [
    path("sweeps/", views.sweep_list, name="sweep-list"),
    path("sweeps/<int:sweep_id>/", views.sweep_detail, name="sweep-detail"),
    path("experiments/", views.experiment_list, name="experiment-list"),
]
