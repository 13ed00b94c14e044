"""Test environment: offline models, an isolated Prefect home (its temporary server and database live in a
tmp folder), and no analytics. Set before Prefect is imported anywhere."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from tasks.settings import apply_environment_defaults  # imports no Prefect: the env is set before it loads

_PREFECT_HOME = tempfile.mkdtemp(prefix="synthugc-prefect-home-")
# registered before Prefect is imported, so it runs after Prefect's own exit handler has stopped the temporary
# server: the folder (its database, ~20 MB a process) does not outlive the run
atexit.register(shutil.rmtree, _PREFECT_HOME, ignore_errors=True)
os.environ.setdefault("PREFECT_HOME", _PREFECT_HOME)
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
apply_environment_defaults(allow_downloads=False)  # the suite never reaches the internet
# `all` attacks leave the embedding attack out on CPU (it encodes every history post: a minute per few thousand
# posts here): the tests that run it ask for it by name, or set their own limit
os.environ.setdefault("SYNTHUGC_CPU_ATTACK_POSTS", "0")
# `make test` runs two workers on two cores: one torch/OpenMP thread each (and in the commands they start). Two
# threads a process spin against the other worker's and ran the SmolLM2 tests 10-25x slower than alone.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# and the single-core fits (the exact classifier's C grid) one after the other: the other core is the other
# worker's, so processes of their own would only add their start-up
os.environ.setdefault("SYNTHUGC_FIT_PROCESSES", "1")


def pytest_unconfigure(config) -> None:
    """Prefect stops its temporary server at interpreter exit and logs that to a console pytest has
    already closed; do not print a 'Logging error' trace for it."""
    import logging

    logging.raiseExceptions = False

