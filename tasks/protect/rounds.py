"""The protect loop's round step: round 0 (the starting move on every document, then every attack), which
documents are still caught, which of them move next (the most evidential of each caught timeline), and a later
round (the next rung of the ladder for each, kept where its meaning stays at the floor, then the attacks again on
the timelines that changed). :mod:`tasks.protect.loop` runs the rounds; :mod:`tasks.protect.cache` keeps them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tasks.privacy.evidence import carried_by
from tasks.protect.apply import apply_move
from tasks.protect.attackers import Attackers, attack_rows, summaries
from tasks.protect.components import Components, _timelines
from tasks.protect.files import FLUENCY_COLUMN, VERBATIM_COLUMN
from tasks.protect.moves import GENERALIZE, LLM_ANONYMIZE, MASK_EVIDENCE, REWORD, Move
from tasks.protect.reading import reads_well

#: Why a document's last candidate was not kept (column ``rejected``): it fell below the meaning floor, below the
#: fluency floor (or repeated a word back to back), or the move changed nothing.
REJECTED_COLUMN = "rejected"
REJECTED_MEANING, REJECTED_FLUENCY, REJECTED_UNCHANGED = "meaning", "fluency", "unchanged"


@dataclass
class RoundState:
    """The documents after one round and every attack's per-timeline result on them."""

    round: int
    docs: pd.DataFrame       # doc_id, text, meaning, fluency, round, move, rung, blocked, leaked, spans
    attacks: pd.DataFrame    # role, attack, adversary, n_authors, group_id, author_id, correct, in_top10, ...
    rewritten: int
    seconds: float
    summaries: list[dict[str, Any]] | None = None  # :meth:`attack_summaries`, once computed (kept with the round)

    def attack_summaries(self) -> list[dict[str, Any]]:
        """Every attack's summary over all the round's timelines (:func:`summaries`), computed once: a rerun reads
        them from the round's cache instead of summarising each attack again."""
        if self.summaries is None:
            self.summaries = summaries(self.attacks)
        return self.summaries


def round_zero(p: Components) -> RoundState:
    started = time.perf_counter()
    n = len(p.corpus)
    idx = np.arange(n)
    start = Move(p.settings.start)
    texts = p.sources.copy()
    out = apply_move(p, start, idx, texts, pd.DataFrame(), 0)
    new = pd.Series([o if o is not None else t for o, t in zip(out, texts, strict=True)])
    meaning = p.meaning(new.tolist(), p.sources.tolist())
    spans, leaked = p.leaks(idx, new.tolist())
    docs = pd.DataFrame({"doc_id": p.corpus["doc_id"].astype(str), "text": new, "meaning": meaning,
                         FLUENCY_COLUMN: np.nan, REJECTED_COLUMN: None, "round": 0, "move": start.label, "rung": 0,
                         "blocked": False,
                         "spans": spans, "leaked": leaked, VERBATIM_COLUMN: p.verbatim_flags(idx, new.tolist())})
    timelines = _timelines(p.corpus, new, p.settings.attack_posts)
    attacks = p.attack(timelines)
    if p.check_attacks:  # round 0 only: the registered attacks the judge leaves out, for the strength check
        check = Attackers(p.role_specs(("check",)), p.corpus_docs, p.folder)
        attacks = attack_rows([attacks, check.run(timelines)])
    state = RoundState(0, docs, attacks, int(sum(o is not None for o in out)), 0.0)
    fit_evidence(p, state, ahead=p.settings.max_rounds > 0)  # so no later round reads the histories
    state.seconds = time.perf_counter() - started
    return state


def fit_evidence(p: Components, zero: RoundState, *, ahead: bool) -> None:
    """Fix whose evidence the feedback attacks fit: the authors of the documents round 0 left caught (a
    document not caught then is never moved again, so no later round asks for anyone else's), the same
    whether round 0 was computed or read back; with ``ahead`` (and a later round that uses evidence), fit
    it now."""
    p.evidence_authors = set(p.corpus["author_id"].iloc[caught(p, zero)].dropna().astype(str))
    if ahead and needs_evidence(p) and p.evidence_authors:
        p.attackers().evidence(pd.DataFrame(columns=["group_id", "author_id", "text"]), 1,
                               p.evidence_authors)


def ranks_documents(p: Components) -> bool:
    """Whether a round moves only each caught timeline's most evidential documents (``docs_per_round``,
    with evidence to rank them by)."""
    return p.settings.docs_per_round is not None and (p.attackers().gives_evidence or p.profiling)


def needs_evidence(p: Components) -> bool:
    """Whether later rounds ask the feedback attacks for evidence (a move masks it, or the documents moved
    are ranked by it)."""
    return ranks_documents(p) or any(m.name in (MASK_EVIDENCE, GENERALIZE, LLM_ANONYMIZE)
                                     for m in p.settings.ladder)


