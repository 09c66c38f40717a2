"""The simulator moved from ``benchmarks.simulator`` to ``benchlib.simulator``: registered
servers and hosts that name the old module or its ``bin/`` directory are rewritten, so a
dashboard set up before the move starts its servers as before. Past runs keep the argv they
ran with (sweep and experiment snapshots are history and are not touched)."""

from __future__ import annotations

from typing import Any

from django.db import migrations

MOVES = (("benchmarks.simulator", "benchlib.simulator"), ("benchmarks/simulator/", "benchlib/simulator/"))


def _rewrite(value: str, moves: tuple[tuple[str, str], ...]) -> str:
    for old, new in moves:
        value = value.replace(old, new)
    return value


def rewrite_registry(apps: Any, moves: tuple[tuple[str, str], ...]) -> None:
    ServerProfile = apps.get_model("hosts", "ServerProfile")
    Host = apps.get_model("hosts", "Host")
    for profile in ServerProfile.objects.all():
        argv = [_rewrite(arg, moves) if isinstance(arg, str) else arg for arg in profile.launch_argv]
        if argv != profile.launch_argv:
            profile.launch_argv = argv
            profile.save(update_fields=["launch_argv"])
    for host in Host.objects.all():
        path = _rewrite(host.path_prepend, moves)
        if path != host.path_prepend:
            host.path_prepend = path
            host.save(update_fields=["path_prepend"])


def forwards(apps: Any, schema_editor: Any) -> None:
    rewrite_registry(apps, MOVES)


def backwards(apps: Any, schema_editor: Any) -> None:
    rewrite_registry(apps, tuple((new, old) for old, new in MOVES))


class Migration(migrations.Migration):
    dependencies = [("hosts", "0007_merge_0006_job_event_0006_job_hook_choices")]

    operations = [migrations.RunPython(forwards, backwards)]
