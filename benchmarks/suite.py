"""Benchmark of the README's second command: the test suite as ``make test`` runs it, in this checkout.

Runs the ``make test`` recipe (ruff, compileall, then pytest with the Makefile's workers and marker, ``-n
TEST_WORKERS --dist loadfile -m "not scale"``, read from the Makefile so the two cannot drift) and a JUnit report, and prints the wall time with the load average,
the test counts, the ten test files and the 25 tests with the most seconds (a file's tests run one after the other on one
worker; the suite's wall time is the busier worker's sum). The reference is the target, 480 s on 2 cores (there
is no other suite to compare with): the ratio says how far from it the suite is. Run it on a quiet machine,
nothing else running, set up (``make setup``). Ends with ``RESULT suite_s=... tests=... passed=... failed=...
skipped=... target_s=480 over_target=... workers=... load=...``.

Run: ``.venv/bin/python benchmarks/suite.py`` (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from flow import load_average

from benchmarks.results import record

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 480.0


def makefile_test_command() -> tuple[list[str], list[str], str]:
    """(the steps of ``make test`` before pytest, as shell lines for this venv; pytest's arguments; its worker
    count), read from the Makefile's ``test`` recipe."""
    text = (ROOT / "Makefile").read_text()
    workers = re.search(r"^TEST_WORKERS \?= (\d+)$", text, re.M)
    recipe = re.search(r"^test: setup\n((?:\t.*\n)+)", text, re.M)
    if workers is None or recipe is None:
        sys.exit("benchmarks/suite.py: the Makefile has no TEST_WORKERS or test recipe to read")
    lines = [cmd.strip() for cmd in recipe[1].splitlines()]
    at = next(i for i, cmd in enumerate(lines) if "pytest" in cmd)
    venv = str(Path(sys.executable).parent.parent)
    before = [cmd.replace("$(VENV)", venv) for cmd in lines[:at]]
    args = shlex.split(lines[at].replace("$(VENV)/bin/pytest", "").replace("$(TEST_WORKERS)", workers[1]))
    return before, args, workers[1]


def test_seconds(junit: Path) -> Counter:
    """Seconds per test (setup, call and teardown), as ``file.py::name``, from a JUnit report."""
    seconds: Counter = Counter()
    for case in ET.parse(junit).iter("testcase"):
        seconds[_test_name(case)] += float(case.get("time", 0.0))
    return seconds


def _test_name(case: ET.Element) -> str:
    """A JUnit test case as ``file.py::name``."""
    return case.get("classname", "?").replace(".", "/") + ".py::" + case.get("name", "?")


def failed_tests(junit: Path) -> list[str]:
    """The tests that failed or errored, as ``file.py::name``, from a JUnit report."""
    return [_test_name(case) for case in ET.parse(junit).iter("testcase")
            if case.find("failure") is not None or case.find("error") is not None]


def file_seconds(junit: Path) -> Counter:
    """Seconds per test file (the sum of its tests') from a JUnit report."""
    seconds: Counter = Counter()
    for test, spent in test_seconds(junit).items():
        seconds[test.split("::")[0]] += spent
    return seconds


def main(argv: Sequence[str] | None = None) -> None:
    """Run the suite, print the times and the RESULT line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", type=Path, help="also keep the JUnit report here (per-test seconds)")
    opts = parser.parse_args(argv)
    before, args, workers = makefile_test_command()
    python = Path(sys.executable)
    print(f"synthugc suite benchmark: {os.cpu_count()} cpus; load average at start {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="synthugc-suite-bench-") as tmp:
        junit = Path(tmp) / "suite.xml"
        start = time.perf_counter()
        steps = subprocess.CompletedProcess(before, 0)
        for cmd in before:  # as make runs a recipe: each line in turn, stopping at the first that fails
            steps = subprocess.run(cmd, shell=True, cwd=ROOT)
            if steps.returncode:
                break
        tests = subprocess.run([str(python), "-m", "pytest", *args, f"--junitxml={junit}", "-p", "no:cacheprovider"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        suite_s = time.perf_counter() - start
        if opts.junit and junit.exists():
            opts.junit.write_bytes(junit.read_bytes())
        tail = tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else ""
        root = ET.parse(junit).getroot() if junit.exists() else None
        suites = list(root.iter("testsuite")) if root is not None else []
        count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
        failed = count["failures"] + count["errors"]
        passed = count["tests"] - failed - count["skipped"]
        print(f"steps before pytest (ruff, compileall) exit {steps.returncode}; pytest: {tail}")
        print(f"suite (ruff, compileall, pytest -n {workers}): {suite_s:.1f} s, target {TARGET_S:.0f} s -> "
              f"{suite_s / TARGET_S:.2f}x of target ({'met' if suite_s <= TARGET_S else 'NOT met'}); "
              f"load average at end {load_average()}")
        if junit.exists():
            print("test files with the most seconds:")
            for name, seconds in file_seconds(junit).most_common(10):
                print(f"  {seconds:7.1f} s  {name}")
            print("tests with the most seconds:")
            for name, seconds in test_seconds(junit).most_common(25):
                print(f"  {seconds:7.1f} s  {name}")
            for name in failed_tests(junit):
                print(f"FAILED {name}")
    record("suite", f"suite_s={suite_s:.1f} tests={count['tests']} passed={passed} failed={failed} "
          f"skipped={count['skipped']} target_s={TARGET_S:.0f} over_target={suite_s / TARGET_S:.2f} "
          f"workers={workers} load={os.getloadavg()[0]:.2f}")
    if steps.returncode or tests.returncode:
        sys.exit(1)


if __name__ == "__main__":
    main()
