"""Secrets hidden wherever an environment or a launch argv leaves the database: pages, the
API's bodies, a sweep's environment snapshot and the exports built from it.

A value is a secret by its name (``HF_TOKEN``, ``DB_PASS``, ``MYSQL_PWD``, ``SENTRY_DSN``), by
the flag before it (``--api-key VALUE``, ``--api-key=VALUE``) or by its shape (the password of a
URL, ``postgres://user:pw@host``; a ``NAME=value`` item with a secret name). An edit that sends
a masked value back keeps the stored secret (``unmask_env``, ``unmask_argv``): reading a
profile and writing it back never saves the mask over the real value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from benchlib.json_types import JsonObject

MASK = "***"
# Matched anywhere in the name, case-insensitively: HF_TOKEN, AWS_SECRET_ACCESS_KEY,
# db_password; and as a whole word: DB_PASS, MYSQL_PWD, SENTRY_DSN, BASIC_AUTH.
_SECRET_NAME = re.compile(
    r"TOKEN(?!IZER)|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL|(?:^|_)(?:PASS|PWD|DSN|AUTH)(?:_|$)",
    re.IGNORECASE,
)
# Flags whose value is a secret, as words of the flag's name: --api-key, --admin-api-key,
# --hf-token, --password, --ssl-keyfile-password. Not --max-num-batched-tokens ("tokens").
_SECRET_FLAG = re.compile(
    r"^--?(?:[a-z0-9]+-)*(?:api-key|token|password|passwd|pwd|secret|credentials?|dsn)"
    r"(?:-[a-z0-9]+)*$",
    re.IGNORECASE,
)
# The password of a URL's user info: scheme://user:PASSWORD@host.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/?#@\s:]*:)[^/?#@\s]+(?=@)", re.I)
# NAME=value inside one argv item or a value (an `env NAME=value` prefix, a -e NAME=value).
_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.+)$", re.S)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def is_secret_flag(token: str) -> bool:
    return bool(_SECRET_FLAG.match(token.split("=", 1)[0]))


def masked_value(value: Any) -> Any:
    """``value`` with the secrets its shape shows hidden (a URL's password, a secret
    ``NAME=value``); anything but a string unchanged."""
    if not isinstance(value, str):
        return value
    assignment = _ASSIGNMENT.match(value)
    if assignment and is_secret_name(assignment["name"]):
        return f"{assignment['name']}={MASK}"
    return _URL_PASSWORD.sub(lambda m: m["head"] + MASK, value)


# In free text (an event's message, a process's command line): a secret flag and its value,
# a secret NAME=value.
_TEXT_FLAG = re.compile(
    r"(?P<flag>(?<![\w-])--?(?:[a-z0-9]+-)*(?:api-key|token|password|passwd|pwd|secret|"
    r"credentials?|dsn)(?:-[a-z0-9]+)*)(?P<sep>=|\s+)(?P<value>'[^']*'|\"[^\"]*\"|\S+)",
    re.IGNORECASE,
)
_TEXT_ASSIGNMENT = re.compile(r"(?<![\w-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\S+)")


def masked_text(text: str) -> str:
    """Free text (a message, a shell line) with its secret flags' values, secret
    ``NAME=value`` and URL passwords hidden."""
    text = _TEXT_FLAG.sub(lambda m: m["flag"] + m["sep"] + MASK, text)
    text = _TEXT_ASSIGNMENT.sub(
        lambda m: f"{m['name']}={MASK}" if is_secret_name(m["name"]) else m[0], text
    )
    return _URL_PASSWORD.sub(lambda m: m["head"] + MASK, text)


def masked_env(env: Mapping[str, object]) -> JsonObject:
    """A copy of ``env`` with the values of secret-looking names replaced by ``***`` and the
    secrets in the other values' shapes hidden."""
    return {k: (MASK if is_secret_name(k) else masked_value(v)) for k, v in env.items()}


def masked_argv(argv: Sequence[str]) -> list[str]:
    """A copy of ``argv`` with the value of each secret flag (``--api-key V``,
    ``--api-key=V``) replaced by ``***`` and every item's shaped secrets hidden; as long as
    ``argv``, item for item."""
    out: list[str] = []
    after_flag = False
    for token in argv:
        if after_flag:
            out.append(MASK)
            after_flag = False
        elif token.startswith("-") and is_secret_flag(token):
            if "=" in token:
                out.append(token.split("=", 1)[0] + "=" + MASK)
            else:
                out.append(token)
                after_flag = True
        else:
            out.append(masked_value(token))
    return out


def masked_tree(value: Any) -> Any:
    """A copy of a JSON-like snapshot (a sweep's environment, a server's /server_info) with
    its secrets hidden: a text under a secret-looking key, the value after a secret flag in a
    list of texts (an argv), and every text's shaped secrets. Numbers stay, whatever their
    key (``max_total_num_tokens`` is a count, not a token)."""
    if isinstance(value, Mapping):
        return {
            k: (MASK if isinstance(v, str) and v and is_secret_name(str(k)) else masked_tree(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        if value and all(isinstance(item, str) for item in value):
            return [masked_text(item) for item in masked_argv(value)]
        return [masked_tree(item) for item in value]
    return masked_text(value) if isinstance(value, str) else value


def unmask_env(
    new: Mapping[str, object], stored: Mapping[str, object]
) -> tuple[JsonObject, list[str]]:
    """``new`` with every value that equals the stored value's mask put back to the stored
    value; and the names whose value holds the mask with no stored secret behind it."""
    shown = masked_env(stored)
    out: JsonObject = {}
    unknown: list[str] = []
    for name, value in new.items():
        if name in stored and value == shown[name] and value != stored[name]:
            out[name] = stored[name]
        else:
            out[name] = value
            if isinstance(value, str) and MASK in value:
                unknown.append(name)
    return out, unknown


def unmask_argv(new: Sequence[str], stored: Sequence[str]) -> tuple[list[str], list[int]]:
    """``new`` with each item that reads as a masked item of the stored argv put back to the
    stored item (matched by the secret flag before it, else by its masked text); and the
    positions that hold the mask with no stored secret behind them."""
    shown = masked_argv(stored)
    by_text = {s: item for s, item in zip(shown, stored, strict=True) if s != item}
    by_flag = {
        shown[i - 1]: stored[i]
        for i in range(1, len(stored))
        if shown[i] == MASK and shown[i] != stored[i]
    }
    out: list[str] = []
    unknown: list[int] = []
    for i, item in enumerate(new):
        if MASK not in item:
            out.append(item)
        elif item == MASK and i > 0 and new[i - 1] in by_flag:
            out.append(by_flag[new[i - 1]])
        elif item != MASK and item in by_text:
            out.append(by_text[item])
        else:
            out.append(item)
            unknown.append(i)
    return out, unknown
