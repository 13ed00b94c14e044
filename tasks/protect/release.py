"""``synthugc release``: a folder a user can hand out, made from a run's strategy or a protect output.

The folder holds the synthetic texts and the columns the user keeps (``--keep``), a dataset card
(``README.md``, Hugging Face's dataset-card format: a YAML header, then how the texts were made, what they
keep, what they leak, the budget and the limitations) and ``checksums.sha256`` (``sha256sum -c`` checks it).
It loads with ``datasets.load_dataset("parquet", data_dir=...)`` and with pandas.

What never goes out: the source texts (rows that hold a run of at least ``verbatim_chars`` characters of their
source, ``verbatim``: a pseudonymised copy, a name swapped and the rest the user's own words, or an unchanged row,
are left out unless the user keeps them, and the card counts them), failed rows, the private pseudonym mapping, failure texts,
histories, and any identifier in clear: doc, author and group ids become keyed-hash pseudonyms whose key is
drawn fresh for each release and never written, so no one (the releaser included) can map them back, and two
releases cannot be joined on them. Within a release the same id has the same pseudonym on every row.

The unit a release exposes (``--unit``): ``timeline`` (the default for a run's strategy and for a protect output
certified on timelines) keeps the rows in their order and the pseudonyms the user keeps, so an attacker reads an
author's posts together, the stronger attack; ``post`` unlinks them: no author, group or position column, whatever
``--keep`` says, and the rows in a fresh random order, so each post stands alone. Style still links the posts of
one author, so a post release states the same-author pair AUC (:mod:`tasks.privacy.linkability`): the protect
certificate's, or measured on the released rows (their authors are known before they are dropped). A timeline
certificate is conservative for a post release; a post certificate says nothing of timelines, so releasing its
output at timeline unit is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import secrets
import shutil
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.budgets import DECIDE_ON, decide, number, parse_budget, worst_figure
from tasks.corpus.importers import check_parquet_file, read_synthetic
from tasks.corpus.schema import STATUS_OK
from tasks.errors import InputError, shown
from tasks.layout import PROTECT_LABEL
from tasks.metrics import catalogue
from tasks.metrics.base import VERBATIM_MIN_CHARS
from tasks.metrics.verbatim import verbatim_flags
from tasks.paths import check_output_folder
from tasks.privacy.dp_audit import DP_BART_COLUMNS, DP_PROMPT_COLUMNS, audit_summary
from tasks.privacy.linkability import same_author_auc
from tasks.protect.files import PROTECT_SUMMARY_KEYS, VERBATIM_COLUMN, protect_paths
from tasks.report.budgets import budget_table, worst_row
from tasks.report.build import score_summary, utility_runs
from tasks.report.card import (
    DATA_FILE,
    EXAMPLE_ROWS,
    LEAK_METRICS,
    PSEUDONYMISED,
    failed_rows,
    protect_withheld,
    source_info,
    summary_fluency,
    summary_notes,
    summary_source,
)
from tasks.report.card import CardOptions as CardOptions  # the CLI makes the card through this module
from tasks.report.card import render_card as render_card
from tasks.report.card import size_category as size_category
from tasks.report.rebuild import run_layout
from tasks.report.render import with_interval
from tasks.report.run_files import RunFiles
from tasks.report.tables import strategy_label
from tasks.scores import BASELINE_ROWS, variant_epsilons
from tasks.store import ArtifactStore, fingerprint_file

#: The release folder's files besides its data file (``DATA_FILE``, the card module's): the card, the checksums.
CARD_FILE = "README.md"
CHECKSUMS_FILE = "checksums.sha256"

#: Always released: every row's id (as a pseudonym) and its synthetic text.
ALWAYS_KEPT: tuple[str, ...] = ("doc_id", "text")
#: The units a release exposes: an author's posts together (``timeline``) or each post alone (``post``).
UNITS: tuple[str, ...] = ("timeline", "post")
#: Never released at post unit, whatever ``--keep`` says: the columns that link or order an author's posts.
LINKING: tuple[str, ...] = ("author_id", "group_id", "position")
#: Never released, whatever ``--keep`` says: how a row was made (its status, a failure's reason, whether its
#: text is its source's).
WITHHELD: tuple[str, ...] = ("status", "reason", "unchanged", VERBATIM_COLUMN)
#: The keys of a figure, as the protect summary writes them.
FIGURE_KEYS: tuple[str, ...] = ("value", "ci_low", "ci_high", "n", "attack", "adversary")
#: A document holding a run of this many characters of its source is verbatim, where its input does not say (a
#: protect output states its own ``verbatim_chars``; a run its ``metrics.verbatim.min_chars``).
VERBATIM_CHARS = VERBATIM_MIN_CHARS

def _figure(values: Mapping[str, Any]) -> dict[str, Any]:
    """A figure with every key of :data:`FIGURE_KEYS` (missing ones null)."""
    return {key: values.get(key) for key in FIGURE_KEYS}


@dataclass
class ReleaseInput:
    """What a release is made of, read from a run's strategy or from a protect output."""

    kind: str  # "run" or "protect output"
    path: Path
    label: str  # the strategy label (a variant in parentheses)
    table: pd.DataFrame  # the strategy's synthetic rows, every status
    leaks: dict[str, dict[str, Any]]  # figure name -> FIGURE_KEYS (the worst case)
    keeps: list[dict[str, Any]]  # meaning, style and utility figures: name, aspect and FIGURE_KEYS
    budget: str | None
    decide_on: str
    signature: str
    tool_version: str
    epsilon: float | None = None  # the nominal per-document DP epsilon, for a DP strategy
    facts: dict[str, str] = field(default_factory=dict)  # further lines of "how it was made"
    #: Re-identification attack by attack (attack, adversary, accuracy_at_1 and residual_risk with their intervals,
    #: n_timelines, reason): a protect output's certificate, or a run's attacks on the strategy.
    attacks: list[dict[str, Any]] = field(default_factory=list)
    #: Per row of ``table``, whether its text holds a run of its source (None: not known, nothing left out for it).
    verbatim: pd.Series | None = None
    verbatim_chars: int = 30
    unit: str = "timeline"  # the unit its figures were measured at (a protect certificate's; a run's: timeline)
    #: The same-author pair AUC (:func:`tasks.privacy.linkability.same_author_auc`), where a post certificate has one.
    linkability: dict[str, Any] | None = None
    histories: str | None = None  # the adversary's histories the input names (fits the linkability model)
    #: Documents held back before the release, outside ``table`` or failed in it: (plain reason, count), most first.
    withheld: list[tuple[str, int]] = field(default_factory=list)
    #: Documents the input had: ``table``'s rows and the held-back ones that are not in it (None: ``table``'s rows).
    n_input: int | None = None
    #: The output's fluency relative to its source (value, ci_low, ci_high, floor), where the input states it.
    fluency: dict[str, Any] | None = None
    meaning_floor: float | None = None  # the floor a kept document's meaning had to reach (a protect output's)
    #: The source corpus, where the input names it: name, description, licence.
    source: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # further limitations the input states, in words

    def figures(self) -> dict[str, dict[str, Any]]:
        """Every figure a budget can bound, by name: the leaks, and the keeps that are budget figures."""
        return {**self.leaks, **{k["name"]: k for k in self.keeps if k.get("budget")}}


