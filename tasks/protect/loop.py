"""The protect loop: rewrite a corpus until a re-identification attacker it never trained against fails, at a
stated budget, keeping meaning.

Adversarial anonymisation as a feedback loop (Staab et al., "Language Models are Advanced Anonymizers", ICLR
2025; authorship obfuscation in the Mutant-X line): an attack tries, its evidence drives the next rewrite, until
it fails. What this loop adds is the judge: the histories are split per author (:mod:`tasks.privacy.history_split`);
the feedback attack profiles one half of each author's posts and steers the rewriting, the judge attacks profile
the other half with a different feature family and never give feedback, and the budget is decided on the judge's
worst case (overfitting to the feedback attacker is the known failure of these loops, and the summary says when
the two disagree).

A ``profiling`` bound adds the attributes the corpus names (``attr_<name>``): per attribute, a feedback and a judge
classifier train on their halves of the histories (each author's posts one unit, labelled with the author's value;
the histories must carry the column), the judge's a different linear model (:class:`_Profilers`), and predict each
protected timeline's author's value. The figure is the judge's worst attribute's advantage over the majority class
(Anonymeter's residual risk, :func:`tasks.privacy.profiling.advantage`); a timeline whose attribute the feedback
classifier infers is caught, and the words pulling it towards the true value are its evidence.

Round 0 is the starting move on every document (default: pseudonymised copy). Each later round takes the
timelines the feedback attack still attributes to their true author (ranked first) or whose attribute it still
infers (profiling bound) and the documents that still leak PII, and gives the next rung of the ladder
(:mod:`tasks.protect.moves`) to the ``docs_per_round`` documents of each such timeline that carry the most of the
feedback evidence (and to every leaking document); a move is kept only if the document's meaning against its source
(BERTScore F1) stays at or above the floor, otherwise the next rung is tried. Documents not caught are never
rewritten again. Each round is written to the cache as it ends, keyed by everything it depends on but the budget
and the number of rounds: a killed run resumes at the round it was in, a rerun is fully cached, and a changed
budget reuses the rounds already computed.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.corpus.schema import ATTR_PREFIX, CARRIED_COLUMNS, STATUS_OK, SYNTHETIC_COLUMNS, attr_columns
from tasks.errors import ConfigError, InputError
from tasks.intervals import wilson
from tasks.protect.files import (
    MOVE_COLUMN,
    PROFILING_ATTACK,
    PROTECT_LABEL,
    PROTECT_SUMMARY_KEYS,
    ROUND_COLUMN,
    ROUNDS_COLUMNS,
)
from tasks.protect.moves import (
    DEFAULT_LADDER,
    LLM_ANONYMIZE,
    MASK_EVIDENCE,
    PSEUDONYMIZE,
    Move,
    carried_by,
    llm_anonymize,
    mask_evidence,
)
from tasks.report.budgets import Bound, parse_budget
from tasks.store import fingerprint_config

#: The figures a protect budget can bound (risks: each must stay at or below its limit): the judge's worst
#: accuracy@1, its residual risk over chance 1/N (the figure a corpus of few authors can state a budget on:
#: with 6 authors chance alone is 0.17), the share of PII spans still in the text, and the judge classifier's
#: worst advantage over an attribute's majority class.
PROTECT_FIGURES: tuple[str, ...] = ("reidentification", "reidentification_risk", "pii_leakage", "profiling")
ON_FAIL: tuple[str, ...] = ("drop", "keep", "error")
#: Column of the protected table flagging documents kept although they failed (``on_fail: keep``).
FAILED_FLAG = "protect_failed"
MEANING_COLUMN = "meaning"
#: The source a round's output depends on (a change recomputes the rounds).
ROUND_CODE: tuple[str, ...] = ("tasks/protect", "tasks/privacy", "tasks/generate", "tasks/metrics/meaning.py")
#: Judge and feedback accuracies further apart than this are said in the summary (overfitting to feedback).
DISAGREEMENT = 0.2
#: Documents whose meaning is scored at once: their token embeddings are held in memory meanwhile (round 0 scores
#: every document: 17.8k at the article's scale).
_MEANING_CHUNK = 2_000


def parse_protect_budget(text: str, where: str = "--budget") -> list[Bound]:
    """``"reidentification<=0.10,pii_leakage<=0,profiling<=0.05"`` -> bounds; ConfigError naming the unknown
    figure or operator and the known ones."""
    return parse_budget(text, where, columns=PROTECT_FIGURES, operators=("<=",),
                        example="reidentification<=0.10,pii_leakage<=0")


@dataclass(frozen=True)
class ProtectSettings:
    """Everything a protect run depends on. The budget, ``max_rounds``, ``on_fail`` and ``decide_on`` decide when
    to stop and what to write, not what a round computes, so they are not in the rounds' cache key."""

    budget: str = "reidentification<=0.10"
    start: str = PSEUDONYMIZE
    ladder: tuple[Move, ...] = DEFAULT_LADDER
    max_rounds: int = 6
    meaning_floor: float = 0.80
    on_fail: str = "drop"
    decide_on: str = "bound"
    feedback: tuple[tuple[str, Mapping[str, Any]], ...] = (("stylometric", {}),)
    judge: tuple[tuple[str, Mapping[str, Any]], ...] = (("delta", {}), ("minhash", {}))
    adversaries: tuple[str, ...] = ("disjoint",)
    timeline_posts: int | None = None
    evidence_top: int = 20
    #: Per caught timeline and round, the documents carrying the most feedback evidence that are moved (None:
    #: every document of the timeline); documents carrying none are not moved for re-identification.
    docs_per_round: int | None = None
    pii_scope: str = "author"
    seed: int = 0
    llm: Mapping[str, Any] = field(default_factory=dict)  # the llm role's settings (endpoint, model) for llm-anonymize
    #: The profiling classifiers' LinearTextClassifier parameters. Feedback: tasks/privacy/profiling.py's own model
    #: (logistic regression on word 1-2-grams, C=1), whose per-class weights are the masking evidence. Judge: a
    #: linear SVM (squared hinge) on sublinear TF-IDF word 1-3-grams, C and class weighting chosen by
    #: cross-validation: another loss, n-gram range and regularisation, so what the masking of the feedback's words
    #: leaves still counts. Both read word tokens: LinearTextClassifier has no character n-grams.
    profiling_feedback: Mapping[str, Any] = field(default_factory=dict)
    profiling_judge: Mapping[str, Any] = field(default_factory=lambda: {
        "loss": "hinge", "ngram_range": (1, 3), "sublinear_tf": True, "C": "auto", "class_weight": "auto"})

    def __post_init__(self) -> None:
        if self.max_rounds < 0 or self.max_rounds > 100:
            raise ConfigError(f"max_rounds must be in [0, 100]; got {self.max_rounds}")
        if not 0.0 <= self.meaning_floor <= 1.0:
            raise ConfigError(f"meaning_floor must be in [0, 1]; got {self.meaning_floor}")
        if self.on_fail not in ON_FAIL:
            raise ConfigError(f"on_fail must be one of {', '.join(ON_FAIL)}; got {self.on_fail!r}")
        if self.docs_per_round is not None and self.docs_per_round < 1:
            raise ConfigError(f"docs_per_round must be at least 1 (or None: every document); got {self.docs_per_round}")
        if not self.feedback or not self.judge:
            raise ConfigError("protect needs at least one feedback attack and one judge attack")
        parse_protect_budget(self.budget, "budget")

    @property
    def bounds(self) -> list[Bound]:
        return parse_protect_budget(self.budget, "budget")

    @property
    def pii(self) -> bool:
        """Whether the budget bounds PII leakage (documents still leaking are then caught)."""
        return "pii_leakage" in {b.column for b in self.bounds}

    @property
    def profiling(self) -> bool:
        """Whether the budget bounds profiling (its classifiers then run and catch)."""
        return "profiling" in {b.column for b in self.bounds}

    def round_key(self) -> dict[str, Any]:
        """What a round's output depends on besides the corpus and the histories."""
        return {"start": self.start, "ladder": [m.as_config() for m in self.ladder], "floor": self.meaning_floor,
                "feedback": [[n, dict(p)] for n, p in self.feedback], "judge": [[n, dict(p)] for n, p in self.judge],
                "adversaries": list(self.adversaries), "timeline_posts": self.timeline_posts,
                "evidence_top": self.evidence_top, "docs_per_round": self.docs_per_round,
                "pii": self.pii,
                "pii_scope": self.pii_scope, "seed": self.seed,
                "profiling": {"feedback": dict(self.profiling_feedback), "judge": dict(self.profiling_judge)}
                if self.profiling else None,
                "llm": dict(self.llm) if any(m.name == LLM_ANONYMIZE for m in self.ladder) else {}}


