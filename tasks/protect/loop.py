"""The protect loop: rewrite a corpus until a re-identification attacker it never trained against fails, at a
stated budget, keeping meaning; then certify the output against every registered attack on what a real adversary
holds.

Adversarial anonymisation as a feedback loop (Staab et al., "Language Models are Advanced Anonymizers", ICLR
2025; authorship obfuscation in the Mutant-X line): an attack tries, its evidence drives the next rewrite, until
it fails. The histories are split per author (:mod:`tasks.privacy.history_split`); the feedback attack profiles one
half of each author's posts and steers the rewriting; the judge, every registered attack by default (the feedback
attacks among them), profiles the other half, never gives feedback, and decides when the loop stops (overfitting to
the feedback attacker is the known failure of these loops, and the summary says when the two disagree). A judge
the user narrows is checked at round 0 against the registered attacks it leaves out: the summary says when the
strongest of them reads above the judge by more than their intervals allow.

The verdict is not the judge's. After the last round every registered attack (those that can run on the histories
and this hardware; the others are named with why) is run again on the kept output against the full histories, both
halves, which is what a real adversary holds (:mod:`tasks.protect.certificate`): its worst case decides the exit
code, the verdict line and what ``release`` states and refuses. A held-out judge steers; it is weaker than the
adversary by construction (half the history), so it never certifies.

A ``profiling`` bound adds the attributes the corpus names (``attr_<name>``): per attribute, a feedback and a judge
classifier train on their halves of the histories (each author's posts one unit, labelled with the author's value;
the histories must carry the column), the judge's a different linear model, and predict each protected timeline's
author's value; the certificate trains the judge's model on the full histories. The figure is the worst
attribute's advantage over the majority class (Anonymeter's residual risk,
:func:`tasks.privacy.profiling.advantage`); a timeline whose attribute the feedback classifier infers is caught,
and the words pulling it towards the true value are its evidence.

Round 0 is the starting move on every document (default: pseudonymised copy). Each later round takes the
timelines the feedback attack still attributes to their true author (ranked first) or whose attribute it still
infers (profiling bound), the documents that still leak PII (pii_leakage bound) and those still holding a run of
their source (verbatim bound), and gives the next rung of the ladder (:mod:`tasks.protect.moves`) to the
``docs_per_round`` documents of each such timeline that carry the most of the feedback evidence (and to every
leaking or verbatim document); a move is kept only if the document's meaning against its source (BERTScore F1)
stays at or above the floor, otherwise the next rung is tried. Documents not caught are never rewritten again.
Each round is written to the cache as it ends, keyed by everything it depends on but the budget and the number of
rounds: a killed run resumes at the round it was in, a rerun is fully cached, and a changed budget reuses the
rounds already computed. The certificate is cached by the output it attacks.

This module runs the loop and writes its result; the parts it drives live beside it: what a point works with
(:mod:`tasks.protect.components`), the round step (:mod:`tasks.protect.rounds`), the moves applied
(:mod:`tasks.protect.apply`) and the rounds' cache (:mod:`tasks.protect.cache`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.budgets import Bound, decide_all
from tasks.corpus.schema import ATTR_PREFIX, attr_columns
from tasks.errors import ConfigError, InputError
from tasks.generate.base import DEFAULT_VARIANT, synthetic_table
from tasks.intervals import bootstrap
from tasks.layout import PROTECT_LABEL
from tasks.privacy.attacks import AttackPlan, gpu_present
from tasks.privacy.linkability import same_author_auc
from tasks.privacy.reidentify import history_rows
from tasks.protect.attackers import attack_figures, residual, share_figure, summaries, worst
from tasks.protect.cache import _kept_in, load_mapping, load_round, save_round
from tasks.protect.certificate import certify
from tasks.protect.components import Components, Shared, english_sources
from tasks.protect.files import (
    FLUENCY_COLUMN,
    MOVE_COLUMN,
    PROFILING_ATTACK,
    PROTECT_SUMMARY_KEYS,
    ROUND_CODE,
    ROUND_COLUMN,
    ROUNDS_COLUMNS,
    VERBATIM_COLUMN,
)
from tasks.protect.frontier import choose_point, frontier_figure, frontier_table, point_utility
from tasks.protect.moves import ANY_LANGUAGE
from tasks.protect.reading import fluency_against_sources
from tasks.protect.rounds import (
    REJECTED_COLUMN,
    REJECTED_FLUENCY,
    REJECTED_MEANING,
    RoundState,
    caught,
    fit_evidence,
    must_move,
    next_round,
    round_zero,
)
from tasks.protect.settings import ProtectSettings
from tasks.signatures import make_signature
from tasks.store import code_version, fingerprint_config, fingerprint_frame, tool_version

#: Column of the protected table flagging documents kept although they failed (``on_fail: keep``).
FAILED_FLAG = "protect_failed"
MEANING_COLUMN = "meaning"
#: Judge and feedback accuracies further apart than this are said in the summary (overfitting to feedback).
DISAGREEMENT = 0.2


@dataclass
class ProtectResult:
    """The protected table, the rounds table, the failures, the summary and the private pseudonym mapping."""

    table: pd.DataFrame
    rounds: pd.DataFrame
    failures: pd.DataFrame
    summary: dict[str, Any]
    mapping: pd.DataFrame
    met: bool
    #: One row per frontier point and certificate attack (:data:`tasks.protect.files.FRONTIER_COLUMNS`).
    frontier: pd.DataFrame = field(default_factory=pd.DataFrame)


# ----------------------------------------------------------------------------------------------- the loop

class _Protector(Components):
    """One frontier point: its components (:class:`tasks.protect.components.Components`), with the round step
    (:mod:`tasks.protect.rounds`) and the rounds' cache (:mod:`tasks.protect.cache`) as its methods."""

    def round_zero(self) -> RoundState:
        return round_zero(self)

    def next_round(self, prev: RoundState, k: int) -> RoundState:
        return next_round(self, prev, k)

    def fit_evidence(self, zero: RoundState, *, ahead: bool) -> None:
        fit_evidence(self, zero, ahead=ahead)

    def caught(self, state: RoundState) -> np.ndarray:
        return caught(self, state)

    def must_move(self, docs: pd.DataFrame) -> np.ndarray:
        return must_move(self, docs)

    def load(self, k: int) -> RoundState | None:
        state = load_round(self.folder, self.zero_folder, k)
        if state is not None and k == 0:
            self.mappings = load_mapping(self.zero_folder)
        return state

    def save(self, state: RoundState) -> None:
        save_round(self.folder, self.zero_folder, state, self.mappings)