# ----------------------------------------------------------------------------------------------- inputs
def read_input(path: str | Path, label: str | None = None, variant: str | None = None) -> ReleaseInput:
    """A run directory (with ``label``, and ``variant`` where the strategy has several) or a protect output
    ``P.parquet`` (its label is :data:`PROTECT_LABEL`). InputError (exit 2) names what is wrong."""
    path = Path(path)
    if path.is_dir():
        return read_run(path, label, variant)
    if path.suffix == ".parquet" and path.is_file():
        if label not in (None, PROTECT_LABEL) or variant is not None:
            raise InputError(f"{'--variant' if label in (None, PROTECT_LABEL) else f'--strategy {shown(label)}'}: "
                             f"a protect output holds one strategy, {PROTECT_LABEL!r}, of one variant", file=str(path))
        return read_protect(path)
    raise InputError("is neither a run directory nor a protect output (P.parquet)", file=str(path))


def _one_variant(table: pd.DataFrame, label: str, variant: str | None, where: str) -> tuple[pd.DataFrame, str]:
    """The rows of one variant: ``variant``, or the only one the strategy has."""
    variants = list(dict.fromkeys(table["variant"].fillna("").astype(str)))
    if variant is None:
        if len(variants) > 1:
            raise InputError(f"strategy {label!r} has variants {', '.join(variants)}; name one with --variant",
                             file=where)
        variant = variants[0] if variants else ""
    elif variant not in variants:
        raise InputError(f"--variant {shown(variant)}: strategy {label!r} has variants {', '.join(variants)}",
                         file=where)
    return table[table["variant"].fillna("").astype(str) == variant].reset_index(drop=True), variant


