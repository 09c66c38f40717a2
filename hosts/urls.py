from __future__ import annotations

from django.urls import path

from hosts import views

app_name = "hosts"

urlpatterns = [
    path("", views.server_list, name="server-list"),
    path("hosts/<int:host_id>/test/", views.host_test, name="host-test"),
    path("profiles/<int:profile_id>/start/", views.profile_start, name="profile-start"),
    path("instances/<int:instance_id>/", views.instance_detail, name="instance-detail"),
    path("instances/<int:instance_id>/stop/", views.instance_stop, name="instance-stop"),
    path(
        "instances/<int:instance_id>/kill-holders/",
        views.instance_kill_holders,
        name="instance-kill-holders",
    ),
]
