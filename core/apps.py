from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Jobs, roles and API tokens"

    def ready(self) -> None:
        from core.roles import ensure_roles

        # After every migrate, so the permissions of every app exist by then.
        post_migrate.connect(ensure_roles, dispatch_uid="specdash-ensure-roles")
