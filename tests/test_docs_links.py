"""Every relative link in README.md and docs/*.md points at a file that exists, and every #anchor at a heading of
that file (GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def anchors(path: Path) -> set[str]:
    """The ids GitHub gives the headings of a markdown file."""
    ids: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip()
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        base, n = slug, 1
        while slug in ids:
            slug, n = f"{base}-{n}", n + 1
        ids.add(slug)
    return ids


def broken_links(path: Path) -> list[str]:
    broken = []
    for match in LINK.finditer(_prose(path.read_text(encoding="utf-8"))):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    return broken


def test_readme_and_docs_links_resolve() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) > 2
    assert [b for page in pages for b in broken_links(page)] == []


def test_heading_ids_follow_github() -> None:
    page = ROOT / "docs" / "configuration.md"
    assert "settings-environment" in anchors(page)
    assert "direct-identifiers-pii" in anchors(ROOT / "docs" / "privacy.md")
