"""The protect loop's attackers and how their results are read: the re-identification attacks and attribute
classifiers of each role, prepared once against the histories of that role, their per-timeline rows summarised
per (role, attack, adversary), and the worst case of a role as a budget figure.

Roles: ``feedback`` (one half of each author's history; its evidence steers the moves), ``judge`` (the other half;
decides when the loop stops, never gives feedback), ``check`` (round 0 only: the registered attacks a narrowed judge
leaves out, on the judge's half, so the summary can say when the judge is weaker than the strongest attack) and
``certificate`` (after the last round: every registered attack on the full histories, which is what a real
adversary holds; it decides the verdict, the exit code and what a release states).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.budgets import worst_index
from tasks.corpus.schema import ATTR_PREFIX, attr_columns
from tasks.errors import InputError
from tasks.intervals import wilson
from tasks.privacy.attribution import attribution_summary
from tasks.privacy.profiling import advantage, author_units, evidence_words, relabelled
from tasks.protect.files import PROFILING_ATTACK
from tasks.store import fingerprint_config
from tasks.training.classifiers import LinearTextClassifier, TrainingDataError

#: The columns of the per-timeline attack rows every role writes (profiling rows add y_true, y_pred).
ATTACK_ROW_COLUMNS = ["group_id", "author_id", "correct", "in_top10", "reciprocal_rank", "in_history"]


def no_evidence() -> pd.DataFrame:
    """An empty evidence frame (:data:`tasks.privacy.stylometric.evidence.EVIDENCE_COLUMNS`; imported late:
    numba)."""
    # deferred: loads llvmlite, numba, yaml only when this runs
    from tasks.privacy.stylometric.evidence import EVIDENCE_COLUMNS

    return pd.DataFrame(columns=EVIDENCE_COLUMNS)


@dataclass
class _Attacker:
    role: str
    attack: Any
    adversary: str
    prepared: Any


@dataclass(frozen=True)
class RoleSpec:
    """One role's attacks: (name, parameters) each, the history file they profile, the adversary settings, and
    ``shards``: files that together hold every post of ``histories`` once (the halves), which an attack that builds
    an index signs one by one and reads together: the halves' indexes serve the full histories too."""

    role: str
    attacks: tuple[tuple[str, Mapping[str, Any]], ...]
    histories: str
    adversaries: tuple[str, ...]
    shards: tuple[str, ...] = ()


#: Attacks prepared at once. Much of a preparation keeps one core (liblinear's refit after its C grid, a numba
#: profile pass): two side by side fill a 2-core machine. Two preparations of one attack wait for each other (its
#: history memo builds one profile at a time), so this overlaps different attacks only.
PREPARE_THREADS = 2