def _round_rows(round_: int, summaries_: list[dict[str, Any]], meaning: float, rewritten: int,
                seconds: float) -> list[dict[str, Any]]:
    return [{"round": round_, "attack": s["attack"], "adversary": s["adversary"], "role": s["role"],
             "accuracy_at_1": s["accuracy_at_1"], "accuracy_at_1_ci_low": s["accuracy_at_1_ci_low"],
             "accuracy_at_1_ci_high": s["accuracy_at_1_ci_high"], "accuracy_at_10": s["accuracy_at_10"],
             "n_timelines": s["n_timelines"], "chance": s.get("chance", math.nan),
             **dict(zip(("residual_risk", "residual_risk_ci_low", "residual_risk_ci_high"), residual(s), strict=True)),
             "meaning": meaning, "documents_rewritten": rewritten, "seconds": seconds} for s in summaries_]


def _judge_figures(state: RoundState, summaries_: list[dict[str, Any]], protector: _Protector,
                   kept: np.ndarray | None = None) -> dict[str, dict[str, Any]]:
    """The judge's figures (what stops the loop): its worst attacks, and the PII and verbatim shares of the
    documents (``kept``, default all)."""
    figures = attack_figures(summaries_, "judge", protector.settings.decide_on, protector.profiling)
    docs = state.docs if kept is None else state.docs[kept]
    if protector.pii:
        figures["pii_leakage"] = share_figure(int(docs["leaked"].sum()), int(docs["spans"].sum()), what="pii")
    figures["verbatim"] = share_figure(int(docs[VERBATIM_COLUMN].sum()), len(docs), what="verbatim")
    return figures


def _decided(bounds: Sequence[Bound], figures: Mapping[str, Mapping[str, Any]], decide_on: str
             ) -> tuple[bool, list[str]]:
    """(every bound met, words for each bound: ``reidentification 0.104 [0.0453, 0.222] > 0.09 (delta/disjoint)``)."""
    decisions = decide_all(bounds, figures, decide_on)
    words = []
    for d in decisions:
        f = figures.get(d.bound.column, {})
        who = "/".join(str(f[k]) for k in ("attack", "adversary") if f.get(k) and f[k] not in ("pii", "verbatim"))
        words.append(d.short + (f" ({who})" if who else ""))
    return all(d.met for d in decisions), words