def caught(p: Components, state: RoundState) -> np.ndarray:
    """Positions of the documents that still give their author away (feedback), their author's attribute
    (feedback classifiers, with a profiling bound), still leak PII (pii_leakage bound) or still hold a run of
    their source (verbatim bound)."""
    fb = state.attacks[(state.attacks["role"] == "feedback") & state.attacks["correct"].astype(bool)]
    timelines = set(fb["group_id"])
    hit = p.doc_timeline.reindex(state.docs["doc_id"]).isin(timelines).to_numpy()
    return np.flatnonzero(hit | must_move(p, state.docs))


def must_move(p: Components, docs: pd.DataFrame) -> np.ndarray:
    """Per document, whether a bound catches it on its own: it leaks PII, or it is verbatim."""
    hit = np.zeros(len(docs), bool)
    if p.pii:
        hit |= docs["leaked"].to_numpy() > 0
    if p.verbatim:
        hit |= docs[VERBATIM_COLUMN].to_numpy(bool)
    return hit


def most_evidential(p: Components, todo: np.ndarray, texts: pd.Series, evidence: pd.DataFrame,
                    leaking: np.ndarray) -> np.ndarray:
    """Of the documents ``todo``, per timeline the ``docs_per_round`` that carry the most of its evidence (the
    sum of the contributions of the features they hold, :func:`tasks.privacy.evidence.carried_by`; a feature without
    one, a profiling classifier's word, weighs 1), ties by position, none that carries nothing; every document
    a bound catches on its own (``leaking``: :func:`must_move`) as well."""
    groups = p.doc_timeline.reindex(p.corpus["doc_id"].iloc[todo]).to_numpy()
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
    keep = (rank < p.settings.docs_per_round) & (score > 0) | leaking[todo]
    return todo[keep]


def candidate_moves(p: Components, move: Move) -> list[tuple[Move, ...]]:
    """The candidates a rung makes for each document, each a move or moves applied one after the other: the rung
    itself, and where the budget bounds verbatim, the rung followed by ``reword`` with its broader synonyms (what the
    rung left of the source's runs broken by the fewest word edits); ``reword``'s own rung tries both breadths."""
    broad = Move(REWORD, {"senses": 3})
    if move.name == REWORD:
        return [(move,), (broad,)]
    return [(move,), (move, broad)] if p.verbatim else [(move,)]


def _evidence_weights(p: Components, idx: np.ndarray, texts: Sequence[str | None], evidence: pd.DataFrame
                      ) -> np.ndarray:
    """Per candidate (for document ``idx[i]``), the summed contributions of its timeline's evidence features it
    still carries (a feature without one weighs 1); 0 without evidence."""
    out = np.zeros(len(texts))
    if not len(evidence):
        return out
    weight = evidence["contribution"].fillna(1.0) if "contribution" in evidence.columns else \
        pd.Series(1.0, index=evidence.index)
    features = {g: list(zip(f["feature"], f["kind"], weight[f.index], strict=True))
                for g, f in evidence.groupby("group_id", sort=False)}
    groups = p.doc_timeline.reindex(p.corpus["doc_id"].iloc[idx]).to_numpy()
    for i, (g, text) in enumerate(zip(groups, texts, strict=True)):
        if text is not None:
            out[i] = sum(w for f, kind, w in features.get(g, []) if carried_by([text], f, kind)[0])
    return out


def best_candidates(p: Components, move: Move, idx: np.ndarray, texts: pd.Series, evidence: pd.DataFrame,
                    k: int) -> pd.DataFrame:
    """Per document ``idx``, the candidate of the rung ``move`` that is kept (columns text, move, meaning, fluency;
    text None where none is) and why none was (``rejected``): among the candidates (:func:`candidate_moves`) above
    the meaning floor, the one that holds no run of its source (where verbatim is bounded), then carries the least
    of the feedback attack's evidence, then keeps the most meaning, and that passes the fluency floor; the fluency LM
    reads the preferred candidate of each document first and the next one only where that one failed."""
    outputs, labels = [], []
    for moves in candidate_moves(p, move):
        current, out = texts, [None] * len(idx)
        at = np.arange(len(idx))
        for step in moves:
            made = apply_move(p, step, idx[at], current, evidence, k)
            keep = [j for j, o in enumerate(made) if o is not None]
            current = current.copy()
            current.iloc[idx[at[keep]]] = [made[j] for j in keep]
            at = at[keep]
            for j, o in zip(at, [made[j] for j in keep], strict=True):
                out[j] = o
            if len(moves) > 1 and step is moves[0]:
                out = [None] * len(idx)  # a composed candidate counts only where its last step changed something
        outputs.append(out)
        labels.append("+".join(m.label for m in moves))
    n, m = len(idx), len(outputs)
    cand = [outputs[c][i] for i in range(n) for c in range(m)]  # document-major
    doc_of = np.repeat(np.arange(n), m)
    made = np.array([c is not None for c in cand])
    meaning = np.full(len(cand), np.nan)
    sources = p.sources.iloc[idx].tolist()
    if made.any():
        meaning[made] = p.meaning([c for c in cand if c is not None], [sources[d] for d in doc_of[made]])
    ok = made & (np.nan_to_num(meaning, nan=-1.0) >= p.settings.meaning_floor)
    verbatim = np.zeros(len(cand), bool)
    if p.verbatim and ok.any():
        verbatim[ok] = p.verbatim_flags(idx[doc_of[ok]], [cand[i] for i in np.flatnonzero(ok)])
    weights = _evidence_weights(p, idx[doc_of], [c if o else None for c, o in zip(cand, ok, strict=True)], evidence) \
        if m > 1 else np.zeros(len(cand))
    order = np.lexsort((-np.nan_to_num(meaning, nan=-1.0), weights, verbatim, ~ok, doc_of))  # per document, best first
    rank = np.empty(len(cand), np.int64)
    rank[order] = np.arange(len(cand)) - np.repeat(np.arange(n) * m, m)
    best = pd.DataFrame({"text": pd.Series([None] * n, dtype=object), "move": None, "meaning": np.nan,
                         "fluency": np.nan, "rejected": REJECTED_UNCHANGED})
    best.loc[made.reshape(n, m).any(1), "rejected"] = REJECTED_MEANING
    for tier in range(m):  # each document's preferred candidate first; the next only where that one read badly
        at = np.flatnonzero(ok & (rank == tier) & best["text"].isna().to_numpy()[doc_of])
        if not len(at):
            continue
        reads, fluency = reads_well(p, [cand[i] for i in at], idx[doc_of[at]])
        best.loc[doc_of[at[~reads]], "rejected"] = REJECTED_FLUENCY
        good = at[reads]
        rows = doc_of[good]
        best.loc[rows, "text"] = pd.Series([cand[i] for i in good], index=rows, dtype=object)
        best.loc[rows, "move"] = [labels[i % m] for i in good]
        best.loc[rows, "meaning"] = meaning[good]
        best.loc[rows, "fluency"] = fluency[reads]
    return best


