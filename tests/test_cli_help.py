"""Every ``synthugc`` command's help, walked (issue 59, item 3: one name per concept across the CLI).

For each command and sub-command of ``flows.cli:app``: its ``--help`` renders and fits one screen (at most
:data:`SCREEN_LINES` lines at :data:`SCREEN_COLUMNS` columns); no visible option uses a retired name (``--require``,
``--setting``, ``--force``), and a hidden one under such a name fails with exit 2 and one line naming the new
name; an option whose help lists fixed alternatives (``a | b``, ``a, b or c``) is declared as a choice, so that
help and errors list them; a boolean option is a flag (no ``--no-`` twin, no ``<bool>`` value in the help). And:
``synthugc --version``; the same concept has the same option across commands; ``reidentify --attack`` defaults to
every attack, as a run does; a value that is not one of an option's choices is one error line naming them.

No command runs here beyond its argument parsing (CliRunner, in-process): the walk takes a few seconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.metadata import version

import pytest
import typer
from typer.testing import CliRunner

from flows.cli import app
from flows.cli.common import option_choices

SCREEN_LINES = 60
SCREEN_COLUMNS = 100
#: Option names the CLI no longer uses for anything visible: each meant two things (issue 59).
RETIRED = ("--require", "--setting", "--force")

_ALT = r"[a-z][a-z0-9_-]*"
#: Help text that lists fixed alternatives: ``a | b``; a list the help starts with (``a, b or c``, also after a
#: short label such as ``Adversary: ``); or a parenthesised one (``(a or b)``); each alternative one plain word.
_LISTS_ALTERNATIVES = (
    re.compile(rf"(?<![\w\[]){_ALT} ?\| ?{_ALT}(?![\w\]])"),
    re.compile(rf"^(?:[A-Z][a-z ]*: )?{_ALT}(?:, {_ALT})*,? (?:or|and/or) {_ALT}(?=$|[.,;:]| \()"),
    re.compile(rf"\({_ALT}(?:, {_ALT})*,? (?:or|and/or) {_ALT}\)"),
    re.compile(rf"\bone of {_ALT}(?:, {_ALT})+"),
)

runner = CliRunner()


def _walk(command: typer.main.TyperGroup | typer.main.TyperCommand, path: tuple[str, ...] = ()
          ) -> Iterator[tuple[tuple[str, ...], object]]:
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _walk(sub, (*path, name))


COMMANDS = dict(_walk(typer.main.get_command(app)))
LEAVES = {path: cmd for path, cmd in COMMANDS.items() if not hasattr(cmd, "commands")}


def _name(path: tuple[str, ...]) -> str:
    return " ".join(path) or "synthugc"


def _options(command: object) -> list:
    return [p for p in command.params if getattr(p, "param_type_name", "") == "option"]


def _help(path: tuple[str, ...]) -> str:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(SCREEN_COLUMNS), "TERM": "dumb"},
                           terminal_width=SCREEN_COLUMNS)
    assert result.exit_code == 0, result.output
    return result.output


def lists_alternatives(text: str) -> bool:
    """Whether a help text lists fixed alternatives (see :data:`_LISTS_ALTERNATIVES`)."""
    return any(pattern.search(text) for pattern in _LISTS_ALTERNATIVES)


def test_the_alternatives_check_finds_what_the_old_help_listed_and_not_free_values():
    """The check is not vacuous: the help texts issue 59 named (before the choices) are found; free values are
    not."""
    for old in ("timeline | post: what the output exposes", "drop | keep | error (default drop).",
                "bound | point (default bound).", "bound or point (default: the input's).",
                "full, disjoint or both (default disjoint).", "post, dialogue or timeline.", "linear or encoder.",
                "Same surrogate for the same value within: document | group | author.",
                "csv, jsonl or parquet (default: from extension).", "substitution and/or augmentation.",
                "Adversary: full, disjoint or both."):
        assert lists_alternatives(old), old
    for free in ("Round 0's move: pseudonymize or a strategy (default pseudonymize).",
                 "Comma-separated judge attacks, or all (default: every attack that can run on the histories here).",
                 "Strategy parameter: key=value (YAML value), e.g. epsilon=8 or method=dp-bart.",
                 "A registered attack (`synthugc attacks` lists them) or all, as a run does.",
                 "use_case[,dp][,longitudinal] (docs/report.md).", "Output folder."):
        assert not lists_alternatives(free), free


@pytest.mark.parametrize("path", list(COMMANDS), ids=_name)
def test_help_renders_and_fits_one_screen(path):
    page = _help(path)
    lines = page.rstrip("\n").splitlines()
    assert len(lines) <= SCREEN_LINES, f"synthugc {_name(path)} --help: {len(lines)} lines (at most {SCREEN_LINES})"
    assert max(len(line) for line in lines) <= SCREEN_COLUMNS
    assert "<bool>" not in page, f"{_name(path)}: a flag shown as if it took a value"


@pytest.mark.parametrize("path", list(COMMANDS), ids=_name)
def test_options_follow_the_naming_rules(path):
    command = COMMANDS[path]
    for option in _options(command):
        names = [*option.opts, *option.secondary_opts]
        where = f"synthugc {_name(path)} {'/'.join(names)}"
        if option.hidden:
            continue  # a retired name, refused: test_retired_names_fail_naming_the_new_one
        assert not set(names) & set(RETIRED), f"{where}: a retired name (issue 59)"
        if option.help and lists_alternatives(option.help):
            assert option_choices(option), f"{where}: its help lists fixed values; declare them as a choice"
        descriptor = getattr(option, "type_descriptor", None)
        if option.is_flag or (descriptor is not None and descriptor.annotation is bool):
            assert option.is_flag and not option.secondary_opts, f"{where}: a boolean option must be a plain flag"


@pytest.mark.parametrize("path", list(LEAVES), ids=_name)
def test_retired_names_fail_naming_the_new_one(path):
    command = LEAVES[path]
    visible = {name for option in _options(command) if not option.hidden for name in option.opts}
    for option in (o for o in _options(command) if o.hidden):
        [old] = option.opts
        result = runner.invoke(app, [*path, old] if option.is_flag else [*path, old, "x"])
        assert result.exit_code == 2, result.output
        line = result.stderr.strip()
        match = re.fullmatch(rf"synthugc: error: {re.escape(old)} is now (--[a-z-]+)", line)
        assert match and match.group(1) in visible, f"synthugc {_name(path)} {old}: {line!r}"


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"synthugc {version('synthugc')}\n"


def _option(path: tuple[str, ...], name: str):
    [option] = [o for o in _options(COMMANDS[path]) if name in o.opts]
    return option


def test_one_name_per_concept_across_commands():
    """The budget is --budget, what the adversary holds is --adversary (the same choices), replacing an earlier
    output is --overwrite, and utility's seeds are a list like the config's utility.seeds."""
    for path in (("protect",), ("report",), ("release",)):
        assert _option(path, "--budget").help
    assert option_choices(_option(("protect",), "--adversary")) == option_choices(_option(("reidentify",), "--adversary"))
    assert option_choices(_option(("reidentify",), "--adversary")) == ["full", "disjoint", "both"]
    for path in (("release",), ("annotate", "export")):
        assert _option(path, "--overwrite").is_flag
    assert _option(("release",), "--ignore-budget").is_flag and _option(("release",), "--keep-verbatim").is_flag
    assert option_choices(_option(("utility",), "--scheme")) == ["substitution", "augmentation"]
    assert _option(("utility",), "--seeds").default == "0,1,2,3,4"


def test_choices_come_from_the_code_that_checks_them():
    from tasks.budgets import DECIDE_ON
    from tasks.corpus.importers import FORMATS
    from tasks.generate.pseudonymize import SCOPE_COLUMNS
    from tasks.protect.settings import ON_FAIL, UNITS

    assert option_choices(_option(("protect",), "--unit")) == list(UNITS) == option_choices(_option(("release",), "--unit"))
    assert option_choices(_option(("protect",), "--on-fail")) == list(ON_FAIL)
    for path in (("protect",), ("report",), ("release",)):
        assert option_choices(_option(path, "--decide-on")) == list(DECIDE_ON)
    assert option_choices(_option(("pseudonymize",), "--scope")) == list(SCOPE_COLUMNS)
    assert option_choices(_option(("import",), "--format")) == sorted(set(FORMATS.values()))


def test_defaults_match_what_a_run_does():
    from tasks.protect.settings import EVERY_ATTACK

    assert _option(("reidentify",), "--attack").default == EVERY_ATTACK == "all"


@pytest.mark.parametrize(("args", "line"), [
    (["protect", "--corpus", "c.parquet", "--out", "p.parquet", "--unit", "author"],
     "synthugc: error: --unit 'author': must be one of timeline, post"),
    (["reidentify", "--histories", "h", "--synthetic", "s", "--out", "o", "--adversary", "partial"],
     "synthugc: error: --adversary 'partial': must be one of full, disjoint, both"),
    (["utility", "--corpus", "c", "--synthetic", "s", "--out", "o", "--scheme", "swap"],
     "synthugc: error: --scheme 'swap': must be one of substitution, augmentation"),
    (["utility", "--corpus", "c", "--synthetic", "s", "--out", "o", "--seeds", "5,x"],
     "synthugc: error: --seeds '5,x': 'x' is not a seed (a whole number from 0 to 4294967295); e.g. --seeds 0,1,2"),
    (["utility", "--corpus", "c", "--synthetic", "s", "--out", "o", "--setting", "substitution"],
     "synthugc: error: --setting is now --scheme"),
    (["annotate", "export", "run", "--force"], "synthugc: error: --force is now --overwrite"),
])
def test_a_bad_choice_or_a_retired_name_is_one_error_line(args, line):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.stderr.strip() == line, result.output
