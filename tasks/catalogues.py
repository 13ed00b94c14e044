"""The three registries (strategies, attacks, metrics) listed alike: what ``synthugc strategies``,
``synthugc attacks`` and ``synthugc metrics`` print (a header line, then one line each; ``--json`` for
scripts), and the tables README shows between ``<!-- registry:NAME -->`` markers, generated from the same rows
so README cannot drift from the code (a test compares them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from tasks.generate import available_strategies
from tasks.generate.base import strategy_class
from tasks.registry import summary_line

REGISTRIES = ("strategies", "attacks", "metrics")


def _model_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """A pydantic params model's fields with their defaults (nested models as their own defaults)."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.default is not PydanticUndefined:
            value = field.default
        elif field.default_factory is not None:
            value = field.default_factory()  # type: ignore[call-arg]
        else:
            value = "(required)"
        out[name] = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return out


def strategy_rows() -> list[dict[str, Any]]:
    """Every registered strategy: name, parameters with defaults, whether it runs an LLM (on a GPU or a served
    model; ``optional``: only with some parameters), description."""
    rows = []
    for name in available_strategies():
        cls = strategy_class(name)
        llm = "no" if cls.llm_settings_field is None else \
            "yes" if cls.uses_llm(cls.params_model.model_construct()) else "optional"
        rows.append({"name": name, "params": _model_defaults(cls.params_model), "llm": llm,
                     "description": summary_line(cls)})
    return rows


def attack_rows() -> list[dict[str, Any]]:
    """Every registered attack: name, parameters with defaults, GPU or not, evidence or not, description."""
    # deferred: loads fsspec, llvmlite, numba, pyarrow, scipy, yaml only when this runs
    from tasks.privacy.attacks import catalogue_rows

    return catalogue_rows()


def metric_rows() -> list[dict[str, Any]]:
    """Every registered metric: name, level, aspect, which way is better, options, description."""
    # deferred: loads fsspec, pyarrow, scipy, sqlite3 only when this runs
    from tasks.metrics.catalogue import CATALOGUE

    return [{"name": f"<class>{m.name}" if m.suffix else m.name, "level": m.level, "aspect": m.aspect,
             "better": m.better, "options": list(m.options), "description": m.description}
            for m in CATALOGUE.values()]


ROWS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "strategies": strategy_rows, "attacks": attack_rows, "metrics": metric_rows}
#: The columns of each listing, in order: (row key, header).
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "strategies": (("name", "strategy"), ("llm", "LLM (GPU)"), ("params", "parameters (defaults)"),
                   ("description", "description")),
    "attacks": (("name", "attack"), ("needs_gpu", "GPU"), ("returns_evidence", "evidence"),
                ("params", "parameters (defaults)"), ("description", "description")),
    "metrics": (("name", "metric"), ("level", "level"), ("aspect", "aspect"), ("better", "better"),
                ("description", "description")),
}


_LONGEST = 40  # characters of a default shown in a table (--json gives it whole)


def _default(value: Any) -> str:
    text = value if isinstance(value, str) and "\n" not in value else json.dumps(value)
    return text if len(text) <= _LONGEST else text[:_LONGEST - 1] + "…"


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_default(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return str(value)


def listing_lines(registry: str) -> list[str]:
    """A header line, then one aligned line per entry (the description last, unpadded)."""
    columns = COLUMNS[registry]
    table = [[header for _, header in columns]] + [[_cell(row[key]) for key, _ in columns] for row in ROWS[registry]()]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)), r[-1]]).rstrip() for r in table]


def listing_json(registry: str) -> str:
    return json.dumps(ROWS[registry](), indent=2, default=str)


def markdown_table(registry: str) -> str:
    """The registry as the markdown table README shows."""
    columns = COLUMNS[registry]
    lines = ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    for row in ROWS[registry]():
        cells = [_cell(row[key]).replace("|", "\\|") for key, _ in columns]
        cells[0] = f"`{cells[0]}`"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def readme_block(registry: str) -> str:
    """The marked block README holds for a registry (markers included)."""
    return f"<!-- registry:{registry} -->\n{markdown_table(registry)}\n<!-- /registry:{registry} -->"


def update_readme(text: str) -> str:
    """README text with every registry block regenerated; a block missing from README is an error."""
    for registry in REGISTRIES:
        start, end = f"<!-- registry:{registry} -->", f"<!-- /registry:{registry} -->"
        if start not in text or end not in text:
            raise ValueError(f"README has no {start} ... {end} block")
        head, rest = text.split(start, 1)
        text = head + readme_block(registry) + rest.split(end, 1)[1]
    return text


if __name__ == "__main__":  # python -m tasks.catalogues [--check] docs/reference.md: regenerate (or check) the tables
    import sys
    from pathlib import Path

    args = sys.argv[1:]
    check = "--check" in args
    readme = Path(next((a for a in args if a != "--check"), "docs/reference.md"))
    text = readme.read_text(encoding="utf-8")
    fresh = update_readme(text)
    if check:
        if fresh != text:
            sys.exit(f"{readme}: a registry table is stale; run python -m tasks.catalogues {readme}")
    else:
        readme.write_text(fresh, encoding="utf-8")
