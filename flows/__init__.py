"""synthugc's Prefect flows and command line."""

import tasks  # noqa: F401 - first: its process defaults (Arrow's allocator) must precede pyarrow's load
