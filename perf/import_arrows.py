"""Count the import arrows inside one package, read from the source with ``ast`` (nothing is
imported), so a layout change can say what it did to them.

    python -m perf.import_arrows [package] [--list]

An arrow is "module A imports module B", both inside the package, counted once per pair
whether the import sits at module level or inside a function (a deferred import is still a
dependency). ``from pkg import mod`` points at the module ``pkg.mod``; ``from pkg.mod import
name`` at ``pkg.mod``; an import of a package's own name at its ``__init__``.

Three figures are printed:

- module arrows: every such pair;
- part arrows: the same pairs with each module folded into its part (a sub-package of the
  package, or a top-level module: ``benchmarks.sweeps.handler`` is the part
  ``benchmarks.sweeps``, ``benchmarks.audit`` is its own), arrows inside one part dropped;
- two-way part pairs: parts that import each other (the tangle a newcomer trips over).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(package: str) -> dict[str, Path]:
    """Every module of the package (migrations left out: Django writes them) by dotted name."""
    return {
        _module_name(path): path
        for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py"))
        if "migrations" not in path.parts
    }


def imported_names(module: str, path: Path) -> list[str]:
    """Dotted names the module's import statements reach, at any depth of the syntax tree."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            names.extend(f"{source}.{alias.name}" for alias in node.names)
    return names


def module_arrows(package: str) -> set[tuple[str, str]]:
    """(importer, imported) pairs of modules inside the package."""
    modules = package_modules(package)
    arrows: set[tuple[str, str]] = set()
    for module, path in modules.items():
        for name in imported_names(module, path):
            # The longest prefix that is a module of the package: the module itself, or the
            # package that defines the imported name.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                arrows.add((module, name))
    return arrows


def part_of(module: str, package: str) -> str:
    """The sub-package or top-level module of the package that holds the module."""
    rest = module.removeprefix(package).lstrip(".")
    return f"{package}.{rest.split('.')[0]}" if rest else package


def part_arrows(package: str, arrows: set[tuple[str, str]]) -> set[tuple[str, str]]:
    folded = {(part_of(a, package), part_of(b, package)) for a, b in arrows}
    return {(a, b) for a, b in folded if a != b}


def two_way_pairs(parts: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs of parts that import each other, each once, sorted (the import-contract test
    holds ``benchmarks`` to none)."""
    return sorted({(min(a, b), max(a, b)) for a, b in parts if (b, a) in parts})


def main(argv: list[str]) -> int:
    listing = "--list" in argv
    names = [a for a in argv if not a.startswith("--")]
    package = names[0] if names else "benchmarks"
    arrows = module_arrows(package)
    parts = part_arrows(package, arrows)
    two_way = two_way_pairs(parts)
    print(f"{package}: {len(package_modules(package))} modules")
    print(f"module arrows: {len(arrows)}")
    print(f"part arrows: {len(parts)}")
    print(f"two-way part pairs: {len(two_way)}")
    for a, b in two_way:
        print(f"  {a} <-> {b}")
    if listing:
        for a, b in sorted(parts):
            print(f"  {a} -> {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
