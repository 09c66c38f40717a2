from __future__ import annotations

from django.apps import AppConfig


class HostsConfig(AppConfig):
    name = "hosts"
    verbose_name = "Hosts and servers"

    def ready(self) -> None:
        # The job handlers of this app register themselves on import: the server lifecycle
        # (server.run, server.stop, server.kill_holders) and the host telemetry job.
        import hosts.lifecycle.jobs
        import hosts.telemetry.manager  # noqa: F401
        from core.exit_hooks import on_exit
        from hosts.transports.ssh import close_own_masters

        # The ssh master connections (ControlPersist) would outlive the dashboard by minutes.
        on_exit(close_own_masters)
