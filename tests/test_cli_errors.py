"""What runs after a run's flow (the demo's protect and release) fails loudly: the CLI silences the temporary Prefect
server's exit noise after the run's summary, which swallowed an unexpected error there whole (exit 1, no line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_SCRIPT = """
import sys, time
from pathlib import Path

import typer

from flows.cli.runs import _run_locked
from flows.run_summary import RunSummary
from tasks.errors import InputError

def then():
    if sys.argv[1] == "bug":
        raise ImportError("cannot import name 'gone' from 'somewhere'")
    raise InputError("timelines.parquet: row 3: no text")

summary = RunSummary(experiment="x", report_html=None, report_markdown=None, manifest="m.json")
try:  # as typer's app ends a command
    _run_locked(Path("c.yaml"), [], sys.argv[2] == "verbose", then, None, summary, time.perf_counter())
except typer.Exit as exc:
    sys.exit(exc.exit_code)
"""


def _after_the_run(kind: str, verbose: bool) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _SCRIPT, kind, "verbose" if verbose else "quiet"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_a_bug_after_the_run_is_one_line_and_exit_1_and_its_traceback_with_verbose():
    quiet = _after_the_run("bug", verbose=False)
    assert quiet.returncode == 1
    assert ("synthugc: internal error: ImportError: cannot import name 'gone' from 'somewhere' (--verbose shows "
            "the traceback)") in quiet.stderr.splitlines()
    assert "Traceback" not in quiet.stderr
    loud = _after_the_run("bug", verbose=True)
    assert loud.returncode == 1 and "Traceback" in loud.stderr and "ImportError: cannot import name 'gone'" in \
        loud.stderr


def test_bad_input_after_the_run_is_one_line_and_exit_2():
    done = _after_the_run("input", verbose=False)
    assert done.returncode == 2
    assert "synthugc: error: timelines.parquet: row 3: no text" in done.stderr.splitlines()
    assert "Traceback" not in done.stderr


def test_the_default_console_keeps_liblinears_convergence_warning_out_of_the_log():
    """A fit that stops at max_iter is still used (the classifiers say so); the warning's ``catch_warnings`` is
    process-wide, so stages on threads leaked it: the default console filters it for the whole process."""
    import warnings

    from flows.cli.common import _quiet_libraries

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _quiet_libraries()
        warnings.warn("Liblinear failed to converge, increase the number of iterations.", UserWarning, stacklevel=1)
        warnings.warn("another warning", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["another warning"]
