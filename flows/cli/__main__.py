"""``python -m flows.cli``: the ``synthugc`` command line run as a module."""

import sys

from flows.cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
