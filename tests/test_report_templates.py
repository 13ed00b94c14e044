"""The report's templates ship in the package: a wheel built from the sources holds every file of
tasks/report/templates, and the pages render from the unpacked wheel (a non-editable install)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "tasks" / "report" / "templates"

RENDER_BOTH = """
import sys
import pandas as pd
import tasks.report.templating as templating
from tasks.report.build import ReportData
from tasks.report.human_eval_sheet import render_form
from tasks.report.render import render_html
from tasks.scores import score_frame
assert templating.__file__.startswith(sys.argv[1]), templating.__file__
items = pd.DataFrame({"item_id": ["item-0001"], "source_text": ["s"], "synthetic_text": ["<b>x</b>"]})
form = render_form(items, None, (), "e1")
page = render_html(ReportData(title="<t>", facts={}, summary=score_frame([])))
print(form.count("<script"), "&lt;b&gt;x&lt;/b&gt;" in form, "<title>&lt;t&gt;</title>" in page,
      "data-figures-loaded" in page, "--accent" in page)
"""


def test_wheel_ships_the_templates_and_renders_from_them(tmp_path: Path) -> None:
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("tasks", "flows"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "dist").glob("synthugc-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n for n in archive.namelist() if n.startswith("tasks/report/templates/")}
        archive.extractall(tmp_path / "installed")
    expected = {f"tasks/report/templates/{p.name}" for p in TEMPLATES.iterdir() if p.is_file()}
    assert expected and shipped == expected
    installed = str(tmp_path / "installed")
    out = subprocess.run([sys.executable, "-c", RENDER_BOTH, installed], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={"PYTHONPATH": installed, "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["2", "True", "True", "True", "True"]
