"""``synthugc metrics``, ``strategies`` and ``attacks``: the registries' catalogues, as an aligned table or JSON.

Each command imports what it runs inside its own function, on purpose (the CLI starts fast; see
flows/cli/__init__.py).
"""

from __future__ import annotations

from typing import Annotated

import typer


def _listing(registry: str, as_json: bool) -> None:
    from tasks.catalogues import listing_json, listing_lines

    typer.echo(listing_json(registry) if as_json else "\n".join(listing_lines(registry)))


_JSON = typer.Option("--json", help="One JSON list for scripts instead of the aligned table.")


def metrics_catalogue(as_json: Annotated[bool, _JSON] = False) -> None:
    """Every registered metric: name, level, aspect, which way is better, description."""
    _listing("metrics", as_json)


def strategies_catalogue(as_json: Annotated[bool, _JSON] = False) -> None:
    """Every registered generation strategy: name, whether it runs an LLM, parameters with defaults, description."""
    _listing("strategies", as_json)


def attacks_catalogue(as_json: Annotated[bool, _JSON] = False) -> None:
    """Every registered re-identification attack: name, GPU, evidence, parameters, description."""
    _listing("attacks", as_json)
