from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class HostsConfig(AppConfig):
    name = "hosts"
    verbose_name = "Hosts and servers"

    def ready(self) -> None:
        from hosts.roles import ensure_roles

        # After every migrate, so the permissions of both apps exist by then.
        post_migrate.connect(ensure_roles, dispatch_uid="specdash-ensure-roles")
