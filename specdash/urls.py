from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from specdash import views

urlpatterns = [
    path("", views.home, name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("servers/", include("hosts.urls")),
    path("", include("benchmarks.urls")),
    path("", include("specdash.api.urls")),
    path("admin/", admin.site.urls),
]
