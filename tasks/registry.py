"""What the three registries (strategies, metrics, attacks) share: an entry lives in one module of its
package, which registers it when imported, and the registry imports every module of the package
(:func:`import_package_modules`), so adding an entry edits no other file. Below every registry and the
catalogues that list them (it imports nothing of the project)."""

from __future__ import annotations

import importlib
import pkgutil


def import_package_modules(package: str) -> None:
    """Import every module and subpackage of ``package`` (each registers what it defines)."""
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        importlib.import_module(f"{package}.{module.name}")


def summary_line(obj: object) -> str:
    """The first line of ``obj``'s docstring: a registered entry's one-line description ("" without one)."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""
