"""The house's size limits (docs/architecture.md, "Rules of the house"): no module of ``tasks/`` or ``flows/`` over
700 lines and no class over 150 lines, so each file and class holds one seam a reader can take in at once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 700
MAX_CLASS_LINES = 150


def sources() -> list[Path]:
    """Every Python module of ``tasks/`` and ``flows/``."""
    return sorted(p for folder in ("tasks", "flows") for p in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in p.parts)


def long_classes(path: Path, limit: int) -> list[str]:
    """``name (lines)`` of each class in ``path`` (nested ones too) longer than ``limit`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{node.name} ({node.end_lineno - node.lineno + 1})" for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > limit]


def test_no_module_over_the_line_limit():
    assert len(sources()) > 100  # the walk found the house, not an empty folder
    over = {str(p.relative_to(ROOT)): n for p in sources()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_no_class_over_the_line_limit():
    over = {str(p.relative_to(ROOT)): found for p in sources() if (found := long_classes(p, MAX_CLASS_LINES))}
    assert not over, f"classes over {MAX_CLASS_LINES} lines: {over}"


@pytest.mark.parametrize(("lines", "found"), [(150, []), (149, ["Wide (150)"])])
def test_a_class_is_measured_from_its_header_to_its_last_line(tmp_path, lines, found):
    body = "\n".join(f"    x{i} = {i}" for i in range(149))
    source = tmp_path / "wide.py"
    source.write_text(f"import os\n\n\nclass Wide:\n{body}\n\n\nVALUE = 1\n", encoding="utf-8")
    assert long_classes(source, lines) == found
