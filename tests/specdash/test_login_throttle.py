"""Login throttling: wrong passwords lock one username *from one address* for a cool-off.

So guessing stops, yet nobody who knows the demo operator's username can lock the operator
out: other addresses log in as before, and the lock ends by itself.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import LazySettings
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "operator-pass-123"  # the operator fixture's
ATTACKER = "203.0.113.7"
OPERATOR_DESK = "198.51.100.20"


@pytest.fixture(autouse=True)
def _small_limit(settings: LazySettings) -> None:
    # Each wrong password costs a full password hash: three keep the tests quick.
    settings.AXES_FAILURE_LIMIT = 3


def _login(client: Client, password: str, address: str, **headers: str) -> Any:
    return client.post(
        "/accounts/login/",
        {"username": "op", "password": password},
        REMOTE_ADDR=address,
        headers=headers,
    )


def _logged_in(response: Any) -> bool:
    return response.status_code == 302 and response["Location"] == "/"


def _lock_out(address: str, limit: int, **headers: str) -> None:
    client = Client()
    statuses = [_login(client, "wrong-guess", address, **headers).status_code for _ in range(limit)]
    # The form answers each wrong password until the limit-th, which locks.
    assert statuses == [200] * (limit - 1) + [429]


def test_wrong_passwords_lock_that_username_from_that_address(
    operator: Any, settings: LazySettings
) -> None:
    _lock_out(ATTACKER, settings.AXES_FAILURE_LIMIT)
    refused = _login(Client(), PASSWORD, ATTACKER)
    assert refused.status_code == 429
    assert b'data-testid="locked-out"' in refused.content
    assert b"Logins as <strong>op</strong> from this address are paused" in refused.content
    assert "_auth_user_id" not in refused.client.session


def test_the_operator_logs_in_from_elsewhere_while_an_attacker_is_locked_out(
    operator: Any, settings: LazySettings
) -> None:
    _lock_out(ATTACKER, settings.AXES_FAILURE_LIMIT)
    assert _logged_in(_login(Client(), PASSWORD, OPERATOR_DESK))


def test_the_lock_ends_after_the_cool_off_and_failures_meanwhile_do_not_extend_it(
    operator: Any, settings: LazySettings
) -> None:
    settings.AXES_COOLOFF_TIME = timedelta(seconds=3)
    _lock_out(ATTACKER, settings.AXES_FAILURE_LIMIT)
    locked_at = time.monotonic()
    client = Client()
    assert _login(client, "still-guessing", ATTACKER).status_code == 429
    deadline = locked_at + 60
    while True:
        time.sleep(0.5)
        # Keep failing during the lock: with the cool-off extended on each failure, the
        # right password would never work again from here.
        response = _login(client, "still-guessing", ATTACKER)
        if response.status_code != 429:
            break
        assert time.monotonic() < deadline, "the lock never ended"
    assert time.monotonic() - locked_at >= 2.5
    assert _logged_in(_login(Client(), PASSWORD, ATTACKER))


def test_behind_a_proxy_clients_are_told_apart_by_the_address_it_appended(
    operator: Any, settings: LazySettings
) -> None:
    settings.SPECDASH_TRUSTED_PROXIES = 1
    proxy = "127.0.0.1"
    # The attacker forges a left-hand entry naming the operator's desk; the proxy appends
    # the attacker's real address, and only that one counts.
    _lock_out(proxy, settings.AXES_FAILURE_LIMIT, x_forwarded_for=f"{OPERATOR_DESK}, {ATTACKER}")
    assert _login(Client(), PASSWORD, proxy, x_forwarded_for=ATTACKER).status_code == 429
    assert _logged_in(_login(Client(), PASSWORD, proxy, x_forwarded_for=OPERATOR_DESK))