@dataclass
class RoundState:
    """The documents after one round and every attack's per-timeline result on them."""

    round: int
    docs: pd.DataFrame       # doc_id, text, meaning, round, move, rung, blocked, leaked, spans
    attacks: pd.DataFrame    # role, attack, adversary, n_authors, group_id, author_id, correct, in_top10, ...
    rewritten: int
    seconds: float


@dataclass
class ProtectResult:
    """The protected table, the rounds table, the failures, the summary and the private pseudonym mapping."""

    table: pd.DataFrame
    rounds: pd.DataFrame
    failures: pd.DataFrame
    summary: dict[str, Any]
    mapping: pd.DataFrame
    met: bool


# ----------------------------------------------------------------------------------------------- attacks

def _no_evidence() -> pd.DataFrame:
    """An empty evidence frame (:data:`tasks.privacy.stylometric.EVIDENCE_COLUMNS`; imported late: numba)."""
    from tasks.privacy.stylometric import EVIDENCE_COLUMNS

    return pd.DataFrame(columns=EVIDENCE_COLUMNS)


@dataclass
class _Attacker:
    role: str
    attack: Any
    adversary: str
    prepared: Any


class _Attackers:
    """The feedback and judge attacks, prepared once against their half of the histories (profiles are kept in
    process memory by the attacks themselves) and re-run on changed timelines only."""

    def __init__(self, settings: ProtectSettings, halves: Mapping[str, str], corpus_docs: frozenset[str],
                 cache: Path) -> None:
        from tasks.privacy.attacks import build_attack

        self.entries: list[_Attacker] = []
        for role, specs in (("feedback", settings.feedback), ("judge", settings.judge)):
            for name, params in specs:
                attack = build_attack(name, params, root=f"protect.{role}.")
                index = None
                if attack.builds_index:
                    index = str(cache / f"{role}-{name}-{fingerprint_config(dict(params))[:12]}.index")
                    if not Path(index).exists():
                        attack.build_index(halves[role], index)
                for adversary in settings.adversaries:
                    held_out = corpus_docs if adversary == "disjoint" else None
                    prepared = attack.prepare(halves[role], adversary, held_out, index=index)
                    self.entries.append(_Attacker(role, attack, adversary, prepared))

    def run(self, timelines: pd.DataFrame) -> pd.DataFrame:
        """Per-timeline rows of every attack on ``timelines`` (doc_id, group_id, author_id, text)."""
        frames = []
        for e in self.entries:
            result = e.attack.run(e.prepared, timelines)
            per = result.per_timeline[["group_id", "author_id", "correct", "in_top10", "reciprocal_rank", "in_history"]]
            frames.append(per.assign(role=e.role, attack=e.attack.name, adversary=e.adversary,
                                     n_authors=int(result.summary.get("n_authors", result.summary.get(
                                         "n_history_users", 0)) or 0)))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @property
    def gives_evidence(self) -> bool:
        """Whether a feedback attack returns evidence."""
        return any(e.role == "feedback" and e.attack.returns_evidence for e in self.entries)

    def evidence(self, timelines: pd.DataFrame, top: int, authors: set[str]) -> pd.DataFrame:
        """The feedback attacks' evidence for ``timelines`` (those that return evidence), fitted for ``authors``
        (those round 0 left caught: each round scores against the same fit, which the attack keeps, so a
        round reads nothing from the histories; :func:`tasks.privacy.stylometric.stylometric_evidence`). With
        no timelines, the fit is made ahead."""
        frames = [e.attack.evidence(e.prepared, timelines, top, authors=authors) for e in self.entries
                  if e.role == "feedback" and e.attack.returns_evidence]
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else _no_evidence()