def judge_strength(summaries_: list[dict[str, Any]], decide_on: str) -> str | None:
    """At round 0: when the judge's worst accuracy@1 (its upper bound) falls below the strongest registered
    attack's (its lower bound, among the judge and the attacks a narrowed judge leaves out, on the judge's half),
    the words that say so and name both attacks; None otherwise."""
    judge = worst(summaries_, "judge", decide_on)
    rows = [s for s in summaries_ if s["role"] in ("judge", "check") and s["n_timelines"]
            and not str(s["attack"]).startswith(PROFILING_ATTACK)]
    if not rows or judge["attack"] is None:
        return None
    strongest = max(rows, key=lambda s: (np.nan_to_num(s["accuracy_at_1"], nan=-1.0), s["role"] == "judge"))
    low, high = strongest["accuracy_at_1_ci_low"], judge["ci_high"] if decide_on == "bound" else judge["value"]
    if strongest["role"] == "judge" or not low > high:
        return None
    return (f"the judge is weaker than the strongest registered attack at round 0: {strongest['attack']} "
            f"({strongest['adversary']}) re-identifies {strongest['accuracy_at_1']:.3g} "
            f"[{low:.3g}, {strongest['accuracy_at_1_ci_high']:.3g}] of the timelines, the judge's worst "
            f"{judge['attack']} ({judge['adversary']}) {judge['value']:.3g} [{judge['ci_low']:.3g}, "
            f"{judge['ci_high']:.3g}]; add {strongest['attack']} to --judge (the certificate runs it regardless)")


def _check_disjoint_histories(corpus: pd.DataFrame, histories: str, settings: ProtectSettings) -> None:
    """The disjoint adversary holds only the users' other documents: histories with none outside the corpus
    (the corpus given as its own history) would leave every attack without data and, with no other adversary,
    every budget "met"."""
    if set(settings.adversaries) != {"disjoint"}:
        return
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if "doc_id" not in pq.ParquetFile(histories).schema_arrow.names:
        raise InputError("the disjoint adversary needs the histories' doc_id", file=histories, column="doc_id")
    ids = pq.read_table(histories, columns=["doc_id"]).column("doc_id").cast("string")
    inside = pc.is_in(ids, value_set=pa.array(corpus["doc_id"].astype(str).tolist(), pa.string()))
    if not pc.any(pc.invert(inside)).as_py():
        raise InputError("the histories hold no document outside the corpus, so the disjoint adversary would have "
                         "nothing to attack with; give the users' other posts (--histories) or the full adversary "
                         "(--adversary full)", file=histories, column="doc_id")


def _check_profiling(corpus: pd.DataFrame, histories: str, settings: ProtectSettings) -> None:
    """A profiling bound needs the attributes: the corpus's ``attr_<name>`` columns label the timelines, and the
    histories carry the same columns to train the classifiers on."""
    if not settings.profiling:
        return
    import pyarrow.parquet as pq

    columns = attr_columns(corpus)
    if not columns:
        raise ConfigError(f"budget: a profiling bound needs the corpus's sensitive attributes (columns "
                          f"{ATTR_PREFIX}<name>); the corpus has none")
    names = pq.ParquetFile(histories).schema_arrow.names
    for col in columns:
        if col not in names:
            raise InputError("a profiling bound trains its classifiers on the histories' values of the corpus's "
                             "attribute, and the histories lack the column", file=histories, column=col)
        if corpus[col].isna().all():
            raise InputError("a profiling bound needs the corpus's attribute values; every one is missing", column=col)


