"""Property-based run of the whole API from its own OpenAPI schema (schemathesis).

In-process against the WSGI app, as an operator who is also registry staff (so every
operation runs past its permission check), with a fixed seed: no response may be a 5xx,
and every response must match the documented status codes, content types and schemas.
Creates run too; every generated address or URL is rewritten to loopback first, so nothing
a create stores could point a later connection (a probe, a sweep) off this machine.

The generator rarely sends one explicit ``null`` on its own (other fields in the same body
are usually invalid too), so a second, exhaustive test sends exactly that for every nullable
body field of every write operation.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import Group, Permission, User
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from benchmarks.sweeps.models import Sweep, SweepLevel, SweepSample
from core.roles import OPERATORS
from core.tokens import api_token_create
from hosts.models import Container, Host, HostKind, InstanceState, ServerInstance, ServerProfile
from specdash.api import api

RAW_SCHEMA = api.get_openapi_schema()
schema = schemathesis.openapi.from_dict(RAW_SCHEMA)
schema.app = get_wsgi_application()
# Body fields that name somewhere to connect to, and the loopback value each gets.
LOOPBACK = {
    "address": "127.0.0.1",
    "api_host": "127.0.0.1",
    "jump_host": "127.0.0.1",
    "base_url": "http://127.0.0.1:9/v1",
}


@schema.hook("map_body")
def keep_addresses_on_loopback(context: Any, body: Any) -> Any:
    if isinstance(body, dict):
        return {
            k: LOOPBACK[k] if k in LOOPBACK and isinstance(v, str) else v for k, v in body.items()
        }
    return body


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def keep_test_connection() -> Any:
    # As django.test.Client does: the WSGI handler would otherwise close the connection that
    # holds the test's transaction at the end of each request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_token(keep_test_connection: None, roles: None) -> str:
    user = User.objects.create_user("fuzzer", password="fuzzer-pass-123", is_staff=True)
    user.groups.add(Group.objects.get(name=OPERATORS))
    registry = Permission.objects.filter(
        content_type__app_label="hosts",
        codename__in=[
            f"{a}_{m}" for a in ("add", "change") for m in ("host", "container", "serverprofile")
        ],
    )
    user.user_permissions.add(*registry)
    # Something behind the small ids the generator tries first, so detail endpoints answer 200.
    host = Host.objects.create(name="fuzz-host", kind=HostKind.LOCAL)
    profile = ServerProfile.objects.create(name="fuzz", host=host, launch_argv=["true"], port=39999)
    instance = ServerInstance.objects.create(
        profile=profile, host=host, port=39999, state=InstanceState.READY, run_id="sd-fuzz"
    )
    sweep = Sweep.objects.create(instance=instance, profile=profile, levels=[1, 2])
    SweepLevel.objects.create(sweep=sweep, index=0, concurrency=1, state="completed")
    SweepSample.objects.create(sweep=sweep, level_index=0, t=1.0, data={"output_tok_s": 1.0})
    return api_token_create(user=user, name="fuzz")[1]


def test_the_openapi_schema_is_valid_openapi() -> None:
    assert RAW_SCHEMA["openapi"].startswith("3.1")
    schema.validate()  # against the OpenAPI meta-schema; raises on a violation


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=5,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_api_fuzz_has_no_server_errors_or_schema_violations(case: Any, fuzz_token: str) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_token}"}, checks=CHECKS)


def _nullable_body_fields() -> list[tuple[str, str, str]]:
    found = []
    for path, operations in RAW_SCHEMA["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            ref = content.get("application/json", {}).get("schema", {}).get("$ref", "")
            if not ref:
                continue
            body_schema = RAW_SCHEMA["components"]["schemas"][ref.rsplit("/", 1)[1]]
            for name, prop in body_schema.get("properties", {}).items():
                if {"type": "null"} in prop.get("anyOf", []):
                    found.append((method, path, name))
    return found


NULLABLE_FIELDS = _nullable_body_fields()


def test_the_null_walk_finds_the_registry_patches() -> None:
    assert ("patch", "/api/v1/hosts/{host_id}", "identity_file") in NULLABLE_FIELDS
    assert ("patch", "/api/v1/containers/{container_id}", "label") in NULLABLE_FIELDS


@pytest.mark.django_db
def test_an_explicit_null_on_any_write_field_is_never_a_server_error(fuzz_token: str) -> None:
    host = Host.objects.get(name="fuzz-host")
    Container.objects.create(host=host, kind="docker", ident="fuzz", label="fuzz")
    ids = {"host_id": host.pk, "container_id": Container.objects.get().pk}
    client = Client(headers={"Authorization": f"Bearer {fuzz_token}"})
    answers = {}
    for method, path, name in NULLABLE_FIELDS:
        url = path
        for param in ("host_id", "container_id", "profile_id", "instance_id", "sweep_id"):
            url = url.replace(f"{{{param}}}", str(ids.get(param, 1)))
        response = getattr(client, method)(url, {name: None}, content_type="application/json")
        answers[(method, path, name)] = response.status_code
    assert {k: v for k, v in answers.items() if v >= 500} == {}


FIVE_MB = 5 * 1024 * 1024
HUGE_IDS = (2**63 - 1, 2**63, 2**64)


def _operations() -> list[tuple[str, str]]:
    return [
        (method, path)
        for path, operations in RAW_SCHEMA["paths"].items()
        for method in operations
        if method in ("get", "post", "patch", "put", "delete")
    ]


def test_the_walk_covers_every_operation() -> None:
    assert len(_operations()) == sum(
        1 for ops in RAW_SCHEMA["paths"].values() for m in ops if m != "parameters"
    )


@pytest.mark.django_db
def test_every_operation_with_a_5_mb_body_or_ids_past_2_63_answers_without_a_server_error(
    fuzz_token: str,
) -> None:
    """Every operation of the schema, with every path id at 2^63 - 1, 2^63 and 2^64, and
    every write with a 5 MB JSON body: a client error each time, never a 5xx."""
    client = Client(headers={"Authorization": f"Bearer {fuzz_token}"})
    big = '{"notes": "' + "x" * FIVE_MB + '"}'
    answers: dict[tuple[str, str, str], int] = {}
    for method, path in _operations():
        params = [part[1:-1] for part in path.split("/") if part.startswith("{")]
        for huge in HUGE_IDS if params else (None,):
            url = path
            for param in params:
                url = url.replace(f"{{{param}}}", str(huge))
            if method in ("get", "delete"):
                response = getattr(client, method)(url)
            else:
                response = getattr(client, method)(url, "{}", content_type="application/json")
            answers[(method, url, "{}")] = response.status_code
        if method in ("post", "patch", "put"):
            url = path
            for param in params:
                url = url.replace(f"{{{param}}}", "1")
            response = getattr(client, method)(url, big, content_type="application/json")
            assert response.status_code == 413, (method, url, response.status_code)
            answers[(method, url, "5 MB")] = response.status_code
    assert {k: v for k, v in answers.items() if v >= 500} == {}
    assert len(answers) > len(_operations())