@dataclass
class _Profiler:
    role: str
    column: str
    adversary: str
    model: Any  # a fitted LinearTextClassifier

    @property
    def attack(self) -> str:
        return PROFILING_ATTACK + self.column.removeprefix(ATTR_PREFIX)


class _Profilers:
    """The attribute classifiers of a profiling bound, per attribute, role and adversary setting: trained on the
    authors of the role's half of the histories (each author's posts one unit, as a timeline is; the disjoint
    adversary without the corpus's documents), run on whole timelines, labelled with their author's value in
    the corpus."""

    def __init__(self, settings: ProtectSettings, halves: Mapping[str, str], corpus: pd.DataFrame,
                 histories: str) -> None:
        import pyarrow.parquet as pq

        from tasks.privacy.profiling import author_units
        from tasks.training.classifiers import LinearTextClassifier, TrainingDataError

        columns = attr_columns(corpus)
        self.labels = {col: author_units(corpus, col).set_index("unit")["y"].astype(str) for col in columns}
        corpus_docs = corpus["doc_id"].astype(str)
        params = {"feedback": settings.profiling_feedback, "judge": settings.profiling_judge}
        self.entries: list[_Profiler] = []
        for role in ("feedback", "judge"):
            half = pq.read_table(halves[role], columns=["author_id", "doc_id", "text", *columns]).to_pandas()
            for adversary in settings.adversaries:
                rows = half[~half["doc_id"].astype(str).isin(corpus_docs)] if adversary == "disjoint" else half
                for col in columns:
                    units = author_units(rows, col)
                    try:
                        model = LinearTextClassifier(seed=settings.seed, **params[role]).fit(units["text"],
                                                                                             units["y"].astype(str))
                    except TrainingDataError as exc:
                        raise InputError(f"the {role} half of the histories ({adversary} adversary) cannot train "
                                         f"the attribute classifier: {exc}", file=histories, column=col) from None
                    self.entries.append(_Profiler(role, col, adversary, model))

    def _predict(self, e: _Profiler, units: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
        """(the units whose author has a value, their values, the classifier's predictions)."""
        y = units["author_id"].map(self.labels[e.column])
        labelled = units[y.notna().to_numpy()]
        pred = e.model.predict(labelled["text"].tolist()) if len(labelled) else np.array([], str)
        return labelled, y.dropna().to_numpy(str), np.asarray(pred, str)

    def run(self, timelines: pd.DataFrame) -> pd.DataFrame:
        """Per-timeline rows of every classifier (correct, y_true, y_pred) on ``timelines``."""
        units = _timeline_units(timelines)
        frames = []
        for e in self.entries:
            labelled, y, pred = self._predict(e, units)
            frames.append(pd.DataFrame({"group_id": labelled.index.to_numpy(),
                                        "author_id": labelled["author_id"].to_numpy(), "correct": y == pred,
                                        "y_true": y, "y_pred": pred, "role": e.role,
                                        "attack": e.attack, "adversary": e.adversary}))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def evidence(self, timelines: pd.DataFrame, top: int) -> pd.DataFrame:
        """For each timeline whose attribute a feedback classifier infers, the words in it that pull that
        classifier towards the true value (seed 004, appendix B), strongest first."""
        from tasks.privacy.profiling import evidence_words

        units = _timeline_units(timelines)
        frames = []
        for e in self.entries:
            if e.role != "feedback":
                continue
            labelled, y, pred = self._predict(e, units)
            hit = y == pred
            words = evidence_words(e.model, labelled["text"][hit].tolist(), pred[hit].tolist(), top)
            frames.append(pd.DataFrame({"group_id": np.repeat(labelled.index[hit].to_numpy(), [len(w) for w in words]),
                                        "feature": [w for ws in words for w in ws], "kind": "word"}))
        return pd.concat(frames, ignore_index=True) if frames else _no_evidence()


def _timeline_units(timelines: pd.DataFrame) -> pd.DataFrame:
    """One row per timeline (indexed by group_id): its author and its posts' texts joined."""
    return timelines.groupby("group_id", sort=False).agg(author_id=("author_id", "first"), text=("text", "\n".join))


def _profiling_summary(part: pd.DataFrame) -> dict[str, Any]:
    """A profiling classifier over the timelines kept: accuracy (Wilson interval) as accuracy_at_1, the majority
    class's rate, and the advantage over it with its interval, of its predictions as an attacker who knows how
    the kept timelines were selected would read them (:func:`tasks.privacy.profiling.relabelled`: leaving out
    the timelines a feedback classifier got right would otherwise make a correlated judge look blind)."""
    from tasks.privacy.profiling import advantage, relabelled

    y, pred = part["y_true"].to_numpy(str), part["y_pred"].to_numpy(str)
    n, k = len(part), int((y == pred).sum())
    low, high = wilson(k, n)
    risk = advantage(y, relabelled(y, pred).astype(str))
    return {"accuracy_at_1": k / n if n else math.nan, "accuracy_at_1_ci_low": low, "accuracy_at_1_ci_high": high,
            "accuracy_at_10": math.nan, "n_timelines": n, "n_correct": k,
            # the control is the majority class (re-identification's: chance 1/N), in the same keys
            "chance": float(pd.Series(y).value_counts().iloc[0]) / n if n else math.nan,
            "risk": risk.value, "risk_ci_low": risk.ci_low, "risk_ci_high": risk.ci_high}


def _summaries(attacks: pd.DataFrame, keep: set[str] | None = None) -> list[dict[str, Any]]:
    """One summary per (role, attack, adversary) over the timelines kept: accuracy@1/@10 with intervals and n
    (profiling classifiers: :func:`_profiling_summary`)."""
    from tasks.privacy.attribution import attribution_summary

    out = []
    for (role, attack, adversary), part in attacks.groupby(["role", "attack", "adversary"], sort=False):
        if keep is not None:
            part = part[part["group_id"].isin(keep)]
        summary = _profiling_summary(part) if attack.startswith(PROFILING_ATTACK) else attribution_summary(
            part.reset_index(drop=True), int(part["n_authors"].max()) if len(part) else 0, n_resamples=1)
        out.append({"role": role, "attack": attack, "adversary": adversary, **summary})
    return out


def _residual(s: Mapping[str, Any]) -> tuple[float, float, float]:
    """A summary's residual risk over chance (value, ci_low, ci_high); an attack not above chance has risk 0
    (its interval still says how much it could be)."""
    value, low, high = (float(s.get(k, math.nan)) for k in ("risk", "risk_ci_low", "risk_ci_high"))
    if math.isnan(high):
        return math.nan, math.nan, math.nan
    return (0.0 if math.isnan(value) else max(0.0, value)), low, high


def _worst(summaries: list[dict[str, Any]], role: str, decide_on: str, figure: str = "accuracy") -> dict[str, Any]:
    """The role's worst case of ``figure``: the highest upper bound (or value, when deciding on the point).
    ``accuracy``: a re-identification attack's accuracy@1; ``risk``: its residual risk over chance;
    ``profiling``: an attribute classifier's advantage over the majority class, where an undefined advantage
    (the timelines all of one value) ranks worst, so it cannot pass a budget."""
    profiling = figure == "profiling"
    rows = [s for s in summaries if s["role"] == role and s["n_timelines"]
            and s["attack"].startswith(PROFILING_ATTACK) == profiling]
    if not rows:
        return {"value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0, "attack": None, "adversary": None}

    def of(s: Mapping[str, Any]) -> tuple[float, float, float]:
        return (s["accuracy_at_1"], s["accuracy_at_1_ci_low"], s["accuracy_at_1_ci_high"]) if figure == "accuracy" \
            else _residual(s)

    at, missing = (2 if decide_on == "bound" else 0), (math.inf if profiling else -1.0)
    s = max(rows, key=lambda r: (np.nan_to_num(of(r)[at], nan=missing), np.nan_to_num(of(r)[0], nan=missing)))
    value, low, high = of(s)
    return {"value": value, "ci_low": low, "ci_high": high, "n": s["n_timelines"], "attack": s["attack"],
            "adversary": s["adversary"], "accuracy": s["accuracy_at_1"], "chance": s.get("chance", math.nan)}


# ----------------------------------------------------------------------------------------------- the loop

def _timelines(corpus: pd.DataFrame, texts: pd.Series, timeline_posts: int | None) -> pd.DataFrame:
    from tasks.privacy.audit import attack_timelines

    frame = corpus[["doc_id", "author_id"]].assign(
        text=texts.to_numpy(), status=STATUS_OK,
        group_id=corpus["group_id"] if "group_id" in corpus.columns else pd.NA)
    return attack_timelines(frame, timeline_posts)


class _Protector:
    def __init__(self, corpus: pd.DataFrame, histories: str, settings: ProtectSettings, folder: Path,
                 log: Callable[[str], None], histories_fingerprint: str) -> None:
        self.corpus = corpus.reset_index(drop=True)
        self.sources = self.corpus["text"].astype(str)
        self.settings = settings
        self.folder = folder
        self.log = log
        self.histories = histories
        self.histories_fingerprint = histories_fingerprint
        self._attackers: _Attackers | None = None
        self._profilers: _Profilers | None = None
        self._halves: dict[str, str] | None = None
        self._strategies: dict[str, Any] = {}
        self._detector: Any = None
        self._embeddings: Any = None
        self._llm: Any = None
        self.pii = settings.pii
        self.profiling = settings.profiling
        self.mappings: list[pd.DataFrame] = []
        self.doc_timeline = _timelines(self.corpus, self.sources, settings.timeline_posts).set_index("doc_id")["group_id"]
        self.evidence_authors: set[str] | None = None  # fixed by round 0 (:meth:`fit_evidence`)

    # -- components, built on first use (a fully cached rerun builds none of them)
    def halves(self) -> dict[str, str]:
        """The feedback and judge halves of the histories (split once, kept beside the rounds)."""
        if self._halves is None:
            from tasks.privacy.history_split import split_histories_by_author

            halves_dir = self.folder.parent / "histories"
            halves_dir.mkdir(parents=True, exist_ok=True)
            stem = f"{self.histories_fingerprint[:16]}-{self.settings.seed}"  # the caller's: not hashed again
            feedback, judge = halves_dir / f"{stem}-feedback.parquet", halves_dir / f"{stem}-judge.parquet"
            if not (feedback.exists() and judge.exists()):
                split_histories_by_author(self.histories, feedback, judge, seed=self.settings.seed)
            self._halves = {"feedback": str(feedback), "judge": str(judge)}
        return self._halves

    def attackers(self) -> _Attackers:
        if self._attackers is None:
            docs = frozenset(self.corpus["doc_id"].astype(str))
            self._attackers = _Attackers(self.settings, self.halves(), docs, self.folder)
        return self._attackers

    def profilers(self) -> _Profilers:
        if self._profilers is None:
            self._profilers = _Profilers(self.settings, self.halves(), self.corpus, self.histories)
        return self._profilers

    def attack(self, timelines: pd.DataFrame) -> pd.DataFrame:
        """Every attack's per-timeline rows on ``timelines``: the re-identification attacks and, with a profiling
        bound, the attribute classifiers (their rows have no rank: in_top10 and in_history empty)."""
        frames = [self.attackers().run(timelines)] + ([self.profilers().run(timelines)] if self.profiling else [])
        frames = [f for f in frames if len(f)]
        out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        return out.astype({c: "boolean" for c in ("in_top10", "in_history") if c in out.columns})

    def evidence(self, timelines: pd.DataFrame) -> pd.DataFrame:
        """The feedback attacks' evidence for ``timelines`` and, with a profiling bound, the feedback classifiers'."""
        top = self.settings.evidence_top
        assert self.evidence_authors is not None, "round 0 fixes whose evidence is fitted"
        frames = [self.attackers().evidence(timelines, top, self.evidence_authors)] + (
            [self.profilers().evidence(timelines, top)] if self.profiling else [])
        return pd.concat(frames, ignore_index=True).drop_duplicates(ignore_index=True)

    def detector(self) -> Any:
        if self._detector is None:
            from tasks.privacy.pii import PiiDetector

            self._detector = PiiDetector()
        return self._detector

    def meaning(self, candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
        from tasks.metrics.meaning import bertscore
        from tasks.models.embeddings import EmbeddingCache

        out = np.ones(len(candidates))  # a text equal to its source keeps all of its meaning
        differ = np.flatnonzero([c != r for c, r in zip(candidates, references, strict=True)])
        if len(differ):
            if self._embeddings is None:  # sources and earlier rounds' texts are embedded once
                self._embeddings = EmbeddingCache(self.folder.parent / "embeddings.sqlite")
            for part in np.array_split(differ, -(-len(differ) // _MEANING_CHUNK)):  # token embeddings of a part held
                out[part] = bertscore([candidates[i] for i in part], [references[i] for i in part],
                                      cache=self._embeddings, cache_candidates=False).scores["bertscore_f1"].to_numpy(float)
        return out

    def leaks(self, idx: np.ndarray, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(source PII spans, spans still in the text) per document."""
        from tasks.metrics.pii import pii_counts

        if not self.pii or not len(idx):
            return np.zeros(len(idx), np.int64), np.zeros(len(idx), np.int64)
        pairs = pd.DataFrame({"doc_id": self.corpus["doc_id"].iloc[idx].to_numpy(), "strategy": PROTECT_LABEL,
                              "variant": "first", "status": STATUS_OK, "source": self.sources.iloc[idx].to_numpy(),
                              "text": list(texts)})
        counts = pii_counts(pairs, self.detector())
        totals = counts[counts["entity"] == "all"]
        return totals["source_spans"].fillna(0).to_numpy(np.int64), totals["leaked"].fillna(0).to_numpy(np.int64)

    # -- moves
    def apply(self, move: Move, idx: np.ndarray, texts: pd.Series, evidence: pd.DataFrame, round_: int) -> list[str | None]:
        """The move's output for each document ``idx`` (None where it failed or changed nothing)."""
        rows = self.corpus.iloc[idx].assign(text=texts.iloc[idx].to_numpy())
        if move.name == PSEUDONYMIZE:
            from tasks.generate.pseudonymize import pseudonymize_corpus

            replaced, mapping = pseudonymize_corpus(rows, scope=self.settings.pii_scope, seed=self.settings.seed,
                                                    detector=self.detector() if self.pii else None)
            self.mappings.append(mapping)
            out = replaced["text"].astype(str).tolist()
        elif move.name in (MASK_EVIDENCE, LLM_ANONYMIZE):
            by_group = {g: list(zip(f["feature"], f["kind"], strict=True))
                        for g, f in evidence.groupby("group_id", sort=False)} if len(evidence) else {}
            features = [by_group.get(self.doc_timeline.get(d), []) for d in rows["doc_id"]]
            if move.name == MASK_EVIDENCE:
                out = [mask_evidence(t, f) for t, f in zip(rows["text"].astype(str), features, strict=True)]
            else:
                if self._llm is None:
                    from tasks.models.llm import llm_backend_for

                    self._llm = llm_backend_for("llm", dict(self.settings.llm))
                    if type(self._llm).__name__ == "TransformersBackend":
                        self.log("llm-anonymize: no LLM endpoint set; the small offline model on CPU rewrites "
                                 "(slower and weaker than a served model)")
                out = llm_anonymize(rows["text"].astype(str).tolist(), features, self._llm,
                                    seed=self.settings.seed + round_)
        else:
            from tasks.generate.base import build_strategy, generate_synthetic

            key = fingerprint_config(move.as_config())
            if key not in self._strategies:
                self._strategies[key] = build_strategy(move.name, dict(move.params),
                                                       root=f"protect.ladder.{move.name}").fit(self.corpus)
            table = generate_synthetic(self._strategies[key], rows, seed=self.settings.seed + round_)
            first = table.drop_duplicates("doc_id", keep="first").set_index("doc_id")
            first = first.reindex(rows["doc_id"])
            out = [t if s == STATUS_OK else None for t, s in zip(first["text"], first["status"], strict=True)]
        from tasks.generate.base import is_unchanged

        return [o if isinstance(o, str) and o.strip() and not is_unchanged(t, o) else None
                for o, t in zip(out, rows["text"].astype(str), strict=True)]

    # -- rounds
    def round_zero(self) -> RoundState:
        started = time.perf_counter()
        n = len(self.corpus)
        idx = np.arange(n)
        start = Move(self.settings.start)
        texts = self.sources.copy()
        out = self.apply(start, idx, texts, pd.DataFrame(), 0)
        new = pd.Series([o if o is not None else t for o, t in zip(out, texts, strict=True)])
        meaning = self.meaning(new.tolist(), self.sources.tolist())
        spans, leaked = self.leaks(idx, new.tolist())
        docs = pd.DataFrame({"doc_id": self.corpus["doc_id"].astype(str), "text": new, "meaning": meaning,
                             "round": 0, "move": start.label, "rung": 0, "blocked": False,
                             "spans": spans, "leaked": leaked})
        attacks = self.attack(_timelines(self.corpus, new, self.settings.timeline_posts))
        state = RoundState(0, docs, attacks, int(sum(o is not None for o in out)), 0.0)
        self.fit_evidence(state, ahead=self.settings.max_rounds > 0)  # so no later round reads the histories
        state.seconds = time.perf_counter() - started
        return state

    def fit_evidence(self, zero: RoundState, *, ahead: bool) -> None:
        """Fix whose evidence the feedback attacks fit: the authors of the documents round 0 left caught (a
        document not caught then is never moved again, so no later round asks for anyone else's), the same
        whether round 0 was computed or read back; with ``ahead`` (and a later round that uses evidence), fit
        it now."""
        self.evidence_authors = set(self.corpus["author_id"].iloc[self.caught(zero)].dropna().astype(str))
        if ahead and self.needs_evidence and self.evidence_authors:
            self.attackers().evidence(pd.DataFrame(columns=["group_id", "author_id", "text"]), 1,
                                      self.evidence_authors)

    @property
    def ranks_documents(self) -> bool:
        """Whether a round moves only each caught timeline's most evidential documents (``docs_per_round``,
        with evidence to rank them by)."""
        return self.settings.docs_per_round is not None and (self.attackers().gives_evidence or self.profiling)

    @property
    def needs_evidence(self) -> bool:
        """Whether later rounds ask the feedback attacks for evidence (a move masks it, or the documents moved
        are ranked by it)."""
        return self.ranks_documents or any(m.name in (MASK_EVIDENCE, LLM_ANONYMIZE) for m in self.settings.ladder)

    def caught(self, state: RoundState) -> np.ndarray:
        """Positions of the documents that still give their author away (feedback), their author's attribute
        (feedback classifiers, with a profiling bound) or still leak PII."""
        fb = state.attacks[(state.attacks["role"] == "feedback") & state.attacks["correct"].astype(bool)]
        timelines = set(fb["group_id"])
        hit = self.doc_timeline.reindex(state.docs["doc_id"]).isin(timelines).to_numpy()
        if self.pii:
            hit |= state.docs["leaked"].to_numpy() > 0
        return np.flatnonzero(hit)

    def most_evidential(self, todo: np.ndarray, texts: pd.Series, evidence: pd.DataFrame,
                        leaking: np.ndarray) -> np.ndarray:
        """Of the documents ``todo``, per timeline the ``docs_per_round`` that carry the most of its evidence (the
        sum of the contributions of the features they hold, :func:`tasks.protect.moves.carried_by`; a feature without
        one, a profiling classifier's word, weighs 1), ties by position, none that carries nothing; with a
        pii_leakage bound, every document still leaking as well."""
        groups = self.doc_timeline.reindex(self.corpus["doc_id"].iloc[todo]).to_numpy()
        weight = evidence["contribution"].fillna(1.0) if "contribution" in evidence.columns else \
            pd.Series(1.0, index=evidence.index)
        features = {g: list(zip(f["feature"], f["kind"], weight[f.index], strict=True))
                    for g, f in evidence.groupby("group_id", sort=False)} if len(evidence) else {}
        score = np.zeros(len(todo))
        for g, at in pd.Series(np.arange(len(todo))).groupby(groups, sort=False).indices.items():
            timeline = [texts.iat[i] for i in todo[at]]
            for feature, kind, w in features.get(g, []):
                score[at[carried_by(timeline, feature, kind)]] += w
        order = np.lexsort((todo, -score, pd.factorize(groups)[0]))  # per timeline: most evidence, then position
        rank = np.empty(len(todo), np.int64)
        rank[order] = pd.Series(groups[order]).groupby(groups[order], sort=False).cumcount().to_numpy()
        keep = (rank < self.settings.docs_per_round) & (score > 0)
        if self.pii:
            keep |= leaking[todo]
        return todo[keep]

    def next_round(self, prev: RoundState, k: int) -> RoundState:
        started = time.perf_counter()
        docs = prev.docs.copy()
        caught = self.caught(prev)
        ladder = self.settings.ladder
        todo = caught[docs["rung"].to_numpy()[caught] < len(ladder)]
        evidence = pd.DataFrame()
        if self.needs_evidence and len(todo):
            groups = set(self.doc_timeline.reindex(docs["doc_id"].iloc[todo]))
            timelines = _timelines(self.corpus, docs["text"], self.settings.timeline_posts)
            evidence = self.evidence(timelines[timelines["group_id"].isin(groups)])
        changed = np.zeros(len(docs), bool)
        texts = docs["text"].astype(str)
        if self.ranks_documents:
            todo = self.most_evidential(todo, texts, evidence, docs["leaked"].to_numpy() > 0)
        while len(todo):
            rung = docs["rung"].to_numpy().copy()  # this pass's rungs (the frame's change as moves fail)
            tried_later = []
            for r in sorted(set(rung[todo])):
                idx = todo[rung[todo] == r]
                move = ladder[r]
                out = self.apply(move, idx, texts, evidence, k)
                moved = np.array([o is not None for o in out])
                candidates = [o for o in out if o is not None]
                scores = self.meaning(candidates, self.sources.iloc[idx[moved]].tolist())
                keep = np.zeros(len(idx), bool)
                keep[np.flatnonzero(moved)] = scores >= self.settings.meaning_floor
                kept_idx = idx[keep]
                if len(kept_idx):
                    new_texts = [c for c, ok in zip(candidates, scores >= self.settings.meaning_floor, strict=True) if ok]
                    texts.iloc[kept_idx] = new_texts
                    docs.loc[kept_idx, "text"] = new_texts
                    docs.loc[kept_idx, "meaning"] = scores[scores >= self.settings.meaning_floor]
                    docs.loc[kept_idx, "round"] = k
                    docs.loc[kept_idx, "move"] = move.label
                    changed[kept_idx] = True
                docs.loc[idx, "rung"] = r + 1
                tried_later += [i for i in idx[~keep] if r + 1 < len(ladder)]
                blocked = idx[~keep & (np.full(len(idx), r + 1 >= len(ladder)))]
                docs.loc[blocked, "blocked"] = True
            todo = np.array(sorted(tried_later), dtype=np.int64)
        idx = np.flatnonzero(changed)
        if self.pii and len(idx):
            spans, leaked = self.leaks(idx, docs["text"].iloc[idx].tolist())
            docs.loc[idx, "spans"], docs.loc[idx, "leaked"] = spans, leaked
        attacks = prev.attacks
        if len(idx):
            groups = set(self.doc_timeline.reindex(docs["doc_id"].iloc[idx]))
            timelines = _timelines(self.corpus, docs["text"], self.settings.timeline_posts)
            fresh = self.attack(timelines[timelines["group_id"].isin(groups)])
            attacks = pd.concat([attacks[~attacks["group_id"].isin(groups)], fresh], ignore_index=True)
        return RoundState(k, docs, attacks, int(changed.sum()), time.perf_counter() - started)

    # -- cache
    def _paths(self, k: int) -> tuple[Path, Path, Path]:
        return (self.folder / f"round-{k:03d}.docs.parquet", self.folder / f"round-{k:03d}.attacks.parquet",
                self.folder / f"round-{k:03d}.json")

    def load(self, k: int) -> RoundState | None:
        docs, attacks, meta = self._paths(k)
        if not meta.exists():  # written last: a round without it is not complete
            return None
        info = json.loads(meta.read_text())
        return RoundState(k, pd.read_parquet(docs), pd.read_parquet(attacks), info["rewritten"], info["seconds"])

    def save(self, state: RoundState) -> None:
        from tasks.corpus.importers import write_parquet_atomic

        docs, attacks, meta = self._paths(state.round)
        self.folder.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(state.docs, docs)
        write_parquet_atomic(state.attacks, attacks)
        tmp = meta.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"rewritten": state.rewritten, "seconds": state.seconds}))
        os.replace(tmp, meta)


def _round_rows(state: RoundState, summaries: list[dict[str, Any]], meaning: float) -> list[dict[str, Any]]:
    return [{"round": state.round, "attack": s["attack"], "adversary": s["adversary"], "role": s["role"],
             "accuracy_at_1": s["accuracy_at_1"], "accuracy_at_1_ci_low": s["accuracy_at_1_ci_low"],
             "accuracy_at_1_ci_high": s["accuracy_at_1_ci_high"], "accuracy_at_10": s["accuracy_at_10"],
             "n_timelines": s["n_timelines"], "chance": s.get("chance", math.nan),
             **dict(zip(("residual_risk", "residual_risk_ci_low", "residual_risk_ci_high"), _residual(s), strict=True)),
             "meaning": meaning, "documents_rewritten": state.rewritten,
             "seconds": state.seconds} for s in summaries]


def _decide(bounds: list[Bound], figures: Mapping[str, Mapping[str, Any]], decide_on: str) -> tuple[bool, list[str]]:
    """(every bound met, words for each bound) on the interval's upper bound (or the value)."""
    met, words = True, []
    for b in bounds:
        f = figures[b.column]
        value = f["value"]
        checked = f["ci_high"] if decide_on == "bound" and f.get("ci_high") is not None and \
            not math.isnan(f["ci_high"]) else value
        ok = value is not None and not math.isnan(value) and checked <= b.limit
        met &= ok
        shown = f"{value:.3g}" + (f" [{f['ci_low']:.3g}, {f['ci_high']:.3g}]" if f.get("ci_high") is not None
                                  and not math.isnan(f["ci_high"]) else "")
        words.append(f"{b.column} {shown} {'<=' if ok else '>'} {b.limit:g}")
    return met, words


def _figures(state: RoundState, summaries: list[dict[str, Any]], decide_on: str, pii: bool,
             kept: np.ndarray | None = None, profiling: bool = False) -> dict[str, dict[str, Any]]:
    figures = {"reidentification": _worst(summaries, "judge", decide_on),
               "reidentification_risk": _worst(summaries, "judge", decide_on, figure="risk")}
    if pii:
        docs = state.docs if kept is None else state.docs[kept]
        k, n = int(docs["leaked"].sum()), int(docs["spans"].sum())
        low, high = wilson(k, n)
        figures["pii_leakage"] = {"value": k / n if n else 0.0, "ci_low": low if n else 0.0,
                                  "ci_high": high if n else 0.0, "n": n, "attack": "pii", "adversary": None}
    if profiling:
        figures["profiling"] = _worst(summaries, "judge", decide_on, figure="profiling")
    return figures


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
                   invalid: pd.DataFrame | None = None) -> ProtectResult:
    """Run the loop on ``corpus`` (the corpus schema) against ``histories`` (a history parquet file) and build
    the protected table, the rounds table, the failures and the summary. Rounds are cached under ``cache_dir``
    keyed by the fingerprints of the corpus and the histories and :meth:`ProtectSettings.round_key`.
    ``invalid``: the input rows that failed validation (:data:`tasks.corpus.schema.FAILURE_COLUMNS`), recorded
    among the failures so that every input row ends in the output or in a failure with its reason."""
    from tasks.metrics.base import make_signature
    from tasks.store import code_version, tool_version

    key = fingerprint_config({"corpus": corpus_fingerprint, "histories": histories_fingerprint,
                              "code": code_version(*ROUND_CODE), **settings.round_key()})[:24]
    folder = Path(cache_dir) / key
    _check_disjoint_histories(corpus, os.fspath(histories), settings)
    _check_profiling(corpus, os.fspath(histories), settings)
    protector = _Protector(corpus, os.fspath(histories), settings, folder, log, histories_fingerprint)
    bounds = settings.bounds
    rounds: list[dict[str, Any]] = []
    state: RoundState | None = None
    met, words, stop = False, [], "rounds ran out"
    for k in range(settings.max_rounds + 1):
        cached = protector.load(k)
        if cached is not None:
            state = cached
            if k == 0:
                protector.fit_evidence(cached, ahead=False)  # fitted when a later round first asks
        else:
            state = protector.round_zero() if state is None else protector.next_round(state, k)
            protector.save(state)
        summaries = _summaries(state.attacks)
        ok = state.docs["meaning"].to_numpy(float)
        rounds += _round_rows(state, summaries, float(np.mean(ok)) if len(ok) else math.nan)
        figures = _figures(state, summaries, settings.decide_on, protector.pii, profiling=protector.profiling)
        met, words = _decide(bounds, figures, settings.decide_on)
        feedback = _worst(summaries, "feedback", "point")
        log(f"round {k}: judge {', '.join(words)}; feedback {feedback['attack']} {feedback['value']:.3g}; "
            f"meaning {np.mean(ok):.3f}; {state.rewritten} rewritten ({state.seconds:.1f} s"
            f"{', cached' if cached is not None else ''})")
        if met:
            stop = "budget met"
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
    return _result(protector, state, rounds, met, stop, key, tool_version(), make_signature, invalid)


def _result(protector: _Protector, state: RoundState, rounds: list[dict[str, Any]], met_in_loop: bool, stop: str,
            key: str, tool_version: str, make_signature: Callable[..., str],
            invalid: pd.DataFrame | None = None) -> ProtectResult:
    settings, corpus = protector.settings, protector.corpus
    caught = np.zeros(len(corpus), bool)
    if not met_in_loop:
        caught[protector.caught(state)] = True
    docs = state.docs
    reason = np.where(docs["blocked"].to_numpy() & caught,
                      f"floor: every move left {MEANING_COLUMN} below {settings.meaning_floor:g}",
                      f"still caught after {state.round} round(s): {stop}")
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
    kept_timelines = set(protector.doc_timeline.reindex(docs["doc_id"][kept]))
    dropped_timelines = set(protector.doc_timeline.reindex(docs["doc_id"][~kept]))
    summaries = _summaries(state.attacks, kept_timelines - dropped_timelines)
    figures = _figures(state, summaries, settings.decide_on, protector.pii, kept, profiling=protector.profiling)
    met, words = _decide(settings.bounds, figures, settings.decide_on)
    table = _protected_table(corpus, docs, kept, caught if settings.on_fail == "keep" else None)
    meaning = table[MEANING_COLUMN].to_numpy(float)
    from tasks.intervals import bootstrap

    low, high = bootstrap(meaning, seed=settings.seed) if len(meaning) else (math.nan, math.nan)
    last = _summaries(state.attacks)  # before any document is left out: where the loop itself stopped
    feedback, judge = _worst(last, "feedback", "point"), _worst(last, "judge", "point")
    rewritten = int((table[ROUND_COLUMN] > 0).sum()) if len(table) else 0
    verdict = (f"protect: judge {', '.join(words)} after {state.round} round(s), BERTScore "
               f"{np.mean(meaning) if len(meaning) else math.nan:.2f}, {rewritten}/{len(corpus)} rewritten after "
               f"round 0, {n_caught} failed ({settings.on_fail})"
               + (f", {len(failures) - n_caught} input rows invalid" if len(failures) > n_caught else ""))
    notes = []
    if not met:
        notes.append(f"budget not met: {stop}")
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
        "tool_version": tool_version,
        "signature": make_signature("protect", key=key, budget=settings.budget, decide_on=settings.decide_on,
                                    on_fail=settings.on_fail),
        "budget": settings.budget, "decide_on": settings.decide_on, "met": bool(met), "rounds": int(state.round),
        "stop": stop, "start": settings.start, "ladder": [m.label for m in settings.ladder],
        "meaning_metric": "bertscore_f1", "meaning_floor": settings.meaning_floor, "on_fail": settings.on_fail,
        "feedback": [n for n, _ in settings.feedback], "judge": [n for n, _ in settings.judge],
        "adversaries": list(settings.adversaries),
        "figures": {k: _plain(v) for k, v in figures.items()},
        "feedback_worst": _plain(feedback), "judge_worst_before_failures_left_out": _plain(judge),
        "meaning": _plain({"value": float(np.mean(meaning)) if len(meaning) else math.nan, "ci_low": low,
                           "ci_high": high, "n": len(meaning)}),
        "documents": {"input": len(corpus), "kept": len(table), "rewritten": rewritten, "failed": n_caught,
                      "invalid": len(failures) - n_caught},
        "moves": {str(k): int(v) for k, v in table[MOVE_COLUMN].value_counts().items()} if len(table) else {},
        "notes": notes, "verdict": verdict + ("; " + "; ".join(notes) if notes else ""),
    }
    assert set(PROTECT_SUMMARY_KEYS) <= set(summary), set(PROTECT_SUMMARY_KEYS) - set(summary)
    mapping = pd.concat(protector.mappings, ignore_index=True) if protector.mappings else pd.DataFrame()
    return ProtectResult(table, pd.DataFrame(rounds, columns=ROUNDS_COLUMNS), failures, summary, mapping, bool(met))


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
    """The synthetic table's schema (one ok row per kept document) plus round, move and meaning."""
    from tasks.generate.base import is_unchanged

    rows = corpus[kept].reset_index(drop=True)
    d = docs[kept].reset_index(drop=True)
    table = pd.DataFrame({"doc_id": rows["doc_id"].astype("string"),
                          "strategy": pd.Series([PROTECT_LABEL] * len(rows), dtype="string"),
                          "variant": pd.Series(["first"] * len(rows), dtype="string"),
                          "text": d["text"].astype("string")})
    for col in CARRIED_COLUMNS:
        values = rows[col] if col in rows.columns else pd.Series([pd.NA] * len(rows))
        table[col] = values.astype("Int64" if col == "position" else "string").to_numpy()
    table["status"] = pd.Series([STATUS_OK] * len(rows), dtype="string")
    table["reason"] = pd.Series([pd.NA] * len(rows), dtype="string")
    table["unchanged"] = pd.Series([is_unchanged(s, t) for s, t in zip(rows["text"], d["text"], strict=True)],
                                   dtype="boolean")
    for col in attr_columns(rows):
        table[col] = rows[col].astype("string").to_numpy()
    table[ROUND_COLUMN] = d["round"].astype("Int64").to_numpy()
    table[MOVE_COLUMN] = d["move"].astype("string").to_numpy()
    table[MEANING_COLUMN] = d["meaning"].astype(float).to_numpy()
    if failed_flag is not None:
        table[FAILED_FLAG] = pd.Series(failed_flag[kept], dtype="boolean").to_numpy()
    assert list(table.columns[:len(SYNTHETIC_COLUMNS)]) == list(SYNTHETIC_COLUMNS)
    return table