def read_run(run_dir: str | Path, label: str | None, variant: str | None = None) -> ReleaseInput:
    """A strategy of a finished run: its synthetic shards (checked against the fingerprints the run recorded),
    its figures from the run's long score table and the run's budget (``report.require``)."""
    run = RunFiles.open(run_dir)
    labels = run.strategy_labels()  # not the strategies that rewrote the raw texts of a pseudonymising run
    if label is None or label not in labels:
        said = "name the strategy to release with --strategy" if label is None else \
            f"--strategy {shown(label)}: not a strategy of this run"
        raise InputError(f"{said} (its strategies: {', '.join(labels) or 'none'})", file=str(run.root))
    layout = run_layout(run)
    store = ArtifactStore(run.root)
    shards = layout.shards(public=True)[label]
    table, variant = _one_variant(pd.concat([store.read_table(r) for r in shards], ignore_index=True), label,
                                  variant, str(run.root))
    manifest = run.manifest()
    context = manifest.get("report") or {}
    summary = score_summary(layout, store.read_table, runs=utility_runs(layout, store.read_table),
                            utility_signature=context.get("utility_signature", ""))
    mine = summary[((summary["strategy"] == label) & summary["variant"].isin([variant, ""]))
                   | summary["strategy"].isin(BASELINE_ROWS)]

    config = manifest.get("config", {})
    report = config.get("report", {})
    adversaries = report.get("adversaries")  # the budget's threat model: its leaks are stated under it
    leaks = _run_leaks(mine[mine["strategy"] == label], adversaries)
    keeps = _run_keeps(mine, label)
    spec = next((s for s in config.get("generate", {}).get("strategies", [])
                 if (s.get("label") or s["name"]) == label), {})
    name = strategy_name(label, variant)
    signature = (f"{spec.get('name', label)} params={json.dumps(spec.get('params') or {}, sort_keys=True)} "
                 f"seed={config.get('seed')} shard_size={config.get('generate', {}).get('shard_size')} "
                 f"shards={','.join(fingerprint_file(r.path)[:16] for r in shards)}")
    budget, decide_on = report.get("require"), report.get("decide_on", DECIDE_ON[0])
    facts = {"run": f"experiment {manifest.get('experiment', run.root.name)!r}"}
    if adversaries:
        facts["threat model"] = (f"the leak figures and the budget take the worst case over the "
                                 f"{', '.join(adversaries)} adversary setting(s) (the run's report.adversaries)")
    corpus_ref = layout.one("split", "corpus")
    verbatim = None
    if VERBATIM_COLUMN in table.columns:  # the run's protect stage wrote its own flags
        verbatim = pd.Series(_flag(table, VERBATIM_COLUMN), index=table.index)
    chars = int(((config.get("metrics") or {}).get("verbatim") or {}).get("min_chars") or VERBATIM_CHARS)
    if VERBATIM_COLUMN not in table.columns and corpus_ref is not None:
        verbatim = _verbatim_flags(table, store.read_table(corpus_ref), chars)
    attacks = _run_attacks(mine[mine["strategy"] == label], adversaries)
    protected = layout.one("protect", "summary") if label == PROTECT_LABEL else None
    if protected is not None:  # the run's protect stage: its summary says how it was made and adds its certificate
        summary = _protect_summary(Path(protected.path))
        signature = str(summary["signature"])
        if not budget:  # the run states none: the protect stage's own, decided as it decided it
            budget, decide_on = summary["budget"] or None, summary["decide_on"]
        facts.update(_protect_facts(summary))
        leaks = _worse(leaks, {name: _figure(f) for name, f in summary["figures"].items()}, decide_on)
        attacks += [{**r, "adversary": f"{r['adversary']} (certificate)"} for r in summary["certificate"]]
    unit, linkability = _summary_unit(summary) if protected is not None else ("timeline", None)
    named = ((config.get("privacy") or {}).get("reidentify") or {}).get("histories")
    data = config.get("data") or {}
    withheld, outside = failed_rows(table, "the strategy produced no usable text for it"), 0
    extra: dict[str, Any] = {}
    if protected is not None:  # the protect stage's held-back documents are not rows of its shards
        withheld, outside = protect_withheld(summary, table, None)
        floor = number(summary.get("meaning_floor"))
        extra = {"fluency": summary_fluency(summary), "meaning_floor": floor if math.isfinite(floor) else None,
                 "notes": summary_notes(summary)}
    return ReleaseInput(
        kind="run", path=run.root, label=name, table=table, leaks=leaks, keeps=keeps,
        budget=budget, decide_on=decide_on, signature=signature,
        tool_version=str(manifest.get("versions", {}).get("synthugc", "unknown")),
        epsilon=variant_epsilons(table).get(variant), facts=facts, attacks=attacks, verbatim=verbatim,
        verbatim_chars=chars, unit=unit, linkability=linkability, histories=_histories(named), withheld=withheld,
        n_input=len(table) + outside, source=source_info(data.get("dataset"), data.get("path")), **extra)


