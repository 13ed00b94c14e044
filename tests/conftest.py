"""Test environment: offline models, an isolated Prefect home (its temporary server and database live in a
tmp folder), and no analytics. Set before Prefect is imported anywhere."""

from __future__ import annotations

import os
import tempfile

from tasks.settings import apply_environment_defaults  # imports no Prefect: the env is set before it loads

_PREFECT_HOME = tempfile.mkdtemp(prefix="synthugc-prefect-home-")
os.environ.setdefault("PREFECT_HOME", _PREFECT_HOME)
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
apply_environment_defaults(allow_downloads=False)  # the suite never reaches the internet


def pytest_unconfigure(config) -> None:
    """Prefect stops its temporary server at interpreter exit and logs that to a console pytest has
    already closed; do not print a 'Logging error' trace for it."""
    import logging

    logging.raiseExceptions = False


#: The test files that take longest (`pytest --durations`, each a minute or more on 2 cores), started first: with
#: `--dist loadfile` a long file that starts last leaves the other worker idle while it runs.
LONGEST_FIRST: tuple[str, ...] = (
    "test_flow_conventions.py", "test_flow.py", "test_dp_audit.py", "test_release.py", "test_run_lock.py",
    "test_generate_robustness.py", "test_cluster.py", "test_deployments.py", "test_protect.py", "test_pii_flow.py",
    "test_generate_llm.py", "test_protect_run.py", "test_faults.py", "test_executor.py", "test_report_e2e.py")


def pytest_collection_modifyitems(session, config, items) -> None:
    """Longest files first, the rest in their usual order (a stable sort: tests keep their order in a file)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
