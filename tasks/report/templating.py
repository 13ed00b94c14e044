"""The report's HTML pages from Jinja2 templates in ``tasks/report/templates`` (shipped as package data).

Autoescape is on for every HTML template, so real user text placed in a page is escaped unless the code
marks it safe; the pages' CSS and JavaScript are static files of the same folder, inlined verbatim by
``asset(name)`` (pages must stay self-contained: nothing is fetched when they are opened). A markdown template
(``*.md.j2``, the release's dataset card) is not HTML, so it is not HTML-escaped: what it shows is numbers and
names checked before rendering, and its YAML values go through the ``yaml`` filter (JSON strings).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

TEMPLATE_PACKAGE = "tasks.report"
TEMPLATE_FOLDER = "templates"
#: Templates whose output is markdown, not HTML: rendered without HTML escaping.
MARKDOWN_SUFFIX = ".md.j2"


def asset(name: str) -> Markup:
    """A static file of the templates folder (CSS or JavaScript), to inline as is."""
    return Markup(resources.files(TEMPLATE_PACKAGE).joinpath(TEMPLATE_FOLDER, name).read_text(encoding="utf-8"))


@functools.cache
def environment() -> jinja2.Environment:
    """The templates' environment: autoescape on (but for markdown templates), an undefined name is an error,
    block tags leave no blank lines."""
    env = jinja2.Environment(loader=jinja2.PackageLoader(TEMPLATE_PACKAGE, TEMPLATE_FOLDER),
                             autoescape=lambda name: not (name or "").endswith(MARKDOWN_SUFFIX),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.globals["asset"] = asset
    env.filters["yaml"] = lambda value: json.dumps(value, ensure_ascii=False)  # JSON is YAML: quoted, escaped
    return env


def render(template: str, **context: Any) -> str:
    """A template of ``tasks/report/templates`` rendered with ``context``."""
    return environment().get_template(template).render(**context)