def _verbatim_flags(table: pd.DataFrame, corpus: pd.DataFrame, min_chars: int) -> pd.Series:
    """Per row of ``table``, whether its text holds a run of ``min_chars`` characters of its source in ``corpus``
    (rows whose source is not found: not verbatim; failed rows: not scored)."""
    sources = table["doc_id"].map(corpus.drop_duplicates("doc_id").set_index("doc_id")["text"])
    known = sources.notna().to_numpy() & (table["status"] == STATUS_OK).to_numpy()
    flags = np.zeros(len(table), bool)
    flags[known] = verbatim_flags(sources[known].astype(str).tolist(), table["text"][known].astype(str).tolist(),
                                  min_chars=min_chars)
    return pd.Series(flags, index=table.index)


def _worse(one: Mapping[str, dict[str, Any]], other: Mapping[str, dict[str, Any]],
           decide_on: str) -> dict[str, dict[str, Any]]:
    """Per figure, the worse of two measurements of it (:func:`tasks.budgets.worst_index`): a run's own attacks and
    its protect stage's certificate each state what the output leaks, and the stronger one counts."""
    out = dict(one)
    for name, figure in other.items():
        both = [f for f in (one.get(name), figure) if f is not None]
        out[name] = worst_figure(both, decide_on) or both[-1]
    return out


def _run_attacks(scores: pd.DataFrame, adversaries: Sequence[str] | None) -> list[dict[str, Any]]:
    """A run's re-identification attacks on one strategy, one row per (attack, adversary): accuracy@1 and the
    residual risk over chance with their intervals, and why an attack has no value (left out, not measurable)."""
    rows = scores[(scores["level"] == "privacy") & scores["metric"].isin(["reid_accuracy", "reid_residual_risk"])]
    if adversaries is not None:
        rows = rows[rows["adversary"].isna() | rows["adversary"].isin(list(adversaries))]
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows.to_dict("records"):
        entry = out.setdefault((str(r.get("attack")), str(r.get("adversary"))), {
            "attack": str(r.get("attack")), "adversary": str(r.get("adversary")), "reason": None})
        name = "accuracy_at_1" if r["metric"] == "reid_accuracy" else "residual_risk"
        entry.update({name: number(r["value"]), f"{name}_ci_low": number(r.get("ci_low")),
                      f"{name}_ci_high": number(r.get("ci_high")), "n_timelines": number(r.get("n"))})
        if isinstance(r.get("reason"), str) and r["reason"] and not entry["reason"]:
            entry["reason"] = r["reason"]
    return sorted(out.values(), key=lambda e: (e["attack"], e["adversary"]))


def strategy_name(label: str, variant: str) -> str:
    """How the report's budget table names a strategy variant (``stymask``, ``backtranslate (pivot-eo)``)."""
    return strategy_label(label, variant)