def protect_corpus(corpus: pd.DataFrame, histories: str | os.PathLike, settings: ProtectSettings, *,
                   cache_dir: str | os.PathLike, corpus_fingerprint: str, histories_fingerprint: str,
                   log: Callable[[str], None] = lambda _line: None,
                   invalid: pd.DataFrame | None = None, gpu: bool | None = None) -> ProtectResult:
    """Run the loop on ``corpus`` (the corpus schema) against ``histories`` (a history parquet file) at each meaning
    floor of ``settings``, certify what each point keeps, and return the chosen point (the highest floor whose
    certificate meets the budget, else the point of least risk) with the frontier of every point. Rounds are cached
    under ``cache_dir`` keyed by the fingerprints of the corpus and the histories and
    :meth:`ProtectSettings.round_key` (round 0 without the floor: the points share it). ``invalid``: the input rows
    that failed validation (:data:`tasks.corpus.schema.FAILURE_COLUMNS`), recorded among the failures so that every
    input row ends in the output or in a failure with its reason. ``gpu``: whether the GPU attacks can run at any
    size (default: whether CUDA is present)."""
    gpu = gpu_present() if gpu is None else gpu
    n_posts = history_rows(os.fspath(histories))
    settings, feedback_left_out = settings.runnable_feedback(n_posts, gpu)
    if feedback_left_out:
        log(f"feedback: {', '.join(n for n, _ in settings.feedback)}; left out: "
            f"{'; '.join(f'{n}: {why}' for n, why in feedback_left_out.items())}")
    judge = settings.judge_plan(n_posts, gpu)
    check = settings.check_attacks(judge, n_posts, gpu)
    _check_disjoint_histories(corpus, os.fspath(histories), settings)
    _check_profiling(corpus, os.fspath(histories), settings)
    if judge.left_out:
        log(f"judge: {', '.join(judge.names)}; left out: {'; '.join(judge.lines())}")
    floors = settings.floors
    shared = Shared()
    points: list[ProtectResult] = []
    for floor in floors:
        if len(floors) > 1:
            log(f"frontier point: meaning floor {floor:g}")
        point = _protect_point(corpus, os.fspath(histories), settings.at_floor(floor), cache_dir=Path(cache_dir),
                               corpus_fingerprint=corpus_fingerprint, histories_fingerprint=histories_fingerprint,
                               log=log, invalid=invalid, gpu=gpu, judge=judge, check=check, n_posts=n_posts,
                               shared=shared)
        points.append(point)
    chosen, why = choose_point([p.summary for p in points], frontier_figure(settings), settings.prefer)
    frontier, notes = frontier_table([p.summary for p in points], chosen, settings)
    result = points[chosen]
    summary = result.summary
    summary["meaning_floors"] = list(floors)
    summary["frontier"] = {"floors": list(floors), "chosen_floor": floors[chosen], "why": why, "notes": notes,
                           "met_floors": [f for f, p in zip(floors, points, strict=True) if p.met]}
    if len(floors) > 1:
        met_floors = summary["frontier"]["met_floors"]
        line = (f"frontier: floor {floors[chosen]:g} is chosen, {len(met_floors)} of {len(floors)} floors meet the "
                f"budget; {why}" if result.met else
                f"frontier: no floor of {', '.join(f'{f:g}' for f in floors)} meets the budget; P is the floor-"
                f"{floors[chosen]:g} output, the least re-identified")
        summary["verdict"] = f"{line}; {summary['verdict']}" + ("; " + "; ".join(notes) if notes else "")
        log(line)
    result.frontier = frontier
    return result


