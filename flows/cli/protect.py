"""``synthugc protect`` and ``synthugc release``: rewrite a corpus until it meets a privacy budget (its output
files written here), and hand a certified output out as a release folder with its dataset card.

Each command imports what it runs inside its own function, on purpose (the CLI starts fast; see
flows/cli/__init__.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flows.cli.common import (
    BOTH,
    Adversary,
    DecideOn,
    VerboseOption,
    _environment,
    _fail,
    _quiet_libraries,
    _say,
    _writing,
    adversary_settings,
    choice,
    renamed,
)
from tasks.budgets import PROTECT_EXAMPLE
from tasks.errors import InputError, SynthUGCError, shown
from tasks.protect.files import protect_paths
from tasks.protect.settings import ON_FAIL, PREFER, UNITS, ProtectSettings

if TYPE_CHECKING:
    import pandas as pd

    from tasks.protect.loop import ProtectResult


def write_protect_output(result: ProtectResult, out: Path) -> None:
    """The protected table, its rounds, failures and summary beside it, the pseudonym mapping under private/:
    each written atomically, the table last (its presence says the others are complete)."""
    from tasks.corpus.importers import write_parquet_atomic
    from tasks.paths import write_bytes_atomic

    paths = protect_paths(out)
    write_parquet_atomic(result.rounds, paths.rounds)
    write_parquet_atomic(result.failures, paths.failures)
    write_parquet_atomic(result.frontier, paths.frontier)
    if len(result.frontier) and result.frontier["floor"].nunique() > 1:
        _write_frontier_plot(result.frontier, result.summary["budget"], paths.frontier_plot)
    if len(result.mapping):
        write_parquet_atomic(result.mapping, paths.mapping)
    write_bytes_atomic(json.dumps(result.summary, indent=2, sort_keys=True).encode(), paths.summary)
    write_parquet_atomic(result.table, paths.table)


#: The PNG text key under which the frontier chart keeps what it was drawn from.
DRAWN_FROM = "synthugc-drawn-from"


def _write_frontier_plot(frontier: pd.DataFrame, budget: str, path: Path) -> None:
    """The frontier chart at ``path``, drawn only where the chart there was not drawn from the same points, budget
    line and plotting code (a rerun of a cached protect keeps it: drawing starts matplotlib, about a second)."""
    from tasks.budgets import parse_budget
    from tasks.paths import write_bytes_atomic
    from tasks.report.build import curve_budget
    from tasks.report.png_text import png_text, png_with_text
    from tasks.store import code_version, fingerprint_config

    _, limit = curve_budget(parse_budget(budget, "budget", protect=True))
    key = fingerprint_config({"frontier": frontier.to_json(orient="split", double_precision=15, default_handler=str),
                              "limit": limit,
                              "code": code_version("tasks/report/plots.py", "tasks/report/plots_protect.py")})
    if png_text(path).get(DRAWN_FROM) == key:
        return
    from tasks.report.plots_protect import protect_frontier_chart

    plot = protect_frontier_chart(frontier, limit)
    if plot.png is not None:
        write_bytes_atomic(png_with_text(plot.png, DRAWN_FROM, key), path)


_PROTECT = ProtectSettings()  # the defaults the help states (the loop and the config read the same)
Unit = choice(UNITS)
OnFail = choice(ON_FAIL)
Prefer = choice(PREFER)


def _adversary_default() -> str:
    """protect's default --adversary as the option names it."""
    return BOTH if len(_PROTECT.adversaries) > 1 else _PROTECT.adversaries[0]


def _floors(text: str) -> tuple[float, ...]:
    """``--meaning-floor 0.9,0.8``: the floors, or exit 2 naming the item that is not a number."""
    floors = []
    for item in (t.strip() for t in text.split(",")):
        try:
            floors.append(float(item))
        except ValueError:
            _fail(f"--meaning-floor {shown(text)}: {shown(item)} is not a number (e.g. 0.8 or 0.9,0.8,0.7)")
    return tuple(floors)


def _fluency_floor(text: str) -> float | str:
    """``--fluency-floor``: a number (nats per word, at most 0) or ``off``."""
    if text.strip().lower() == "off":
        return "off"
    try:
        return float(text)
    except ValueError:
        _fail(f"--fluency-floor {shown(text)}: expected a number such as -1.0, or off")
        raise


