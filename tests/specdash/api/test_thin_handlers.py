"""The API's handlers stay thin: no ORM in their bodies, and every one declares its role."""

from __future__ import annotations

import ast
from pathlib import Path

import specdash.api

API_DIR = Path(specdash.api.__file__).parent
ROUTER_METHODS = {"get", "post", "put", "patch", "delete"}


def _handlers() -> list[tuple[str, ast.FunctionDef]]:
    found = []
    for path in sorted(API_DIR.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if (
                    isinstance(deco, ast.Call)
                    and isinstance(deco.func, ast.Attribute)
                    and deco.func.attr in ROUTER_METHODS
                    and isinstance(deco.func.value, ast.Name)
                    and deco.func.value.id == "router"
                ):
                    found.append((f"{path.name}:{node.name}", node))
    return found


def _decorator_names(node: ast.FunctionDef) -> list[str]:
    return [
        d.func.id
        for d in node.decorator_list
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Name)
    ]


def test_the_scan_finds_the_handlers() -> None:
    names = {name for name, _ in _handlers()}
    assert "hosts.py:host_detail" in names
    assert "sweeps.py:sweep_create" in names
    assert len(names) > 40


def test_no_handler_body_touches_the_orm() -> None:
    offenders = [
        name
        for name, node in _handlers()
        for sub in ast.walk(node)
        if (isinstance(sub, ast.Attribute) and sub.attr == "objects")
        or (isinstance(sub, ast.Name) and sub.id == "get_object_or_404")
    ]
    assert offenders == []


def test_every_handler_declares_its_role_by_decorator() -> None:
    missing = [name for name, node in _handlers() if "requires" not in _decorator_names(node)]
    assert missing == []


def test_no_handler_checks_a_role_in_its_body() -> None:
    offenders = [
        name
        for name, node in _handlers()
        for stmt in node.body
        for sub in ast.walk(stmt)
        if isinstance(sub, ast.Attribute)
        and isinstance(sub.value, ast.Name)
        and sub.value.id == "roles"
    ]
    assert offenders == []