def _protect_point(corpus: pd.DataFrame, histories: str, settings: ProtectSettings, *, cache_dir: Path,
                   corpus_fingerprint: str, histories_fingerprint: str, log: Callable[[str], None],
                   invalid: pd.DataFrame | None, gpu: bool, judge: AttackPlan, check: tuple[str, ...],
                   n_posts: int, shared: Shared) -> ProtectResult:
    """One frontier point: the loop at ``settings``' single floor, then its certificate."""
    base = {"corpus": corpus_fingerprint, "histories": histories_fingerprint, "code": code_version(*ROUND_CODE)}
    key = fingerprint_config({**base, **settings.round_key(judge, check)})[:24]
    zero = fingerprint_config({**base, **settings.round_key(judge, check, floor=False)})[:24]
    protector = _Protector(corpus, histories, settings, cache_dir / key, log, histories_fingerprint, judge, check,
                           zero_folder=cache_dir / zero, shared=shared)
    rounds: list[dict[str, Any]] = []
    state: RoundState | None = None
    strength: str | None = None
    met, stop = False, "rounds ran out"
    for k in range(settings.max_rounds + 1):
        cached = protector.load(k)
        if cached is not None:
            state = cached
            if k == 0:
                protector.fit_evidence(cached, ahead=False)  # fitted when a later round first asks
        else:
            state = protector.round_zero() if state is None else protector.next_round(state, k)
            protector.save(state)
        round_summaries = state.attack_summaries()
        ok = state.docs["meaning"].to_numpy(float)
        rounds += _round_rows(state.round, round_summaries, float(np.mean(ok)) if len(ok) else math.nan,
                              state.rewritten, state.seconds)
        met, words = _decided(settings.bounds, _judge_figures(state, round_summaries, protector), settings.decide_on)
        feedback = worst(round_summaries, "feedback", "point")
        log(f"round {k}: judge {', '.join(words)}; feedback {feedback['attack']} {feedback['value']:.3g}; "
            f"meaning {np.mean(ok):.3f}; {state.rewritten} rewritten ({state.seconds:.1f} s"
            f"{', cached' if cached is not None else ''})")
        if k == 0 and (strength := judge_strength(round_summaries, settings.decide_on)):
            log(f"warning: {strength}")
        if met:
            stop = "the judge's budget is met"
            break
        if k == settings.max_rounds:
            break
        left = protector.caught(state)
        if not len(left):
            stop = "the feedback attack catches nothing more"
            break
        if (state.docs["rung"].to_numpy()[left] >= len(settings.ladder)).all():
            stop = "the ladder is exhausted"
            break
    assert state is not None
    return _result(protector, state, rounds, met, stop, key, strength, n_posts, gpu, invalid)


