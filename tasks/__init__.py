"""synthugc's plain functions: corpora, strategies, metrics, attacks, protect and reports, without Prefect.

Importing the package sets one process default, before pyarrow loads: Arrow's allocator (mimalloc) hands freed
pages back at once (``MIMALLOC_PURGE_DELAY=0``; it keeps them 1 s by default). At the article's scale that held
0.6 GB of protect's peak (round 0 and certificate 3.99 -> 3.39 GB, round 0 439.5 -> 441.1 s:
benchmarks/protect.py --full). mimalloc reads it once, when pyarrow loads, so it is set here, which every entry point
imports first (``flows`` imports it before anything else); a value the user set is kept, and a process that
loaded pyarrow before importing ``tasks`` (a notebook that imported pandas first) keeps mimalloc's default.
"""

import os as _os

_os.environ.setdefault("MIMALLOC_PURGE_DELAY", "0")
