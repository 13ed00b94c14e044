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
# `all` attacks leave the embedding attack out on CPU (it encodes every history post: a minute per few thousand
# posts here): the tests that run it ask for it by name, or set their own limit
os.environ.setdefault("SYNTHUGC_CPU_ATTACK_POSTS", "0")
# `make test` runs two workers on two cores: one torch/OpenMP thread each (and in the commands they start). Two
# threads a process spin against the other worker's and ran the SmolLM2 tests 10-25x slower than alone.
os.environ.setdefault("OMP_NUM_THREADS", "1")


#: The longest test files (their tests' seconds summed, `--durations=0` on 2 cores, 2026-11-26: 169, 155, 117, 105,
#: 83, 79, 66, 64, 61, 60 s), started first: the two workers take whole files in collection order, and one of these
#: started last kept the other worker idle for a minute at the end.
LONGEST_FIRST: tuple[str, ...] = ("test_protect.py", "test_flow.py", "test_release.py", "test_cluster.py",
                                  "test_hostile_inputs.py", "test_run_lock.py", "test_report_e2e.py",
                                  "test_executor.py", "test_deployments.py", "test_protect_run.py")


def pytest_collection_modifyitems(config, items) -> None:
    """The longest test files first (the others keep their order): see :data:`LONGEST_FIRST`."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_unconfigure(config) -> None:
    """Prefect stops its temporary server at interpreter exit and logs that to a console pytest has
    already closed; do not print a 'Logging error' trace for it."""
    import logging

    logging.raiseExceptions = False