def _result(protector: _Protector, state: RoundState, rounds: list[dict[str, Any]], met_in_loop: bool, stop: str,
            key: str, strength: str | None, n_posts: int, gpu: bool,
            invalid: pd.DataFrame | None = None) -> ProtectResult:
    settings, corpus = protector.settings, protector.corpus
    docs = state.docs
    still = np.zeros(len(corpus), bool)
    if not met_in_loop:
        still[protector.caught(state)] = True
    # held back: a still-caught document every rung left below the floor, or one a bound catches on its own (it
    # leaks PII, or holds a run of its source); its timeline's other documents are kept, and the certificate
    # judges what is kept
    blocked, alone = docs["blocked"].to_numpy(bool), protector.must_move(docs)
    caught = still & (blocked | alone)
    # round 0's start move is not held to the floors: a kept document that reads worse than the fluency floor (a
    # pseudonym where a common word stood) is held back too, so every row handed out is within it
    docs = _with_fluency(protector, docs, ~caught)
    floor = settings.fluency_floor
    unread = ~caught & (docs[FLUENCY_COLUMN].to_numpy(float) < floor if floor is not None else False)
    caught |= unread
    rejected = docs[REJECTED_COLUMN].to_numpy(object) if REJECTED_COLUMN in docs.columns else \
        np.full(len(docs), REJECTED_MEANING, dtype=object)
    floor_words = np.where(rejected == REJECTED_FLUENCY, f"floor: every move left {MEANING_COLUMN} below "
                           f"{settings.meaning_floor:g} or read worse than the fluency floor "
                           f"{settings.fluency_floor if settings.fluency_floor is not None else 'off'}",
                           f"floor: every move left {MEANING_COLUMN} below {settings.meaning_floor:g}")
    other_language = ("language: langid puts its source in another language, and the ladder's moves that rewrite other "
                      "languages (" + (", ".join(m.label for m in settings.ladder if m.name in ANY_LANGUAGE) or "none") +
                      ") left none at the floors")
    reason = np.where(unread, f"fluency: reads worse than its source beyond the fluency floor {floor}",
                      np.where(blocked & ~english_sources(protector), other_language, np.where(blocked, floor_words,
                      np.where(docs["leaked"].to_numpy() > 0 if protector.pii else False,
                               f"still leaks PII after {state.round} round(s): {stop}",
                               f"still holds a run of its source after {state.round} round(s): {stop}"))))
    failures = pd.DataFrame({"doc_id": docs["doc_id"].to_numpy()[caught], "author_id": corpus["author_id"].to_numpy()[caught],
                             "round": docs["round"].to_numpy()[caught], "move": docs["move"].to_numpy()[caught],
                             MEANING_COLUMN: docs["meaning"].to_numpy()[caught], "reason": reason[caught]})
    n_caught = len(failures)
    if invalid is not None and len(invalid):
        failures = pd.concat([failures, pd.DataFrame({
            "doc_id": invalid["doc_id"].to_numpy(), "author_id": pd.NA, "round": pd.NA, "move": "input",
            MEANING_COLUMN: math.nan,
            "reason": [f"input row {r}, field {f}: {why}" for r, f, why in zip(invalid["row"], invalid["field"],
                                                                           invalid["reason"], strict=True)]})],
            ignore_index=True)
    kept = ~caught if settings.on_fail == "drop" else np.ones(len(corpus), bool)
    docs = _with_fluency(protector, docs, kept)
    kept_timelines = set(protector.doc_timeline.reindex(docs["doc_id"][kept]))
    dropped_timelines = set(protector.doc_timeline.reindex(docs["doc_id"][~kept]))
    judged = summaries(state.attacks, kept_timelines - dropped_timelines)
    judge_figures = _judge_figures(state, judged, protector, kept)
    table = _protected_table(corpus, docs, kept, caught if settings.on_fail == "keep" else None)

    protector.forget_halves()  # the loop is done with them: the certificate profiles the full histories
    plan = settings.certificate_plan(n_posts, gpu)
    params = {name: settings.params_of(name) for name in plan.names}
    kept_docs = docs[kept]
    certificate = certify(table, histories=protector.histories, plan=plan, params=params,
                          adversaries=tuple(settings.adversaries), timeline_posts=settings.attack_posts,
                          decide_on=settings.decide_on, corpus=corpus, cache=protector.folder,
                          profiling=settings.profiling_judge if protector.profiling else None,
                          pii=(int(kept_docs["leaked"].sum()), int(kept_docs["spans"].sum())) if protector.pii else None,
                          seed=settings.seed, shards=protector.halves_written())
    kept_key = {"table": fingerprint_frame(table), "seed": settings.seed}
    linkability = None
    if settings.unit == "post":  # unlinked posts can be linked again by their style: how well, on what is kept

        linkability = _kept_in(protector.folder, "linkability", kept_key, lambda: _plain(same_author_auc(
            table["text"].astype(str).tolist(), table["author_id"].astype(str).tolist(), histories=protector.histories,
            seed=settings.seed)))
    releasable = table[~table[VERBATIM_COLUMN].to_numpy(bool)] if len(table) else table  # what release hands out
    utility = _kept_in(protector.folder, "utility", {**kept_key, "released": True, "code": code_version("tasks/training")},
                       lambda: point_utility(corpus, releasable, seed=settings.seed))
    meaning = table[MEANING_COLUMN].to_numpy(float)
    fluency = table[FLUENCY_COLUMN].to_numpy(float)
    fluency = fluency[~np.isnan(fluency)]
    released = int((~table[VERBATIM_COLUMN].to_numpy(bool)).sum()) if len(table) else 0
    rounds += _round_rows(state.round, certificate.summaries, float(np.mean(meaning)) if len(meaning) else math.nan,
                          0, certificate.seconds)
    met, words = _decided(settings.bounds, certificate.figures, settings.decide_on)
    _, judge_words = _decided(settings.bounds, judge_figures, settings.decide_on)
    protector.log(f"certificate: {', '.join(words)} ({len(plan.names)} attack(s) on the full histories: "
                  f"{', '.join(plan.names)}; {certificate.seconds:.1f} s)"
                  + (f"; left out: {'; '.join(plan.lines())}" if plan.left_out else ""))
    if linkability is not None:
        protector.log(f"linkability: same-author pairs of kept posts told from others at AUC "
                      f"{_shown(linkability)} ({linkability.get('model')})")

    low, high = bootstrap(meaning, seed=settings.seed) if len(meaning) else (math.nan, math.nan)
    f_low, f_high = bootstrap(fluency, seed=settings.seed) if len(fluency) else (math.nan, math.nan)
    last = state.attack_summaries()  # before any document is left out: where the loop itself stopped
    feedback, judge = worst(last, "feedback", "point"), worst(last, "judge", "point")
    rewritten = int((table[ROUND_COLUMN] > 0).sum()) if len(table) else 0
    verdict = (f"protect: certificate {', '.join(words)} after {state.round} round(s), BERTScore "
               f"{np.mean(meaning) if len(meaning) else math.nan:.2f}, fluency "
               f"{np.mean(fluency) if len(fluency) else math.nan:+.2f}, {rewritten}/{len(corpus)} rewritten after "
               f"round 0, {n_caught} held back ({settings.on_fail})"
               + (f", {len(failures) - n_caught} input rows invalid" if len(failures) > n_caught else ""))
    notes = []
    if not met:
        notes.append("budget not met: " + ("the certificate misses it although the judge's half-history attacks "
                                           "meet it" if met_in_loop else stop))
    if strength:
        notes.append(strength)
    if not settings.bounds_figure("verbatim") and released < len(table):
        notes.append(f"the budget lifts the verbatim bound: {len(table) - released} kept document(s) still hold a "
                     f"run of their source, which release leaves out (bound it, e.g. verbatim<=0.05, and protect "
                     f"rewrites them)")
    if feedback["value"] is not None and judge["value"] is not None and \
            judge["value"] - feedback["value"] > DISAGREEMENT:
        notes.append(f"the judge ({judge['attack']}, {judge['value']:.2f}) re-identifies far more than the feedback "
                     f"attack ({feedback['attack']}, {feedback['value']:.2f}): the rewriting fits its feedback "
                     f"attacker; add a judge-like feedback attack or stronger moves")
    feedback_profiling = {(s["attack"], s["adversary"]): s["accuracy_at_1"] for s in last
                          if s["role"] == "feedback" and s["attack"].startswith(PROFILING_ATTACK)}
    for s in last:
        fed = feedback_profiling.get((s["attack"], s["adversary"]))
        if s["role"] == "judge" and fed is not None and s["accuracy_at_1"] - fed > DISAGREEMENT:
            notes.append(f"the judge classifier infers {s['attack'].removeprefix(PROFILING_ATTACK)} far more often "
                         f"({s['accuracy_at_1']:.2f}) than the feedback classifier ({fed:.2f}): the masking fits the "
                         f"feedback classifier; add stronger moves")
    summary = {
        "tool_version": tool_version(),
        "signature": make_signature("protect", key=key, budget=settings.budget, decide_on=settings.decide_on,
                                    on_fail=settings.on_fail),
        "budget": settings.budget, "decide_on": settings.decide_on, "met": bool(met), "rounds": int(state.round),
        "stop": stop, "start": settings.start, "ladder": [m.label for m in settings.ladder],
        "meaning_metric": "bertscore_f1", "meaning_floor": settings.meaning_floor, "on_fail": settings.on_fail,
        "feedback": [n for n, _ in settings.feedback], "judge": list(protector.judge.names),
        "adversaries": list(settings.adversaries), "verbatim_chars": settings.verbatim_chars,
        "unit": settings.unit, "linkability": linkability, "utility": utility, "histories": protector.histories, "figures": {k: _plain(v) for k, v in certificate.figures.items()},
        "certificate": [_plain(r) for r in certificate.rows()],
        "left_out": {"judge": dict(protector.judge.left_out), "certificate": dict(certificate.left_out)},
        "judge_figures": {k: _plain(v) for k, v in judge_figures.items()}, "judge_verdict": judge_words,
        "judge_strength": strength,
        "feedback_worst": _plain(feedback), "judge_worst_before_failures_left_out": _plain(judge),
        "meaning": _plain({"value": float(np.mean(meaning)) if len(meaning) else math.nan, "ci_low": low,
                           "ci_high": high, "n": len(meaning)}),
        "fluency_metric": "fluency", "fluency_floor": settings.fluency_floor,
        "fluency": _plain({"value": float(np.mean(fluency)) if len(fluency) else math.nan, "ci_low": f_low,
                           "ci_high": f_high, "n": len(fluency), "floor": settings.fluency_floor}),
        "withheld": withheld_by_reason(failures),
        "prefer": settings.prefer,
        "documents": {"input": len(corpus), "kept": len(table), "released": released, "rewritten": rewritten,
                      "failed": n_caught,
                      "invalid": len(failures) - n_caught, "still_caught_kept": int((still & ~caught).sum())},
        "moves": {str(k): int(v) for k, v in table[MOVE_COLUMN].value_counts().items()} if len(table) else {},
        "notes": notes, "verdict": verdict + ("; " + "; ".join(notes) if notes else ""),
    }
    assert set(PROTECT_SUMMARY_KEYS) <= set(summary), set(PROTECT_SUMMARY_KEYS) - set(summary)
    mapping = pd.concat(protector.mappings, ignore_index=True) if protector.mappings else pd.DataFrame()
    return ProtectResult(table, pd.DataFrame(rounds, columns=ROUNDS_COLUMNS), failures, summary, mapping, bool(met))