def protect(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) to protect.")],
    out: Annotated[Path, typer.Option("--out", help="Protected parquet P (rounds, failures and summary go beside it).")],
    histories: Annotated[Path | None, typer.Option("--histories", help="The adversary's posting histories (default: "
                                                   "the corpus itself).")] = None,
    budget: Annotated[str | None, typer.Option("--budget", help=f"e.g. {PROTECT_EXAMPLE} (default: the config's, "
                                               f"else {_PROTECT.budget}; verbatim<=0.05 unless named).")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="Run config: its protect: section and attack "
                                                "parameters.")] = None,
    start: Annotated[str | None, typer.Option("--start", help=f"Round 0's move: pseudonymize or a strategy (default "
                                              f"{_PROTECT.start}).")] = None,
    max_rounds: Annotated[int | None, typer.Option("--max-rounds", help=f"Rounds after round 0 (default "
                                                   f"{_PROTECT.max_rounds}).")] = None,
    meaning_floor: Annotated[str | None, typer.Option("--meaning-floor", help="BERTScore F1 a kept move keeps; "
                                                      "several (e.g. 0.9,0.8,0.7) make a frontier (default "
                                                      f"{','.join(f'{f:g}' for f in _PROTECT.floors)}).")] = None,
    fluency_floor: Annotated[str | None, typer.Option("--fluency-floor", help="Least fluency a kept move keeps "
                                                      f"(nats/word), or off (default {_PROTECT.fluency_floor:g}).")]
    = None,
    prefer: Annotated[Prefer | None, typer.Option("--prefer", help="The floor to choose (default "
                                                  f"{_PROTECT.prefer}).")] = None,
    unit: Annotated[Unit | None, typer.Option("--unit", help="An author's documents together, or each post alone "
                                              f"(default {_PROTECT.unit}).")] = None,
    on_fail: Annotated[OnFail | None, typer.Option("--on-fail", help="Documents that cannot meet the budget and the "
                                                   f"floor (default {_PROTECT.on_fail}).")] = None,
    ladder: Annotated[str | None, typer.Option("--ladder", help="Comma-separated moves, e.g. mask-evidence,stymask "
                                               "(default: the ladder in docs/protect.md).")] = None,
    judge: Annotated[str | None, typer.Option("--judge", help="Comma-separated judge attacks, or all (default: every "
                                              "attack that can run on the histories here).")] = None,
    feedback: Annotated[str | None, typer.Option("--feedback", help="Comma-separated feedback attacks (default "
                                                 f"{','.join(n for n, _ in _PROTECT.feedback)}, where they can run)."
                                                 )] = None,
    adversary: Annotated[Adversary | None, typer.Option("--adversary", help="Held by the adversary: the originals too "
                                                        f"(full) or other posts only (default {_adversary_default()})."
                                                        )] = None,
    timeline_posts: Annotated[int | None, typer.Option("--timeline-posts", help="Attack runs of at most N posts.")] = None,
    docs_per_round: Annotated[int | None, typer.Option("--docs-per-round", min=1, help="Move only the N documents "
                                                       "with the most evidence per caught timeline.")] = None,
    verbatim_chars: Annotated[int | None, typer.Option("--verbatim-chars", min=1, help="A run of this many source "
                                                       "characters makes a document verbatim (default "
                                                       f"{_PROTECT.verbatim_chars}).")] = None,
    decide_on: Annotated[DecideOn | None, typer.Option("--decide-on", help="The budget decided on the 95% interval's "
                                                       f"bound or the point estimate (default {_PROTECT.decide_on}).")]
    = None,
    seed: Annotated[int | None, typer.Option("--seed")] = None,
    verbose: VerboseOption = False,
) -> None:
    """Rewrite a corpus until attacks fail at the budget, keeping meaning.

    The output is certified with every attack. Exit 0: budget met, 1: missed (P still
    written), 2: bad input. See docs/protect.md."""
    _environment()
    from flows.config import load_config
    from flows.config_options import protect_settings
    from tasks.budgets import parse_budget
    from tasks.corpus.importers import read_corpus
    from tasks.paths import check_output_file
    from tasks.privacy.attacks import attack_class
    from tasks.protect.loop import protect_corpus
    from tasks.settings import get_settings
    from tasks.store import fingerprint_file

    def names(text: str | None, flag: str) -> list[str] | None:
        if text is None:
            return None
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            _fail(f"{flag} {shown(text)} names nothing")
        return items

    if not verbose:
        _quiet_libraries()
    try:
        if budget is not None:
            parse_budget(budget, "--budget", protect=True)
        cfg = load_config(config, []) if config is not None else None
        attacks = {"judge": names(judge, "--judge"), "feedback": names(feedback, "--feedback")}
        for role, chosen in attacks.items():
            for name in chosen or []:
                if not (role == "judge" and name == "all"):
                    attack_class(name, root=f"--{role}")
        settings = protect_settings(
            cfg, budget=budget, start=start, max_rounds=max_rounds, on_fail=on_fail, unit=unit,
            meaning_floors=None if meaning_floor is None else _floors(meaning_floor),
            fluency_floor=None if fluency_floor is None else _fluency_floor(fluency_floor), prefer=prefer,
            ladder=names(ladder, "--ladder"), decide_on=decide_on, seed=seed, timeline_posts=timeline_posts,
            docs_per_round=docs_per_round, verbatim_chars=verbatim_chars,
            adversaries=None if adversary is None else adversary_settings(adversary),
            **attacks)
        paths = protect_paths(check_output_file(out))
        for path in (paths.rounds, paths.failures, paths.summary, paths.frontier, paths.frontier_plot):
            check_output_file(path)
        validated = read_corpus(corpus)
        history_file = histories or corpus
        if not history_file.exists():
            _fail(f"--histories {history_file}: file not found")
        result = protect_corpus(validated.corpus, str(history_file), settings,
                                cache_dir=Path(get_settings().cache_dir) / "protect",
                                corpus_fingerprint=fingerprint_file(str(corpus)),
                                histories_fingerprint=fingerprint_file(str(history_file)), log=_say,
                                invalid=validated.failures)
    except SynthUGCError as exc:
        _fail(str(exc))
    if settings.on_fail == "error" and result.summary["documents"]["failed"]:
        from tasks.corpus.importers import write_parquet_atomic

        with _writing(paths.failures):
            write_parquet_atomic(result.failures, paths.failures)
        _fail(f"{result.summary['documents']['failed']} documents cannot meet the budget and the floor (--on-fail error); "
              f"see {paths.failures}")
    with _writing(out):
        write_protect_output(result, out)
    typer.echo(result.summary["verdict"])
    typer.echo(f"protected: {out} (rounds: {paths.rounds}; failures: {paths.failures}; summary: {paths.summary})")
    if not result.met:
        raise typer.Exit(code=1)


