from __future__ import annotations

from django.urls import path

from specdash.api import api_patterns, docs, views

urlpatterns = [
    path("api/v1/", api_patterns()),
    path("api/v1/docs/assets/<str:name>", docs.docs_asset, name="api-docs-asset"),
    path("account/tokens/", views.token_list, name="account-tokens"),
    path("account/tokens/<int:token_id>/revoke/", views.token_revoke, name="account-token-revoke"),
]
