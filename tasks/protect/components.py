"""The parts one protect point works with, built on first use (a fully cached rerun builds none of them): the
halves of the histories, the feedback and judge attackers and profiling classifiers, the PII detector, the meaning
scorer and the LLM client of ``llm-anonymize``; and :class:`Shared`, what the points of a frontier share. The
round step (:mod:`tasks.protect.rounds`) and the moves (:mod:`tasks.protect.apply`) read the point through
:class:`Components`; the loop (:mod:`tasks.protect.loop`) drives it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.corpus.schema import STATUS_OK
from tasks.layout import PROTECT_LABEL
from tasks.metrics.verbatim import verbatim_flags
from tasks.models.pii import PiiDetector
from tasks.privacy.attacks import AttackPlan, forget_histories
from tasks.privacy.audit import attack_timelines
from tasks.privacy.history_split import split_histories_by_author
from tasks.protect.attackers import Attackers, Profilers, RoleSpec, attack_rows
from tasks.protect.generalize import Surrogates
from tasks.protect.settings import ProtectSettings

#: Documents whose meaning is scored at once: their token embeddings are held in memory meanwhile (round 0 scores
#: every document: 17.8k at the article's scale).
_MEANING_CHUNK = 2_000


@dataclass
class Shared:
    """What the points of a frontier share: the fitted strategies, generalize's per-author phrases (the same entity
    gets the same phrase at every floor), and the moves' outputs, parses, meaning and fluency scores already computed
    (a point asks for most of the ones the point above it did)."""

    strategies: dict[str, Any] = field(default_factory=dict)
    surrogates: Any = None
    outputs: dict[tuple, str | None] = field(default_factory=dict)
    meanings: dict[tuple[str, str], float] = field(default_factory=dict)
    fluencies: dict[tuple[str, str], float] = field(default_factory=dict)
    parses: dict[str, Any] = field(default_factory=dict)  # spaCy parses by text (reword, the split check)
    english: np.ndarray | None = None  # per document, whether its source may be read as English

    def __post_init__(self) -> None:
        if self.surrogates is None:
            self.surrogates = Surrogates()


def english_sources(p: Components) -> np.ndarray:
    """Per document of ``p``, whether its source may be read as English (it is not in another language:
    :func:`tasks.models.pii.in_another_language`): the moves outside :data:`tasks.protect.moves.ANY_LANGUAGE`
    rewrite only those. Read once for the points of a frontier, which share their corpus."""
    if p.shared.english is None:
        from tasks.models.pii import in_another_language

        p.shared.english = ~np.array([in_another_language(t) for t in p.sources], bool)
    return p.shared.english


def _timelines(corpus: pd.DataFrame, texts: pd.Series, timeline_posts: int | None) -> pd.DataFrame:
    frame = corpus[["doc_id", "author_id"]].assign(
        text=texts.to_numpy(), status=STATUS_OK,
        group_id=corpus["group_id"] if "group_id" in corpus.columns else pd.NA)
    return attack_timelines(frame, timeline_posts)


class Components:
    """One protect point's inputs and settings, and the parts it works with, each built on first use."""

    def __init__(self, corpus: pd.DataFrame, histories: str, settings: ProtectSettings, folder: Path,
                 log: Callable[[str], None], histories_fingerprint: str, judge: AttackPlan,
                 check: Sequence[str] = (), zero_folder: Path | None = None, shared: Shared | None = None) -> None:
        self.corpus = corpus.reset_index(drop=True)
        self.sources = self.corpus["text"].astype(str)
        self.settings = settings
        self.judge = judge
        self.check_attacks = list(check)  # round 0 only: see ProtectSettings.check_attacks
        self.folder = folder
        self.zero_folder = zero_folder or folder  # round 0 (shared by the points of a frontier)
        self.shared = shared or Shared()
        self.log = log
        self.histories = histories
        self.histories_fingerprint = histories_fingerprint
        self._attackers: Attackers | None = None
        self._profilers: Profilers | None = None
        self._halves: dict[str, str] | None = None
        self._detector: Any = None
        self._embeddings: Any = None
        self._llm: Any = None
        self.pii = settings.pii
        self.verbatim = settings.bounds_figure("verbatim")
        self.profiling = settings.profiling
        self.mappings: list[pd.DataFrame] = []
        self.doc_timeline = _timelines(self.corpus, self.sources, settings.attack_posts).set_index("doc_id")["group_id"]
        self.corpus_docs = frozenset(self.corpus["doc_id"].astype(str))
        self.evidence_authors: set[str] | None = None  # fixed by round 0 (:func:`tasks.protect.rounds.fit_evidence`)

    def halves(self) -> dict[str, str]:
        """The feedback and judge halves of the histories (split once, kept beside the rounds)."""
        if self._halves is None:
            halves_dir = self.folder.parent / "histories"
            halves_dir.mkdir(parents=True, exist_ok=True)
            stem = f"{self.histories_fingerprint[:16]}-{self.settings.seed}"  # the caller's: not hashed again
            feedback, judge = halves_dir / f"{stem}-feedback.parquet", halves_dir / f"{stem}-judge.parquet"
            if not (feedback.exists() and judge.exists()):
                split_histories_by_author(self.histories, feedback, judge, seed=self.settings.seed)
            self._halves = {"feedback": str(feedback), "judge": str(judge)}
        return self._halves

    def halves_written(self) -> tuple[str, ...]:
        """The halves' files when this point has them (an index built for them serves the full histories), else none."""
        halves = tuple(self._halves.values()) if self._halves else ()
        return halves if all(Path(h).exists() for h in halves) else ()

    def forget_halves(self) -> None:
        """Free the attackers and the profiles built from the halves of the histories (the loop is over)."""
        self._attackers = self._profilers = None
        for half in (self._halves or {}).values():
            forget_histories(half)

    def role_specs(self, roles: Sequence[str]) -> list[RoleSpec]:
        """The feedback (feedback half), judge (judge half) and check (the registered attacks the judge leaves out,
        judge half) attacks asked for."""
        s, halves = self.settings, self.halves()
        names = {"feedback": s.feedback, "judge": s._specs(self.judge),
                 "check": tuple((n, s.params_of(n)) for n in self.check_attacks)}
        return [RoleSpec(role, names[role], halves["judge" if role == "check" else role], s.adversaries)
                for role in roles if names[role]]

    def attackers(self) -> Attackers:
        if self._attackers is None:
            self._attackers = Attackers(self.role_specs(("feedback", "judge")), self.corpus_docs, self.folder)
        return self._attackers

    def profilers(self) -> Profilers:
        if self._profilers is None:
            halves, s = self.halves(), self.settings
            self._profilers = Profilers({"feedback": (halves["feedback"], s.profiling_feedback),
                                         "judge": (halves["judge"], s.profiling_judge)}, s.adversaries, self.corpus,
                                        s.seed)
        return self._profilers

    def attack(self, timelines: pd.DataFrame) -> pd.DataFrame:
        """Every attack's per-timeline rows on ``timelines``: the re-identification attacks and, with a profiling
        bound, the attribute classifiers (their rows have no rank: in_top10 and in_history empty)."""
        frames = [self.attackers().run(timelines)] + ([self.profilers().run(timelines)] if self.profiling else [])
        return attack_rows(frames)

    def evidence(self, timelines: pd.DataFrame) -> pd.DataFrame:
        """The feedback attacks' evidence for ``timelines`` and, with a profiling bound, the feedback classifiers'."""
        top = self.settings.evidence_top
        assert self.evidence_authors is not None, "round 0 fixes whose evidence is fitted"
        frames = [self.attackers().evidence(timelines, top, self.evidence_authors)] + (
            [self.profilers().evidence(timelines, top)] if self.profiling else [])
        return pd.concat(frames, ignore_index=True).drop_duplicates(ignore_index=True)

    def verbatim_flags(self, idx: np.ndarray, texts: Sequence[str]) -> np.ndarray:
        """Per document ``idx``, whether ``texts`` holds a run of its source (:mod:`tasks.metrics.verbatim`)."""
        return verbatim_flags(self.sources.iloc[idx].tolist(), list(texts), min_chars=self.settings.verbatim_chars)

    def detector(self) -> Any:
        if self._detector is None:
            self._detector = PiiDetector()
        return self._detector

    def embeddings(self) -> Any:
        """The cache of embeddings and PII detections beside the rounds: each text is embedded and scanned once."""
        if self._embeddings is None:
            # deferred: loads sqlite3 only when this runs
            from tasks.models.embeddings import EmbeddingCache

            self._embeddings = EmbeddingCache(self.folder.parent / "embeddings.sqlite")
        return self._embeddings

    def llm(self) -> Any:
        """The client ``llm-anonymize`` asks (the ``llm`` strategy's; said in the log when it is the offline model)."""
        if self._llm is None:
            # deferred: loads sqlite3 only when this runs
            from tasks.models.llm import llm_backend_for

            self._llm = llm_backend_for("llm", dict(self.settings.llm))
            if type(self._llm).__name__ == "TransformersBackend":
                self.log("llm-anonymize: no LLM endpoint set; the small offline model on CPU rewrites "
                         "(slower and weaker than a served model)")
        return self._llm

    def meaning(self, candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
        # deferred: loads sqlite3 only when this runs
        from tasks.metrics.meaning import bertscore

        out = np.ones(len(candidates))  # a text equal to its source keeps all of its meaning
        known = self.shared.meanings
        for i, pair in enumerate(zip(candidates, references, strict=True)):
            if pair in known:
                out[i] = known[pair]
        differ = np.flatnonzero([c != r and (c, r) not in known for c, r in zip(candidates, references, strict=True)])
        if len(differ):
            for part in np.array_split(differ, -(-len(differ) // _MEANING_CHUNK)):  # token embeddings of a part held
                out[part] = bertscore([candidates[i] for i in part], [references[i] for i in part],
                                      cache=self.embeddings(), cache_candidates=False).scores["bertscore_f1"].to_numpy(float)
            known.update({(candidates[i], references[i]): float(out[i]) for i in differ})
        return out

    def leaks(self, idx: np.ndarray, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(source PII spans, spans still in the text) per document."""
        # deferred: loads sqlite3 only when this runs
        from tasks.metrics.pii import pii_counts

        if not self.pii or not len(idx):
            return np.zeros(len(idx), np.int64), np.zeros(len(idx), np.int64)
        pairs = pd.DataFrame({"doc_id": self.corpus["doc_id"].iloc[idx].to_numpy(), "strategy": PROTECT_LABEL,
                              "variant": "first", "status": STATUS_OK, "source": self.sources.iloc[idx].to_numpy(),
                              "text": list(texts)})
        counts = pii_counts(pairs, self.detector(), cache=self.embeddings())
        totals = counts[counts["entity"] == "all"]
        return totals["source_spans"].fillna(0).to_numpy(np.int64), totals["leaked"].fillna(0).to_numpy(np.int64)

