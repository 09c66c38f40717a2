"""The far-side agent's script, joined from its parts (no Django here).

The agent runs on the GPU host as one script read from stdin, with nothing but the Python 3.8+
standard library: it cannot import anything sent alongside it. Its source is kept as modules
(`hosts/agent/parts/`, one concern each, type-checked and read like the rest of the code), and
`join_agent()` concatenates them in `PARTS` order: the imports of the standard library gathered
once at the top, the imports between parts dropped (a part only uses what an earlier one
defines, so the joined script runs top to bottom the same way), and the rest kept verbatim.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from hosts.agent.parts import PARTS

PARTS_DIR = Path(__file__).with_name("parts")
SIBLINGS = "hosts.agent.parts"


class JoinError(RuntimeError):
    """The parts cannot make one script (a name defined twice, a foreign import)."""


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def join_agent(parts_dir: Path = PARTS_DIR) -> str:
    header = ast.get_docstring(ast.parse((parts_dir / "__init__.py").read_text("utf-8")))
    plain: set[str] = set()
    from_names: dict[str, set[str]] = {}
    bodies: list[str] = []
    defined: dict[str, str] = {}
    for part in PARTS:
        source = (parts_dir / f"{part}.py").read_text("utf-8")
        tree = ast.parse(source)
        for name in _top_level_names(tree):
            if name in defined:
                raise JoinError(f"{name!r} is defined in both {defined[name]} and {part}")
            defined[name] = part
        dropped: set[int] = set()
        for index, node in enumerate(tree.body):
            docstring = (
                index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            )
            if isinstance(node, ast.Import):
                for alias in node.names:
                    _check_stdlib(alias.name, part)
                    plain.add(ast.unparse(ast.Import(names=[alias])))
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if module != "__future__" and not module.startswith(SIBLINGS):
                    _check_stdlib(module, part)
                    from_names.setdefault(module, set()).update(a.name for a in node.names)
            elif not docstring:
                continue
            end = node.end_lineno if node.end_lineno is not None else node.lineno
            dropped.update(range(node.lineno, end + 1))
        kept = [line for n, line in enumerate(source.splitlines(), 1) if n not in dropped]
        bodies.append(f"# {'-' * 75} {part}\n" + "\n".join(kept).strip("\n"))
    imports = sorted(plain) + [
        f"from {module} import {', '.join(sorted(names))}"
        for module, names in sorted(from_names.items())
    ]
    return (
        f'"""{header}\n"""\n\nfrom __future__ import annotations\n\n'
        + "\n".join(imports)
        + "\n\n\n"
        + "\n\n\n".join(bodies)
        + "\n"
    )


def _check_stdlib(module: str, part: str) -> None:
    if module.split(".")[0] not in sys.stdlib_module_names:
        raise JoinError(f"part {part} imports {module}, which is not in the standard library")
