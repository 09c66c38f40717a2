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
# db_password; and as a whole word: DB_PASS, MYSQL_PWD, SENTRY_DSN, BASIC_AUTH. Not a
# tokenizer, nor a count of tokens (max_total_tokens, speculative_num_draft_tokens): a
# server's log prints those beside its key, and an operator reads them there.
_SECRET_NAME = re.compile(
    r"TOKEN(?!IZER|S(?![A-Za-z]))|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL"
    r"|(?:^|_)(?:PASS|PWD|DSN|AUTH)(?:_|$)",
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


# In free text (an event's message, a process's command line, a server's log): a secret flag
# and its value; a secret NAME=value, as a shell line or a Python repr writes it (SGLang
# logs its ServerArgs, api_key='...' included); a secret 'name': value, as a dict's repr or
# JSON writes it; an HTTP bearer token.
_TEXT_FLAG = re.compile(
    r"(?P<flag>(?<![\w-])--?(?:[a-z0-9]+-)*(?:api-key|token|password|passwd|pwd|secret|"
    r"credentials?|dsn)(?:-[a-z0-9]+)*)(?P<sep>=|\s+)(?P<value>'[^']*'|\"[^\"]*\"|\S+)",
    re.IGNORECASE,
)
# A secret NAME= and the value after it. A quoted value keeps its quotes; an unquoted one
# keeps the commas and brackets that close the repr around it (``api_key=k, port=1)``), so
# the rest of the line still reads.
_TEXT_NAME = re.compile(r"(?<![\w-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=")
_TEXT_VALUE = re.compile(
    r"(?P<quoted>'[^']*'|\"[^\"]*\")|(?P<value>\S+?)(?P<tail>[,)\]}]*)(?=\s|$)"
)
_TEXT_QUOTED_KEY = re.compile(
    r"(?P<q>['\"])(?P<name>[A-Za-z_][\w-]*)(?P=q)(?P<sep>\s*:\s*)"
    r"(?P<value>'[^']*'|\"[^\"]*\"|\[[^\]]*\])"
)
_BEARER = re.compile(r"(?P<head>\bBearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
# Values that name no secret: SGLang's repr prints api_key=None when no key is set.
_NOT_A_SECRET = frozenset({"None", "True", "False", "null", "true", "false"})


def _masked_assignments(text: str) -> str:
    # A scan rather than one substitution: a non-secret name's value is not skipped over,
    # so a secret assignment inside it (``args=ServerArgs(api_key='k')``) is still found.
    out: list[str] = []
    pos = 0
    while name := _TEXT_NAME.search(text, pos):
        out.append(text[pos : name.end()])
        pos = name.end()
        value = _TEXT_VALUE.match(text, pos) if is_secret_name(name["name"]) else None
        if value is None or value["value"] in _NOT_A_SECRET:
            continue
        if value["quoted"] is not None:
            out.append(value["quoted"][0] + MASK + value["quoted"][-1])
        else:
            out.append(MASK + value["tail"])
        pos = value.end()
    out.append(text[pos:])
    return "".join(out)


def _masked_quoted_key(m: re.Match[str]) -> str:
    if not is_secret_name(m["name"]):
        return m[0]
    value = m["value"]
    return f"{m['q']}{m['name']}{m['q']}{m['sep']}{value[0]}{MASK}{value[-1]}"


def masked_text(text: str) -> str:
    """Free text (a message, a shell line, a server's log) with its secret flags' values,
    secret ``NAME=value`` and ``'name': value``, bearer tokens and URL passwords hidden."""
    text = _TEXT_FLAG.sub(lambda m: m["flag"] + m["sep"] + MASK, text)
    text = _masked_assignments(text)
    text = _TEXT_QUOTED_KEY.sub(_masked_quoted_key, text)
    text = _BEARER.sub(lambda m: m["head"] + MASK, text)
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