def _with_fluency(protector: _Protector, docs: pd.DataFrame, kept: np.ndarray) -> pd.DataFrame:
    """``docs`` with the fluency of every kept document that has none yet (round 0's start move is not gated, so
    its output is scored here: the output's figure covers every row it keeps)."""
    docs = docs.copy()
    if FLUENCY_COLUMN not in docs.columns:
        docs[FLUENCY_COLUMN] = np.nan
    texts = docs["text"].astype(str)
    same = (texts == protector.sources.reset_index(drop=True)).to_numpy()
    docs.loc[same & kept, FLUENCY_COLUMN] = 0.0
    todo = np.flatnonzero(kept & ~same & docs[FLUENCY_COLUMN].isna().to_numpy())
    if len(todo):
        docs.loc[todo, FLUENCY_COLUMN] = fluency_against_sources(protector, texts.iloc[todo].tolist(),
                                                                 protector.sources.iloc[todo].tolist())
    return docs


#: The plain words of each reason a document is held back (a failure's reason starts with its key).
WITHHELD_REASONS: tuple[tuple[str, str], ...] = (
    ("input row", "failed input validation"),
    ("floor: every move left meaning below", "every rewrite that protects it lost too much meaning or fluency"),
    ("fluency:", "it reads worse than its source beyond the fluency floor"),
    ("still leaks PII", "it still leaks personal information"),
    ("still holds a run of its source", "it still holds a run of its source text"),
    ("language:", "it is not in English, and the moves that rewrite other languages did not protect it"),
)


