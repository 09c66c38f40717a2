"""The agent's script is joined from its parts: one stdlib-only file that runs as the parts do."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hosts.agent import AGENT_SOURCE
from hosts.agent.join import PARTS_DIR, JoinError, join_agent
from hosts.agent.parts import PARTS


def _imported_modules(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_joined_script_compiles_and_imports_only_the_standard_library() -> None:
    compile(AGENT_SOURCE, "specdash_agent.py", "exec")
    imported = _imported_modules(AGENT_SOURCE)
    assert {m.split(".")[0] for m in imported} <= set(sys.stdlib_module_names)
    # Every part is in it, in order.
    rules = [line.split()[-1] for line in AGENT_SOURCE.splitlines() if line.startswith("# ---")]
    assert rules == list(PARTS)


def test_each_part_uses_only_the_standard_library_and_earlier_parts() -> None:
    for index, part in enumerate(PARTS):
        source = (PARTS_DIR / f"{part}.py").read_text()
        for module in _imported_modules(source):
            if module.startswith("hosts.agent.parts."):
                assert module.rpartition(".")[2] in PARTS[:index], (part, module)
            else:
                assert module.split(".")[0] in sys.stdlib_module_names, (part, module)


def test_the_joined_script_answers_as_the_agent() -> None:
    done = subprocess.run(
        [sys.executable, "-", "nonsense", "{}"],
        input=AGENT_SOURCE,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "SPECDASH-BEGIN"
    assert lines[-1].startswith('SPECDASH-RESULT {"ok": false, "error": "unknown command')


def _copy_parts(tmp_path: Path) -> Path:
    copied = tmp_path / "parts"
    shutil.copytree(PARTS_DIR, copied)
    return copied


def test_a_name_defined_in_two_parts_is_refused(tmp_path: Path) -> None:
    parts = _copy_parts(tmp_path)
    main = parts / "main.py"
    main.write_text(main.read_text() + "\n\nBEGIN_MARKER = 'again'\n")
    with pytest.raises(JoinError, match="'BEGIN_MARKER' is defined in both base and main"):
        join_agent(parts)


def test_a_part_importing_outside_the_standard_library_is_refused(tmp_path: Path) -> None:
    parts = _copy_parts(tmp_path)
    probe = parts / "probe.py"
    probe.write_text("import httpx\n" + probe.read_text())
    with pytest.raises(JoinError, match="part probe imports httpx"):
        join_agent(parts)
