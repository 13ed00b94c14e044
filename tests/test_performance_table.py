"""docs/performance.md is exactly what benchmarks/results.jsonl gives (``python -m benchmarks.results table``), as the
registry tables are checked against the registries; and a benchmark's :func:`record` prints its RESULT line and
appends one structured record to the results file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import results  # noqa: E402


def test_the_performance_page_is_generated_from_the_results_file() -> None:
    page = ROOT / "docs" / "performance.md"
    assert page.read_bytes() == results.render(results.RESULTS).encode("utf-8"), (
        "docs/performance.md is stale: .venv/bin/python -m benchmarks.results table --write")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.results", "table", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_every_benchmark_that_has_a_record_has_a_row_with_its_latest_figures() -> None:
    records = results.read_records(results.RESULTS)
    assert records, "benchmarks/results.jsonl holds no record"
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    for entry in records:
        assert {"benchmark", "command", "commit", "machine", "load", "figures"} <= set(entry), entry
        assert f"| `{entry['benchmark']}` |" in page, entry["benchmark"]
    demo = [e for e in records if e["benchmark"] == "demo"][-1]
    assert f"first_s={demo['figures']['first_s']:g}" in page


def test_a_stale_page_is_caught(tmp_path, monkeypatch) -> None:
    stale = tmp_path / "performance.md"
    stale.write_text(results.render(results.RESULTS).replace("| `demo` |", "| `demo2` |"), encoding="utf-8")
    monkeypatch.setattr(results, "TABLE", stale)
    assert results.main(["table", "--check"]) == 1
    assert results.main(["table", "--write"]) == 0
    assert stale.read_text(encoding="utf-8") == results.render(results.RESULTS)


def test_record_prints_the_result_line_and_appends_one_record(tmp_path, monkeypatch, capsys) -> None:
    target = tmp_path / "results.jsonl"
    monkeypatch.setenv(results.ENV, str(target))
    entry = results.record("fake", "docs=3 seconds=1.50  ratio=nan ok=true load=0.10,0.20", command="python fake.py")
    assert capsys.readouterr().out == "RESULT docs=3 seconds=1.50 ratio=nan ok=true load=0.10,0.20\n"
    results.record("fake", {"docs": 4, "name": "x"}, command="python fake.py")
    lines = target.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and json.loads(lines[0]) == entry
    assert entry["figures"] == {"docs": 3, "seconds": 1.5, "ratio": "nan", "ok": "true", "load": "0.10,0.20"}
    assert entry["command"] == "python fake.py" and entry["commit"]
    assert entry["machine"]["cores"] >= 1 and len(entry["load"]) == 3
    assert json.loads(lines[1])["figures"] == {"docs": 4, "name": "x"}
    table = results.table(results.read_records(target))
    assert table.count("| `fake` |") == 1 and "docs=4" in table  # the latest record of the benchmark and machine