def withheld_by_reason(failures: pd.DataFrame) -> list[dict[str, Any]]:
    """The documents the output holds back (the failures), by plain reason with its count; the kept ones that still
    hold a run of their source are not among them (they are in P, and release leaves them out and counts them:
    ``documents.kept - documents.released``)."""
    counts: dict[str, int] = {}
    for reason in failures["reason"].astype(str) if len(failures) else []:
        words = next((w for key, w in WITHHELD_REASONS if reason.startswith(key)), reason)
        counts[words] = counts.get(words, 0) + 1
    return [{"reason": r, "count": n} for r, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _shown(figure: Mapping[str, Any]) -> str:
    """``0.71 [0.66, 0.75]`` (``n/a`` without a value)."""
    value = figure.get("value")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.3g} [{figure.get('ci_low', math.nan):.3g}, {figure.get('ci_high', math.nan):.3g}]"


def _plain(values: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-ready: nan -> None, numpy numbers -> Python's."""
    out = {}
    for k, v in values.items():
        if isinstance(v, (float, np.floating)):
            v = None if math.isnan(float(v)) else float(v)
        elif isinstance(v, np.integer):
            v = int(v)
        out[k] = v
    return out


def _protected_table(corpus: pd.DataFrame, docs: pd.DataFrame, kept: np.ndarray,
                     failed_flag: np.ndarray | None) -> pd.DataFrame:
    """The synthetic table's schema (one ok row per kept document) plus round, move, meaning and verbatim."""
    rows = corpus[kept].reset_index(drop=True)
    d = docs[kept].reset_index(drop=True)
    texts = d["text"].tolist()
    table = synthetic_table(rows, PROTECT_LABEL, [DEFAULT_VARIANT] * len(rows), texts, [None] * len(rows))
    table[ROUND_COLUMN] = d["round"].astype("Int64").to_numpy()
    table[MOVE_COLUMN] = d["move"].astype("string").to_numpy()
    table[MEANING_COLUMN] = d["meaning"].astype(float).to_numpy()
    table[FLUENCY_COLUMN] = d[FLUENCY_COLUMN].astype(float).to_numpy()
    table[VERBATIM_COLUMN] = pd.Series(d[VERBATIM_COLUMN].to_numpy(bool), dtype="boolean").to_numpy()
    if failed_flag is not None:
        table[FAILED_FLAG] = pd.Series(failed_flag[kept], dtype="boolean").to_numpy()
    return table