_CARD_CODE = r"[a-z0-9][a-z0-9.+-]{0,63}"  # a license id, language code or task category of the card's header


def release(
    source: Annotated[Path, typer.Argument(help="A finished run (<storage_root>/<experiment>) or a protect output "
                                           "P.parquet.")],
    out: Annotated[Path, typer.Option("--out", help="The release folder to write (new or empty; written "
                                      "atomically).")],
    strategy: Annotated[str | None, typer.Option("--strategy", help="The strategy label to release (a run's; a "
                                                 "protect output's is 'protect').")] = None,
    variant: Annotated[str | None, typer.Option("--variant", help="The variant, where the strategy has several.")]
    = None,
    keep: Annotated[str | None, typer.Option("--keep", help="Further columns to release, comma-separated (e.g. "
                                             "label,author_id); doc_id and text always go, ids as pseudonyms.")]
    = None,
    keep_verbatim: Annotated[bool, typer.Option("--keep-verbatim", help="Also release the rows that hold a run of "
                                                "their source (the users' own words: unchanged rows, pseudonymised "
                                                "copies).")] = False,
    ignore_budget: Annotated[bool, typer.Option("--ignore-budget", help="Release a strategy that misses the budget; "
                                                "the card says so.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier release in --out.")] = False,
    budget: Annotated[str | None, typer.Option("--budget", help="A budget instead of the input's, e.g. "
                                               "'reidentification<=0.10'.")] = None,
    decide_on: Annotated[DecideOn | None, typer.Option("--decide-on", help="The budget decided on the 95% interval's "
                                                       "bound or the point estimate (default: the input's).")] = None,
    license_: Annotated[str, typer.Option("--license", help="The card's license id (e.g. cc-by-4.0).")] = "other",
    language: Annotated[str, typer.Option("--language", help="ISO 639 codes, comma-separated.")] = "en",
    task_category: Annotated[str | None, typer.Option("--task-category", help="The card's task category (default: "
                                                      "text-classification with label kept, else "
                                                      "text-generation).")] = None,
    pretty_name: Annotated[str | None, typer.Option("--pretty-name", help="The card's title.")] = None,
    dp_audit: Annotated[Path | None, typer.Option("--dp-audit", help="A DP strategy's `synthugc audit-dp` table: "
                                                  "the card states the audited epsilon beside the nominal one.")]
    = None,
    unit: Annotated[Unit | None, typer.Option("--unit", help="An author's posts together, or each post alone "
                                              "(rows unlinked and shuffled; see docs/release.md). Default: the unit "
                                              "the input was certified at.")] = None,
    _force: Annotated[bool, renamed("--force", "--ignore-budget")] = False,
    _require: Annotated[str | None, renamed("--require", "--budget")] = None,
) -> None:
    """Write a folder to hand out: synthetic texts, a dataset card and checksums.

    The synthetic texts and the kept columns (ids pseudonymised), a Hugging Face dataset
    card and checksums; never the source texts, the pseudonym mapping, failures or
    histories. See docs/release.md."""
    import re

    from tasks.budgets import number
    from tasks.protect import release as rel
    from tasks.report.render import with_interval

    codes = [c.strip() for c in language.split(",") if c.strip()] or [language]
    examples = {"--license": "cc-by-4.0", "--language": "en", "--task-category": "text-generation"}
    for flag, values in (("--license", [license_]), ("--language", codes),
                         ("--task-category", [task_category] if task_category is not None else [])):
        for value in values:
            if not re.fullmatch(_CARD_CODE, value):
                _fail(f"{flag} {shown(value)}: expected a Hugging Face id such as {examples[flag]}")
    try:
        out = rel.check_release_folder(out, overwrite)
        made = rel.read_input(source, strategy, variant)
        kept = [c.strip() for c in (keep or "").split(",") if c.strip()]
        released_unit = rel.release_unit(made, unit, kept)
        decided_on = decide_on or made.decide_on
        whose = "--budget" if budget is not None else f"the {made.kind}'s budget"
        verdict = rel.verdict_of(made, budget if budget is not None else made.budget, decided_on,
                                 where=whose if budget is not None else f"{whose} ({made.path})")
        if not verdict.met and not ignore_budget:
            raise InputError(f"strategy {made.label!r} misses {whose}: {'; '.join(verdict.failing)}; --ignore-budget "
                             "releases it anyway and the card says so")
        rows = rel.with_linkability(made, rel.release_table(
            made.table, kept, keep_verbatim=keep_verbatim, verbatim=made.verbatim, verbatim_chars=made.verbatim_chars,
            unit=released_unit))
        options = rel.CardOptions(pretty_name=pretty_name or f"{made.label}: synthetic user-generated text",
                                  license=license_, language=tuple(codes), task_category=task_category)
        audited = rel.dp_audit_line(dp_audit, made) if dp_audit is not None else None
        card = rel.render_card(made, rows, verdict, options, forced=not verdict.met, decide_on=decided_on,
                               dp_audit=audited)
    except SynthUGCError as exc:
        _fail(str(exc))
    with _writing(out):
        rel.write_release(out, rows.table, card)
    said = verdict.summary() + (", released with --ignore-budget" if not verdict.met else "")
    if rows.unit == "post":
        link = rows.linkability or {}
        said += ("; unit post: rows unlinked, same-author pair AUC "
                 + with_interval(number(link.get("value")), number(link.get("ci_low")), number(link.get("ci_high"))))
    typer.echo(f"release: {len(rows.table)} documents -> {out} ({said})")
