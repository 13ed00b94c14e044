"""Imports go one way: every module of ``tasks/`` and ``flows/`` imports (at module level or inside a function)
only from its own package or from the packages below it, in the order docs/architecture.md states
("Import direction"). A package added to ``tasks/`` must be placed in that order here before it passes."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Bottom first. A unit may import the units of earlier layers, never one of its own layer (siblings) or above.
#: A unit is a package of ``tasks/`` (``metrics``), a top-level module of ``tasks/`` (``layout``), ``flows``, or
#: ``protect.files``: the names of protect's output files, which the report reads (and nothing else of protect).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "settings", "intervals", "limits", "signatures", "registry"),
    ("paths", "store", "scores", "parallel"),
    ("budgets", "runlock", "layout", "protect.files"),
    ("corpus", "models"),
    ("preflight", "training"),
    ("generate",),
    ("privacy", "metrics"),
    ("catalogues",),
    ("report",),
    ("protect",),
    ("flows",),
)
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def unit_of(module: str) -> str | None:
    """The unit a dotted module name belongs to (None: outside tasks/ and flows/)."""
    parts = module.split(".")
    if parts[0] == "flows":
        return "flows"
    if parts[0] != "tasks" or len(parts) < 2:
        return None
    if parts[1] == "protect" and len(parts) > 2 and parts[2] == "files":
        return "protect.files"
    return parts[1]


def module_of(path: Path) -> tuple[str, bool]:
    """A source file's dotted module name, and whether it is a package's ``__init__``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement reads (relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not node.level:
        return [node.module or ""]
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return [".".join([*base, *([node.module] if node.module else [])])]


def sources() -> list[Path]:
    return sorted([*ROOT.glob("tasks/**/*.py"), *ROOT.glob("flows/**/*.py")])


def upward_imports() -> list[str]:
    """Every import that reads a unit of the same layer or above its own, as ``file:line: import (a -> b)``."""
    problems = []
    for path in sources():
        module, is_package = module_of(path)
        own = unit_of(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in imported(node, module, is_package):
                other = unit_of(target)
                if other is None or other == own:
                    continue
                if own not in RANK or other not in RANK:
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: {target} ({own} -> {other}: "
                                    f"a unit missing from LAYERS)")
                elif RANK[other] >= RANK[own]:
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {target} ({own} -> {other}: "
                                    f"{'a sibling' if RANK[other] == RANK[own] else 'upward'})")
    return problems


def test_every_import_goes_down_the_layers():
    assert upward_imports() == []


def test_every_unit_of_tasks_is_placed():
    units = {unit_of(module_of(p)[0]) for p in sources()} - {None, "tasks"}
    assert units <= set(RANK), sorted(units - set(RANK))


def test_an_upward_import_is_caught_with_its_file_and_line(tmp_path, monkeypatch):
    """The check itself: a layout module importing protect, and report importing the protect loop, are named."""
    (tmp_path / "tasks" / "report").mkdir(parents=True)
    (tmp_path / "tasks" / "layout.py").write_text("from tasks.protect.files import ROUND_CODE\n", encoding="utf-8")
    (tmp_path / "tasks" / "report" / "x.py").write_text(
        "from tasks.protect.files import ROUNDS_COLUMNS\n\ndef f():\n    from tasks.protect import loop\n",
        encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert upward_imports() == [
        "tasks/layout.py:1: imports tasks.protect.files (layout -> protect.files: a sibling)",
        "tasks/report/x.py:4: imports tasks.protect (report -> protect: upward)",
    ]