class Attackers:
    """The re-identification attacks of some roles, prepared once against their histories (profiles are kept
    in process memory by the attacks themselves) and run on changed timelines only."""

    def __init__(self, specs: Sequence[RoleSpec], corpus_docs: frozenset[str], cache: Path,
                 threads: int = PREPARE_THREADS) -> None:
        # deferred: loads llvmlite, numba, yaml only when this runs
        from concurrent.futures import ThreadPoolExecutor

        from tasks.privacy.attacks import build_attack

        jobs: list[tuple[str, Any, str, frozenset[str] | None, str, str | tuple[str, ...] | None]] = []
        for spec in specs:
            for name, params in spec.attacks:
                attack = build_attack(name, params, root=f"protect.{spec.role}.")
                index: str | tuple[str, ...] | None = None
                if attack.builds_index:  # one index per history file (named by it), whichever role reads it
                    built = []
                    for histories in spec.shards or (spec.histories,):
                        path = cache / f"{Path(histories).stem}-{name}-{fingerprint_config(dict(params))[:12]}.index"
                        if not path.exists():
                            attack.build_index(histories, path)
                        built.append(str(path))
                    index = built[0] if len(built) == 1 else tuple(built)
                for adversary in spec.adversaries:
                    held_out = corpus_docs if adversary == "disjoint" else None
                    jobs.append((spec.role, attack, adversary, held_out, spec.histories, index))

        def prepared(job: tuple) -> _Attacker:
            role, attack, adversary, held_out, histories, index = job
            return _Attacker(role, attack, adversary, attack.prepare(histories, adversary, held_out, index=index))

        if threads <= 1 or len(jobs) <= 1:
            self.entries = [prepared(job) for job in jobs]
        else:
            with ThreadPoolExecutor(max_workers=min(threads, len(jobs))) as pool:
                self.entries = list(pool.map(prepared, jobs))  # in the jobs' order; the first error is raised

    def run(self, timelines: pd.DataFrame, roles: Sequence[str] | None = None) -> pd.DataFrame:
        """Per-timeline rows of every attack (of ``roles``, default all) on ``timelines`` (doc_id, group_id,
        author_id, text)."""
        frames = []
        for e in self.entries:
            if roles is not None and e.role not in roles:
                continue
            result = e.attack.run(e.prepared, timelines)
            per = result.per_timeline[ATTACK_ROW_COLUMNS]
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
        round reads nothing from the histories; :func:`tasks.privacy.stylometric.evidence.stylometric_evidence`;
        the classifier's is its fitted model's, :func:`tasks.privacy.classifier.exact.exact_evidence`). With no
        timelines, the fit is made ahead. Attacks whose evidence is one computation (the two-stage classifier's is
        the stylometric attack's) are asked once."""
        asked: dict[Hashable, _Attacker] = {}
        for e in self.entries:
            if e.role == "feedback" and e.attack.returns_evidence:
                asked.setdefault(e.attack.evidence_key(e.prepared), e)
        frames = [e.attack.evidence(e.prepared, timelines, top, authors=authors) for e in asked.values()]
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else no_evidence()


@dataclass
class _Profiler:
    role: str
    column: str
    adversary: str
    model: Any  # a fitted LinearTextClassifier

    @property
    def attack(self) -> str:
        return PROFILING_ATTACK + self.column.removeprefix(ATTR_PREFIX)


class Profilers:
    """The attribute classifiers of a profiling bound, per attribute, role and adversary setting: trained on the
    authors of the role's histories (each author's posts one unit, as a timeline is; the disjoint adversary
    without the corpus's documents), run on whole timelines, labelled with their author's value in the
    corpus. ``roles``: role -> (history file, the classifier's parameters)."""

    def __init__(self, roles: Mapping[str, tuple[str, Mapping[str, Any]]], adversaries: Sequence[str],
                 corpus: pd.DataFrame, seed: int) -> None:
        import pyarrow.parquet as pq

        columns = attr_columns(corpus)
        self.labels = {col: author_units(corpus, col).set_index("unit")["y"].astype(str) for col in columns}
        corpus_docs = corpus["doc_id"].astype(str)
        self.entries: list[_Profiler] = []
        for role, (histories, params) in roles.items():
            half = pq.read_table(histories, columns=["author_id", "doc_id", "text", *columns]).to_pandas()
            for adversary in adversaries:
                rows = half[~half["doc_id"].astype(str).isin(corpus_docs)] if adversary == "disjoint" else half
                for col in columns:
                    units = author_units(rows, col)
                    try:
                        model = LinearTextClassifier(seed=seed, **params).fit(units["text"], units["y"].astype(str))
                    except TrainingDataError as exc:
                        raise InputError(f"the {role} histories ({adversary} adversary) cannot train the attribute "
                                         f"classifier: {exc}", file=histories, column=col) from None
                    self.entries.append(_Profiler(role, col, adversary, model))

    def _predict(self, e: _Profiler, units: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
        """(the units whose author has a value, their values, the classifier's predictions)."""
        y = units["author_id"].map(self.labels[e.column])
        labelled = units[y.notna().to_numpy()]
        pred = e.model.predict(labelled["text"].tolist()) if len(labelled) else np.array([], str)
        return labelled, y.dropna().to_numpy(str), np.asarray(pred, str)

    def run(self, timelines: pd.DataFrame, roles: Sequence[str] | None = None) -> pd.DataFrame:
        """Per-timeline rows of every classifier (of ``roles``, default all: correct, y_true, y_pred)."""
        units = timeline_units(timelines)
        frames = []
        for e in self.entries:
            if roles is not None and e.role not in roles:
                continue
            labelled, y, pred = self._predict(e, units)
            frames.append(pd.DataFrame({"group_id": labelled.index.to_numpy(),
                                        "author_id": labelled["author_id"].to_numpy(), "correct": y == pred,
                                        "y_true": y, "y_pred": pred, "role": e.role,
                                        "attack": e.attack, "adversary": e.adversary}))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def evidence(self, timelines: pd.DataFrame, top: int) -> pd.DataFrame:
        """For each timeline whose attribute a feedback classifier infers, the words in it that pull that
        classifier towards the true value (seed 004, appendix B), strongest first."""
        units = timeline_units(timelines)
        frames = []
        for e in self.entries:
            if e.role != "feedback":
                continue
            labelled, y, pred = self._predict(e, units)
            hit = y == pred
            words = evidence_words(e.model, labelled["text"][hit].tolist(), pred[hit].tolist(), top)
            frames.append(pd.DataFrame({"group_id": np.repeat(labelled.index[hit].to_numpy(), [len(w) for w in words]),
                                        "feature": [w for ws in words for w in ws], "kind": "word"}))
        return pd.concat(frames, ignore_index=True) if frames else no_evidence()


def timeline_units(timelines: pd.DataFrame) -> pd.DataFrame:
    """One row per timeline (indexed by group_id): its author and its posts' texts joined."""
    return timelines.groupby("group_id", sort=False).agg(author_id=("author_id", "first"), text=("text", "\n".join))


# ----------------------------------------------------------------------------------------------- summaries
def _profiling_summary(part: pd.DataFrame) -> dict[str, Any]:
    """A profiling classifier over the timelines kept: accuracy (Wilson interval) as accuracy_at_1, the majority
    class's rate, and the advantage over it with its interval, of its predictions as an attacker who knows how
    the kept timelines were selected would read them (:func:`tasks.privacy.profiling.relabelled`: leaving out
    the timelines a feedback classifier got right would otherwise make a correlated judge look blind)."""
    y, pred = part["y_true"].to_numpy(str), part["y_pred"].to_numpy(str)
    n, k = len(part), int((y == pred).sum())
    low, high = wilson(k, n)
    risk = advantage(y, relabelled(y, pred).astype(str))
    return {"accuracy_at_1": k / n if n else math.nan, "accuracy_at_1_ci_low": low, "accuracy_at_1_ci_high": high,
            "accuracy_at_10": math.nan, "n_timelines": n, "n_correct": k,
            # the control is the majority class (re-identification's: chance 1/N), in the same keys
            "chance": float(pd.Series(y).value_counts().iloc[0]) / n if n else math.nan,
            "risk": risk.value, "risk_ci_low": risk.ci_low, "risk_ci_high": risk.ci_high}


def summaries(attacks: pd.DataFrame, keep: set[str] | None = None) -> list[dict[str, Any]]:
    """One summary per (role, attack, adversary) over the timelines kept: accuracy@1/@10 with intervals and n
    (profiling classifiers: :func:`_profiling_summary`)."""
    out = []
    if attacks.empty:
        return out
    for (role, attack, adversary), part in attacks.groupby(["role", "attack", "adversary"], sort=False):
        if keep is not None:
            part = part[part["group_id"].isin(keep)]
        summary = _profiling_summary(part) if attack.startswith(PROFILING_ATTACK) else attribution_summary(
            part.reset_index(drop=True), int(part["n_authors"].max()) if len(part) else 0, n_resamples=1)
        out.append({"role": role, "attack": attack, "adversary": adversary, **summary})
    return out


def residual(s: Mapping[str, Any]) -> tuple[float, float, float]:
    """A summary's residual risk over chance (value, ci_low, ci_high); an attack not above chance has risk 0
    (its interval still says how much it could be)."""
    value, low, high = (float(s.get(k, math.nan)) for k in ("risk", "risk_ci_low", "risk_ci_high"))
    if math.isnan(high):
        return math.nan, math.nan, math.nan
    return (0.0 if math.isnan(value) else max(0.0, value)), low, high


def _of(s: Mapping[str, Any], figure: str) -> tuple[float, float, float]:
    """A summary's (value, ci_low, ci_high) of ``figure``: accuracy@1, or the residual risk over its control."""
    return (s["accuracy_at_1"], s["accuracy_at_1_ci_low"], s["accuracy_at_1_ci_high"]) if figure == "accuracy" \
        else residual(s)


def worst(summaries_: list[dict[str, Any]], role: str, decide_on: str, figure: str = "accuracy") -> dict[str, Any]:
    """The role's worst case of ``figure`` (:func:`tasks.budgets.worst_index`: the highest upper bound, or value
    when deciding on the point). ``accuracy``: a re-identification attack's accuracy@1; ``risk``: its residual
    risk over chance; ``profiling``: an attribute classifier's advantage over the majority class, where an
    undefined advantage (the timelines all of one value) ranks worst, so it cannot pass a budget."""
    profiling = figure == "profiling"
    rows = [s for s in summaries_ if s["role"] == role and s["n_timelines"]
            and s["attack"].startswith(PROFILING_ATTACK) == profiling]
    values = [_of(s, figure) for s in rows]
    at = worst_index([v[0] for v in values], [v[2] for v in values], decide_on, undefined_is_worst=profiling)
    if at is None:
        return {"value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0, "attack": None, "adversary": None}
    s, (value, low, high) = rows[at], values[at]
    return {"value": value, "ci_low": low, "ci_high": high, "n": s["n_timelines"], "attack": s["attack"],
            "adversary": s["adversary"], "accuracy": s["accuracy_at_1"], "chance": s.get("chance", math.nan)}


def attack_figures(summaries_: list[dict[str, Any]], role: str, decide_on: str,
                   profiling: bool) -> dict[str, dict[str, Any]]:
    """The role's re-identification figures (accuracy@1 and residual risk over chance) and, with a profiling
    bound, its profiling figure: each the worst case, with the attack and adversary that reached it."""
    figures = {"reidentification": worst(summaries_, role, decide_on),
               "reidentification_risk": worst(summaries_, role, decide_on, figure="risk")}
    if profiling:
        figures["profiling"] = worst(summaries_, role, decide_on, figure="profiling")
    return figures


def share_figure(k: int, n: int, *, what: str) -> dict[str, Any]:
    """``k`` of ``n`` (documents, PII spans) with its Wilson interval, as a budget figure (``attack`` names what was
    counted); 0 of 0 is 0."""
    low, high = wilson(k, n)
    return {"value": k / n if n else 0.0, "ci_low": low if n else 0.0, "ci_high": high if n else 0.0, "n": n,
            "attack": what, "adversary": None}


def attack_rows(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Attack row frames as one (re-identification and profiling rows: in_top10 and in_history nullable)."""
    frames = [f for f in frames if len(f)]
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return out.astype({c: "boolean" for c in ("in_top10", "in_history") if c in out.columns})
