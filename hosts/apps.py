from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class HostsConfig(AppConfig):
    name = "hosts"
    verbose_name = "Hosts and servers"

    def ready(self) -> None:
        # The job handlers of this app register themselves on import: the server lifecycle
        # (server.run, server.stop, server.kill_holders) and the host telemetry job.
        import hosts.lifecycle.jobs
        import hosts.telemetry.manager  # noqa: F401
        from hosts.roles import ensure_roles

        # After every migrate, so the permissions of both apps exist by then.
        post_migrate.connect(ensure_roles, dispatch_uid="specdash-ensure-roles")
