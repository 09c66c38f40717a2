"""Secret-looking environment values, hidden wherever a profile's or a host's environment
leaves the database: the API's host and profile bodies, a sweep's environment snapshot."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "***"
# Matched anywhere in the name, case-insensitively: HF_TOKEN, AWS_SECRET_ACCESS_KEY, db_password.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL", re.IGNORECASE)


def masked_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``env`` with the values of secret-looking names replaced by ``***``."""
    return {k: (MASK if _SECRET_NAME.search(k) else v) for k, v in env.items()}
