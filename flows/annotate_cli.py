"""``synthugc annotate``, kept importable under its former module name: the commands live in flows/cli/annotate.py
(beside the other commands, whose shared options and command classes they use)."""

from flows.cli.annotate import annotate_app, export, format_agreement, import_

__all__ = ["annotate_app", "export", "format_agreement", "import_"]