def _run_leaks(privacy: pd.DataFrame, adversaries: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """Each leak figure's row as the budget is decided on it (:func:`tasks.report.budgets.worst_row`: the
    highest upper bound over attacks, adversary settings in ``adversaries``, attributes and entity types), with
    the attack, setting and attribute that reached it."""
    def text(value: object) -> str | None:
        return value if isinstance(value, str) and value else None

    leaks: dict[str, dict[str, Any]] = {}
    for name, metric in LEAK_METRICS.items():
        row = worst_row(privacy[privacy["level"] == "privacy"], metric, adversaries)
        if row is None:
            continue
        leaks[name] = _figure({**row.to_dict(), "attack": text(row.get("attack")), "adversary": text(row.get("adversary"))})
        if text(row.get("attribute")):
            leaks[name]["attribute"] = row["attribute"]
    return leaks


def _run_keeps(summary: pd.DataFrame, label: str) -> list[dict[str, Any]]:
    """Meaning and style (the catalogue's headline metrics, mean over the documents) and utility (the
    substitution model's score as a share of the real-data model's) of ``label``."""
    mine = summary[summary["strategy"] == label]
    keeps = []
    for aspect in ("meaning", "style"):
        for metric in catalogue.headline_metrics(aspect):
            rows = mine[(mine["metric"] == metric.name) & (mine["level"] == catalogue.SUMMARY_LEVEL[metric.level])]
            if len(rows):
                keeps.append({"name": metric.description, "aspect": aspect, **_figure(rows.iloc[0].to_dict())})
    budget = budget_table(summary)
    share = float(budget["utility"].iloc[0]) if len(budget) else math.nan
    if not math.isnan(share):
        keeps.append({"name": "utility", "aspect": "utility", "budget": True,
                      "what": "the task model trained on the synthetic texts, as a share of the one trained on the "
                              "real texts", **_figure({"value": share})})
    return keeps


def _protect_problem(summary: Any) -> str | None:
    """What is wrong with a protect summary (the protect format), or None."""
    if not isinstance(summary, dict):
        return "is not a JSON object"
    missing = [k for k in PROTECT_SUMMARY_KEYS if k not in summary]
    if missing:
        return f"lacks key(s) {', '.join(missing)} of the protect format"
    if not isinstance(summary["figures"], dict) or not all(isinstance(f, dict) for f in summary["figures"].values()):
        return "key 'figures': expected a mapping from figure name to {value, ci_low, ci_high, n, attack, adversary}"
    if not isinstance(summary["certificate"], list) or not all(isinstance(r, dict) for r in summary["certificate"]):
        return "key 'certificate': expected a list of {attack, adversary, accuracy_at_1, ...}"
    if not isinstance(summary["meaning"], dict) or not isinstance(summary["documents"], dict):
        return "keys 'meaning' and 'documents': expected mappings"
    if summary["decide_on"] not in DECIDE_ON:
        return f"key 'decide_on': must be one of {', '.join(DECIDE_ON)}, got {shown(summary['decide_on'])}"
    return None


def _protect_summary(path: Path) -> dict[str, Any]:
    """A protect summary (``P.protect.json``, or a run's ``generate/protect/protect.json``), checked."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not JSON: {exc}", file=str(path)) from None
    if problem := _protect_problem(summary):
        raise InputError(problem, file=str(path))
    return summary


def _protect_facts(summary: Mapping[str, Any]) -> dict[str, str]:
    """The card's lines on how a protect output was made, in words: its rounds and moves, its meaning floor, its
    certificate and the loop's own verdict."""
    ladder = ", then ".join(map(str, summary["ladder"]))
    held = {"drop": "were held back", "keep": "were released anyway, marked failed"}.get(str(summary["on_fail"]),
                                                                                         f"({summary['on_fail']})")
    left = (summary.get("left_out") or {}).get("certificate")
    return {"protect": f"{summary['rounds']} round(s) from {summary['start']!s}: each round rewrote the documents the "
                       f"attacks still re-identified, " + (f"with the moves {ladder} in turn" if ladder else
                                                         "with no further move")
                       + f"; a round's rewrite was kept only where its meaning ({summary['meaning_metric']}) stayed at or "
                         f"above {summary['meaning_floor']}"
                       + (f" and its fluency at or above {summary['fluency_floor']:g}"
                          if summary.get("fluency_floor") is not None else "")
                       + f"; documents still re-identified that no rewrite above the floors could protect {held}",
            "certificate": "every registered attack run again on the output with the adversary's whole histories (the "
                           "loop steered on half of them), at the unit the output exposes ("
                           + str(summary.get("unit", "timeline")) + "s)"
                           + ("; left out: " + "; ".join(f"{k}: {v}" for k, v in left.items()) if left else ""),
            "protect verdict": str(summary["verdict"])}


def _summary_unit(summary: Mapping[str, Any], where: str | None = None) -> tuple[str, dict[str, Any] | None]:
    """The unit a protect summary was certified at (``timeline`` where it says none) and its linkability figure."""
    unit = summary.get("unit") or "timeline"
    if unit not in UNITS:
        raise InputError(f"key 'unit': must be one of {', '.join(UNITS)}, got {shown(unit)}", file=where)
    linkability = summary.get("linkability")
    return unit, dict(linkability) if isinstance(linkability, Mapping) else None


def _histories(named: object) -> str | None:
    """The histories file an input names, where it is still there (else the linkability model fits on the
    released texts, and says so)."""
    return str(named) if isinstance(named, str) and named and Path(named).is_file() else None


def release_unit(release: ReleaseInput, unit: str | None, keep: Sequence[str]) -> str:
    """The unit to release at: ``unit``, or the one the input was certified at. InputError (exit 2) for an unknown
    unit, a timeline release of a post certificate (it says nothing of timelines), and a post release that keeps a
    column linking an author's posts."""
    chosen = release.unit if unit is None else unit
    if chosen not in UNITS:
        raise InputError(f"--unit {shown(chosen)}: must be one of {', '.join(UNITS)}")
    if chosen == "timeline" and release.unit == "post":
        raise InputError(f"--unit timeline: the {release.kind} was certified at post unit, which says nothing of "
                         "what timelines leak; release it at post unit or protect it again at timeline unit")
    linking = [c for c in keep if c in LINKING]
    if chosen == "post" and linking:
        why = "--unit post" if unit is not None else f"post unit (the unit the {release.kind} was certified at)"
        raise InputError(f"--keep {', '.join(linking)}: a release at {why} drops {', '.join(LINKING)}, which link "
                         "an author's posts; leave them out of --keep, or release at timeline unit")
    return chosen


def read_protect(path: str | Path) -> ReleaseInput:
    """A protect output: ``P.parquet`` (the synthetic table plus round and move) and its summary
    ``P.protect.json`` (figures, budget, signature); the rounds, failures and private files are not read."""
    paths = protect_paths(path)
    if not paths.summary.is_file():
        raise InputError(f"the protect summary {paths.summary.name} is missing beside it", file=str(paths.table))
    summary = _protect_summary(paths.summary)
    table = read_synthetic(paths.table)
    labels = sorted(set(table["strategy"].astype(str)))
    if labels != [PROTECT_LABEL]:
        raise InputError(f"strategy {', '.join(labels)}: a protect output's rows are all {PROTECT_LABEL!r}",
                         file=str(paths.table), column="strategy")
    meaning = summary["meaning"]
    facts = _protect_facts(summary)
    unit, linkability = _summary_unit(summary, str(paths.summary))
    if VERBATIM_COLUMN not in table.columns:
        raise InputError(f"column {VERBATIM_COLUMN!r} is missing: a protect output states which documents hold a run "
                         "of their source; rerun synthugc protect", file=str(paths.table), column=VERBATIM_COLUMN)
    withheld, outside = protect_withheld(summary, table, paths.failures)
    floor = number(summary.get("meaning_floor"))
    return ReleaseInput(
        kind="protect output", path=paths.table, label=PROTECT_LABEL, table=table,
        leaks={name: _figure(f) for name, f in summary["figures"].items()},
        keeps=[{"name": str(summary["meaning_metric"]), "aspect": "meaning", **_figure(meaning)}],
        budget=summary["budget"] or None, decide_on=summary["decide_on"], signature=str(summary["signature"]),
        tool_version=str(summary["tool_version"]), epsilon=next(iter(variant_epsilons(table).values()), None),
        facts=facts, attacks=[dict(r) for r in summary["certificate"]],
        verbatim=pd.Series(_flag(table, VERBATIM_COLUMN), index=table.index),
        verbatim_chars=int(summary.get("verbatim_chars", VERBATIM_CHARS)), unit=unit, linkability=linkability,
        histories=_histories(summary.get("histories")), withheld=withheld, n_input=len(table) + outside,
        fluency=summary_fluency(summary), meaning_floor=floor if math.isfinite(floor) else None,
        source=summary_source(summary), notes=summary_notes(summary))


def dp_audit_line(path: str | Path, release: ReleaseInput) -> str:
    """The one-line summary of a ``synthugc audit-dp`` table (nominal against audited epsilon) for the card;
    InputError for a file that is not such an audit, or a release of a strategy without a DP epsilon."""
    if release.epsilon is None:
        raise InputError(f"--dp-audit: strategy {release.label!r} has no DP epsilon to audit", file=str(path))
    check_parquet_file(path)
    table = pd.read_parquet(path)
    columns = {"dp-prompt": DP_PROMPT_COLUMNS, "dp-bart": DP_BART_COLUMNS}
    method = str(table["method"].iloc[0]) if "method" in table.columns and len(table) else ""
    missing = [c for c in columns.get(method, ("method",)) if c not in table.columns or method not in columns]
    if missing:
        raise InputError("not an audit written by `synthugc audit-dp` (one row per document)", file=str(path),
                         column=missing[0])
    return audit_summary(table)


# ------------------------------------------------------------------------------------------------ budget
@dataclass(frozen=True)
class Verdict:
    """Whether the figures meet a budget, and the words for each bound."""

    budget: str | None
    met: bool  # True without a budget
    lines: tuple[str, ...]  # one per bound: "reidentification 0.020 [0.000, 0.080] <= 0.1"
    failing: tuple[str, ...]  # the lines of the bounds not met

    def summary(self) -> str:
        if self.budget is None:
            return "no budget stated"
        return f"budget {'met' if self.met else 'missed'}: " + "; ".join(self.failing if not self.met else self.lines)


def verdict_of(release: ReleaseInput, budget: str | None, decide_on: str, where: str) -> Verdict:
    """Each bound of ``budget`` decided on the release's figures (:func:`tasks.budgets.decide`, the interval's bound
    by default); a figure the input lacks is unknown, so not met. A line names the attack that reached the figure."""
    if not budget:
        return Verdict(None, True, (), ())
    figures = release.figures()
    lines, failing = [], []
    for bound in parse_budget(budget, where=where):
        figure = figures.get(bound.column, {})
        d = decide(bound, figure, decide_on)
        shown_figure = f"{bound.column} {with_interval(d.value, d.ci_low, d.ci_high)}"
        who = ", ".join(str(figure[k]) for k in ("attack", "adversary", "attribute") if figure.get(k))
        how = f"decided {d.how}" + (f"; {who}" if who else "")
        if d.met:
            lines.append(f"{shown_figure} {bound.op} {bound.limit:g} ({how})")
            continue
        if d.outcome == "unknown":
            line = f"{bound.column} is not measured for {release.label!r}, so {bound} cannot be shown met"
        elif d.outcome == "undecided":
            line = f"{shown_figure} is undecided for {bound} ({how}: the interval straddles it)"
        else:
            line = f"{shown_figure} {'>' if bound.op == '<=' else '<'} {bound.limit:g} ({how})"
        lines.append(line)
        failing.append(line)
    return Verdict(budget, not failing, tuple(lines), tuple(failing))


# ------------------------------------------------------------------------------------------------- table
@dataclass(frozen=True)
class ReleaseTable:
    """The released rows and what was left out."""

    table: pd.DataFrame
    n_input: int
    n_failed: int
    n_verbatim: int  # ok rows that hold a run of their source (the unchanged ones among them)
    verbatim_kept: bool
    verbatim_chars: int = VERBATIM_CHARS
    n_unchanged: int = 0  # of the verbatim rows, those whose text is their source's
    unit: str = "timeline"
    #: The released rows' authors in clear, row by row (None: the input has none); for the linkability figure, never
    #: written.
    authors: tuple[str | None, ...] | None = field(default=None, repr=False)
    #: The same-author pair AUC the card states for a post release, with ``where`` it was measured.
    linkability: dict[str, Any] | None = None
    #: The card's example rows: the first :data:`EXAMPLE_ROWS` released rows that hold no run of their source.
    examples: pd.DataFrame | None = field(default=None, repr=False)


def keepable_columns(table: pd.DataFrame) -> list[str]:
    """The columns ``--keep`` may name: every column but the always-released and the withheld ones."""
    return [c for c in table.columns if c not in ALWAYS_KEPT and c not in WITHHELD]


def check_keep(table: pd.DataFrame, keep: Sequence[str]) -> list[str]:
    """``keep`` without repeats, each a keepable column; else InputError listing the columns available."""
    available = keepable_columns(table)
    for column in keep:
        if column in ALWAYS_KEPT:
            continue
        if column in WITHHELD:
            raise InputError(f"--keep {shown(column)}: never released (it says how a row was made); available: "
                             f"{', '.join(available)}")
        if column not in available:
            raise InputError(f"--keep {shown(column)}: no such column; available: {', '.join(available) or 'none'}")
    return [c for c in dict.fromkeys(keep) if c not in ALWAYS_KEPT]


def pseudonyms(values: pd.Series, key: bytes, column: str) -> pd.Series:
    """Each value as ``<kind>-<20 hex digits>``: HMAC-SHA256 under ``key`` of the column and the value (the
    same value in another column gets another pseudonym); nulls stay null."""
    prefix = column.split("_")[0]

    def one(value: object) -> object:
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            return pd.NA
        digest = hmac.new(key, f"{column}\x00{value}".encode(), hashlib.sha256).hexdigest()
        return f"{prefix}-{digest[:20]}"

    return values.map(one).astype("string")


def _flag(table: pd.DataFrame, column: str) -> np.ndarray:
    """A nullable boolean column as a plain one (missing: False)."""
    if column not in table.columns:
        return np.zeros(len(table), bool)
    return table[column].astype("boolean").fillna(False).to_numpy(dtype=bool)


def release_table(table: pd.DataFrame, keep: Sequence[str], *, keep_verbatim: bool = False,
                  verbatim: pd.Series | None = None, verbatim_chars: int = VERBATIM_CHARS,
                  key: bytes | None = None, unit: str = "timeline") -> ReleaseTable:
    """The rows a release hands out: ok rows only, not the verbatim ones (``verbatim``: per row of ``table``, whether
    its text holds a run of its source; the unchanged rows always count) unless ``keep_verbatim``; ``doc_id``,
    ``text`` and the ``keep`` columns, identifiers as pseudonyms under ``key`` (default: a fresh random key, never
    kept). At ``post`` unit no column of :data:`LINKING` goes out and the rows are in a fresh random order (a seed
    drawn from the operating system, so the order follows neither the input, nor an author, group or position)."""
    columns = [*ALWAYS_KEPT, *check_keep(table, keep)]
    if unit not in UNITS:
        raise InputError(f"--unit {shown(unit)}: must be one of {', '.join(UNITS)}")
    if unit == "post" and (linking := [c for c in columns if c in LINKING]):
        raise InputError(f"--keep {', '.join(linking)}: a release at post unit drops {', '.join(LINKING)}")
    ok = (table["status"] == STATUS_OK).to_numpy()
    unchanged = _flag(table, "unchanged") & ok
    copied = unchanged | (verbatim.to_numpy(dtype=bool) if verbatim is not None else _flag(table, VERBATIM_COLUMN)) & ok
    n_verbatim = int(copied.sum())
    chosen = table[ok & (keep_verbatim | ~copied)]
    if unit == "post":  # a fresh permutation, not reproducible from the data or any seed the user knows
        chosen = chosen.iloc[np.random.default_rng(secrets.randbits(128)).permutation(len(chosen))]
    authors = (tuple(None if pd.isna(a) else str(a) for a in chosen["author_id"])
               if "author_id" in chosen.columns else None)
    rewritten = ~pd.Series(copied, index=table.index).loc[chosen.index].to_numpy(dtype=bool)
    out = chosen[columns].reset_index(drop=True)
    if out.empty:
        raise InputError(f"nothing to release: of {len(table)} rows, {int((~ok).sum())} failed and {n_verbatim} are "
                         f"verbatim (they hold a run of {verbatim_chars} or more characters of their source text; "
                         "--keep-verbatim releases them)")
    key = secrets.token_bytes(32) if key is None else key
    for column in PSEUDONYMISED:
        if column in out.columns:
            out[column] = pseudonyms(out[column], key, column)
    if out["doc_id"].duplicated().any():
        raise InputError("two documents share a doc_id; a release needs one row per document", column="doc_id")
    return ReleaseTable(out, len(table), int((~ok).sum()), n_verbatim, keep_verbatim, verbatim_chars,
                        int(unchanged.sum()), unit, authors,
                        examples=out[rewritten].head(EXAMPLE_ROWS).reset_index(drop=True))


def with_linkability(release: ReleaseInput, rows: ReleaseTable, *, seed: int = 0) -> ReleaseTable:
    """``rows`` with the same-author pair AUC a post release states: the certificate's where the input has one,
    else measured now on the released rows with their authors (the histories the input names fit the style model;
    none: the released texts). A timeline release states none (its attacks read timelines)."""
    from dataclasses import replace

    if rows.unit != "post":
        return rows
    if release.linkability is not None:
        return replace(rows, linkability={**release.linkability, "where": f"the {release.kind}'s certificate, on "
                                                                          "its posts"})
    authors = rows.authors or ()
    known = [i for i, a in enumerate(authors) if a is not None]
    if not known:
        return replace(rows, linkability={"value": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                                          "reason": "the input names no author: not measurable",
                                          "where": "the released rows"})
    texts = rows.table["text"].astype(str).tolist()
    measured = same_author_auc([texts[i] for i in known], [str(authors[i]) for i in known],
                               histories=release.histories, seed=seed)
    return replace(rows, linkability={**measured, "where": "the released rows, at release time (their authors "
                                                           "known before they were dropped)"})


# ------------------------------------------------------------------------------------------------- write
def is_release(folder: Path) -> bool:
    """Whether ``folder`` holds an earlier release (its card and checksums)."""
    return (folder / CARD_FILE).is_file() and (folder / CHECKSUMS_FILE).is_file()


def check_release_folder(out: str | Path, overwrite: bool) -> Path:
    """``out`` resolved, when a release may be written there: a new or empty folder, or with ``overwrite`` an
    earlier release (never another non-empty folder). InputError otherwise."""
    out = check_output_folder(out)
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise InputError("is not empty; give a new folder, or --overwrite to replace an earlier release there",
                             file=str(out))
        if not is_release(out):
            raise InputError(f"is not empty and holds no earlier release (no {CARD_FILE} and {CHECKSUMS_FILE}); "
                             "--overwrite replaces only a release", file=str(out))
    return out


def checksums(folder: Path) -> str:
    """``sha256sum``'s format for every file under ``folder``, by relative path."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(folder).as_posix()}\n"
                   for p in files)


def write_release(out: Path, table: pd.DataFrame, card: str) -> Path:
    """Write the release into ``out`` (checked by :func:`check_release_folder`) through a temporary folder
    beside it, renamed at the end: a reader sees the old folder or the whole new one."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.parent / f".tmp-{uuid.uuid4().hex}-{out.name}"
    old = out.parent / f".tmp-{uuid.uuid4().hex}-old-{out.name}"
    try:
        (temporary / DATA_FILE).parent.mkdir(parents=True)
        table.to_parquet(temporary / DATA_FILE, index=False)
        (temporary / CARD_FILE).write_text(card, encoding="utf-8")
        (temporary / CHECKSUMS_FILE).write_text(checksums(temporary), encoding="utf-8")
        if out.exists():
            os.rename(out, old)
        try:
            os.rename(temporary, out)
        except OSError:
            if old.exists():
                os.rename(old, out)  # the earlier release stays as it was
            raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return out