def next_round(p: Components, prev: RoundState, k: int) -> RoundState:
    started = time.perf_counter()
    docs = prev.docs.copy()
    caught_now = caught(p, prev)
    ladder = p.settings.ladder
    todo = caught_now[docs["rung"].to_numpy()[caught_now] < len(ladder)]
    evidence = pd.DataFrame()
    if needs_evidence(p) and len(todo):
        groups = set(p.doc_timeline.reindex(docs["doc_id"].iloc[todo]))
        timelines = _timelines(p.corpus, docs["text"], p.settings.attack_posts)
        evidence = p.evidence(timelines[timelines["group_id"].isin(groups)])
    changed = np.zeros(len(docs), bool)
    texts = docs["text"].astype(str)
    if ranks_documents(p):
        todo = most_evidential(p, todo, texts, evidence, must_move(p, docs))
    while len(todo):
        rung = docs["rung"].to_numpy().copy()  # this pass's rungs (the frame's change as moves fail)
        tried_later = []
        for r in sorted(set(rung[todo])):
            idx = todo[rung[todo] == r]
            move = ladder[r]
            best = best_candidates(p, move, idx, texts, evidence, k)
            keep = best.text.notna().to_numpy()
            docs.loc[idx[~keep], REJECTED_COLUMN] = best.rejected.to_numpy()[~keep]
            kept_idx = idx[keep]
            if len(kept_idx):
                chosen = best[keep]
                texts.iloc[kept_idx] = chosen.text.tolist()
                docs.loc[kept_idx, "text"] = chosen.text.tolist()
                docs.loc[kept_idx, "meaning"] = chosen.meaning.to_numpy(float)
                docs.loc[kept_idx, FLUENCY_COLUMN] = chosen.fluency.to_numpy(float)
                docs.loc[kept_idx, "round"] = k
                docs.loc[kept_idx, "move"] = chosen.move.tolist()
                changed[kept_idx] = True
            docs.loc[idx, "rung"] = r + 1
            tried_later += [i for i in idx[~keep] if r + 1 < len(ladder)]
            blocked = idx[~keep & (np.full(len(idx), r + 1 >= len(ladder)))]
            docs.loc[blocked, "blocked"] = True
        todo = np.array(sorted(tried_later), dtype=np.int64)
    idx = np.flatnonzero(changed)
    if p.pii and len(idx):
        spans, leaked = p.leaks(idx, docs["text"].iloc[idx].tolist())
        docs.loc[idx, "spans"], docs.loc[idx, "leaked"] = spans, leaked
    if len(idx):
        docs.loc[idx, VERBATIM_COLUMN] = p.verbatim_flags(idx, docs["text"].iloc[idx].tolist())
    attacks = prev.attacks[prev.attacks["role"] != "check"]  # round 0's strength check is not run again
    if len(idx):
        groups = set(p.doc_timeline.reindex(docs["doc_id"].iloc[idx]))
        timelines = _timelines(p.corpus, docs["text"], p.settings.attack_posts)
        fresh = p.attack(timelines[timelines["group_id"].isin(groups)])
        attacks = pd.concat([attacks[~attacks["group_id"].isin(groups)], fresh], ignore_index=True)
    return RoundState(k, docs, attacks, int(changed.sum()), time.perf_counter() - started)
