"""The repository is self-contained: no tracked file points at a folder beside the checkout, which a user
who clones the project does not have; what such a folder held lives in docs/architecture.md."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = "../" + "shared"  # spelled in two parts so this file does not match itself


def _tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no tracked files to read")
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name]


def test_no_tracked_file_refers_to_a_folder_outside_the_repository() -> None:
    files = _tracked_files()
    assert ROOT / "pyproject.toml" in files and ROOT / "docs" / "architecture.md" in files
    offending = []
    for path in files:
        if path.is_file():
            text = path.read_bytes().decode("utf-8", errors="replace")
            offending += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(text.splitlines(), 1)
                          if OUTSIDE in line]
    assert offending == [], f"{OUTSIDE} is not part of a clone: {', '.join(offending)}"


def test_readme_and_infra_link_the_architecture_page() -> None:
    for name in ("README.md", "infra/README.md"):
        assert "docs/architecture.md" in (ROOT / name).read_text(encoding="utf-8"), name
    pins = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for pin in ('"torch==2.13.0",  #', '"prefect>=3.8.8,<3.9",  #', '"fastapi>=0.139,<0.151",  #',
                '"sqlalchemy[asyncio]>=2.0,<2.1",  #'):
        assert pin in pins, f"{pin} has no reason beside it"
