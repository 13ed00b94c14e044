"""Stages on threads: what they import on first use is imported once before they run side by side, because two
threads' first imports of packages that import each other can deadlock (a CI run lost two metrics stages so:
nltk on one thread, sklearn.feature_extraction.text on the other)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tasks.parallel import IMPORTED_BEFORE_THREADS, IMPORTED_ON_MAIN_THREAD

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"tasks", "flows", "synthugc", "benchmarks"}

RACE = """
import sys, threading, time, importlib
if sys.argv[2] == "first":
    from tasks.parallel import import_before_threads
    import_before_threads()
errors = []
def load(name, delay):
    time.sleep(delay)
    try:
        importlib.import_module(name)
    except Exception as exc:
        errors.append(f"{name}: {type(exc).__name__}: {exc}")
threads = [threading.Thread(target=load, args=("nltk", 0.0)),
           threading.Thread(target=load, args=("sklearn.feature_extraction.text", float(sys.argv[1])))]
[t.start() for t in threads]
[t.join() for t in threads]
print(errors[0] if errors else "ok")
"""


def lazily_imported_packages() -> set[str]:
    """Third-party modules imported inside a function body under tasks/ (what a stage imports on first use)."""
    found = set()
    for path in (ROOT / "tasks").rglob("*.py"):
        for func in ast.walk(ast.parse(path.read_text())):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                found |= {n for n in names if n.split(".")[0] not in FIRST_PARTY | set(sys.stdlib_module_names)}
    return found


def test_every_package_a_stage_imports_on_first_use_is_imported_before_threads():
    covered = set(IMPORTED_BEFORE_THREADS) | set(IMPORTED_ON_MAIN_THREAD)
    uncovered = {m for m in lazily_imported_packages()
                 if not any(m == c or m.startswith(c + ".") for c in covered)}
    assert not uncovered, f"add to tasks.parallel.IMPORTED_BEFORE_THREADS: {sorted(uncovered)}"


def test_threads_first_importing_nltk_and_scikit_learn_do_not_deadlock_once_imported_before():
    """nltk on one thread and sklearn.feature_extraction.text 0.6 s later on another: at that offset the two first
    imports deadlock on this project's 2-core machines; imported before the threads, neither fails."""
    out = subprocess.run([sys.executable, "-c", RACE, "0.6", "first"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "ok", (out.stdout, out.stderr[-2000:])
