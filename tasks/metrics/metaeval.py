"""Validating metrics by controlled manipulation (seed 003 §4.2) and correlating metrics (seed 000 Fig. 5).

From a reference bag R, a manipulation builds bags G(level) at increasing strength; a good similarity metric
m(R, G) ranks them in the true order. :func:`validate_metrics` reports, per (metric, manipulation), the
Spearman correlation between the metric's scores and the strength, sign-corrected so +1 = perfect.

Manipulations (``MANIPULATIONS``); every one keeps the bag size, returns R unchanged at strength 0 and is
deterministic given the seed. Levels are *nested*: a text changed at strength s is changed identically at
every larger strength (one seeded permutation per manipulation, one seeded generator per position), so the
true ranking holds by construction, as the seed requires.

- ``tdm-peaked``: distinct texts are ranked by count (ties: first occurrence); the head is the top
  ``max(1, ceil(head_share * distinct))`` texts (``head_share=0.1``), the tail the rest. A fraction s of the
  tail occurrences is replaced by head texts drawn in proportion to their counts (s=1: only head texts).
- ``tdm-flat``: each distinct text's count moves linearly from its count c_i to the equal share n/d:
  ``(1 - s) * c_i + s * n / d`` (integers by largest remainder, bag size kept); surplus occurrences make
  room for copies of the rarer texts in place. A bag of all-distinct texts is already flat (no change:
  reported as such, as the seed skips TDM for QAC's unique bags).
- ``nti``: a fraction s of the texts is replaced by noise texts (``noise_texts``, e.g. other corpus texts
  outside R: our analogue of the seed's other intents/products/queries), drawn without replacement.
- ``eda-swap`` / ``eda-replace`` / ``eda-delete`` / ``eda-insert``: a fraction s of the texts gets one EDA
  operation (Wei & Zou 2019) with ``alpha`` (0.1, their default) on whitespace tokens: RS swaps
  ``max(1, int(alpha * words))`` random pairs; SR replaces that many distinct non-stopwords by a random
  synonym (all occurrences of each); RI inserts that many synonyms of random non-stopwords at random
  positions; RD deletes each word with probability alpha (deviation: when that deletes nothing from a text
  of 2+ words one random word is deleted, so a chosen text always changes; a text is never emptied).
  Synonyms: a small built-in table (``SYNONYMS``, common UGC words; no WordNet data installs offline) or
  your own ``synonyms`` mapping (e.g. WordNet). Case and punctuation around a word are kept (Wei & Zou
  lowercase and strip punctuation, which would itself be a style change).
- ``style`` (our design): a fraction s of the texts loses the surface markers of user-generated style while
  keeping its words: contractions expanded (``CONTRACTIONS``), lowercased, every non-word character
  (punctuation, emoji) removed, whitespace collapsed.
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tasks.signatures import make_signature

MANIPULATIONS: tuple[str, ...] = ("tdm-peaked", "tdm-flat", "nti", "eda-swap", "eda-replace", "eda-delete",
                                  "eda-insert", "style")
LEVELS: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)

Metric = Callable[[list[str], list[str]], float]

# Wei & Zou's stopword list (abridged to the words that matter on short texts).
STOPWORDS = frozenset((
    "i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours", "yourself",
    "yourselves", "he", "him", "his", "himself", "she", "her", "hers", "herself", "it", "its", "itself",
    "they", "them", "their", "theirs", "themselves", "what", "which", "who", "whom", "this", "that",
    "these", "those", "am", "is", "are", "was", "were", "be", "been", "being", "have", "has", "had",
    "having", "do", "does", "did", "doing", "a", "an", "the", "and", "but", "if", "or", "because", "as",
    "until", "while", "of", "at", "by", "for", "with", "about", "against", "between", "into", "through",
    "during", "before", "after", "above", "below", "to", "from", "up", "down", "in", "out", "on", "off",
    "over", "under", "again", "further", "then", "once", "here", "there", "when", "where", "why", "how",
    "all", "any", "both", "each", "few", "more", "most", "other", "some", "such", "no", "nor", "not",
    "only", "own", "same", "so", "than", "too", "very", "s", "t", "can", "will", "just", "don", "should",
    "now",
))

_SYN_GROUPS = (
    "good fine nice decent great", "great excellent superb terrific wonderful", "bad poor awful terrible lousy",
    "big large huge enormous", "small little tiny minor", "happy glad pleased cheerful joyful",
    "sad unhappy down gloomy miserable", "angry mad furious annoyed irritated", "fast quick rapid speedy",
    "slow sluggish unhurried", "easy simple effortless", "hard difficult tough", "smart clever bright intelligent",
    "stupid dumb foolish silly", "beautiful pretty lovely gorgeous attractive", "ugly hideous unattractive",
    "old aged ancient elderly", "new fresh recent novel", "important significant crucial key",
    "funny amusing hilarious comical", "strange weird odd bizarre", "scared afraid frightened fearful",
    "tired exhausted weary sleepy", "sick ill unwell", "rich wealthy affluent", "friend buddy pal mate",
    "house home residence", "car auto vehicle", "job work occupation employment", "kid child youngster",
    "man guy gentleman fellow", "woman lady", "food meal grub", "movie film picture", "story tale account",
    "problem issue trouble difficulty", "idea notion thought concept", "place spot location site",
    "thing object item", "way method manner means", "time moment occasion", "money cash funds",
    "price cost charge", "shop store", "street road avenue", "town city", "talk speak chat converse",
    "say state tell mention", "look see view watch observe", "think believe reckon suppose",
    "want desire wish", "like enjoy love appreciate", "hate detest loathe despise", "get obtain acquire gain",
    "give provide offer hand", "make create build produce", "use utilize employ", "help aid assist support",
    "start begin commence", "stop halt cease quit", "end finish complete conclude", "buy purchase",
    "try attempt endeavor", "need require", "know understand realize", "feel sense", "walk stroll wander",
    "run sprint dash jog", "eat consume devour", "fix repair mend", "show display present reveal",
    "leave depart exit", "keep retain hold", "call phone ring", "ask inquire question",
    "answer reply respond", "really truly genuinely", "quickly rapidly swiftly", "maybe perhaps possibly",
    "often frequently regularly", "always constantly forever", "sometimes occasionally",
    "completely totally entirely fully", "almost nearly practically", "actually really indeed",
    "probably likely", "amazing incredible astonishing awesome", "boring dull tedious",
    "interesting fascinating intriguing", "cheap inexpensive affordable", "expensive costly pricey",
    "quiet silent calm", "loud noisy", "clean spotless tidy", "dirty filthy grimy", "rude impolite",
    "kind nice friendly gentle", "wrong incorrect mistaken", "right correct accurate", "sure certain positive",
    "ready prepared set", "busy occupied", "crazy insane mad wild", "cool awesome neat", "love adore",
)


def _build_synonyms(groups: Sequence[str]) -> dict[str, tuple[str, ...]]:
    table: dict[str, list[str]] = {}
    for group in groups:
        words = group.split()
        for w in words:
            table.setdefault(w, [])
            table[w].extend(x for x in words if x != w and x not in table[w])
    return {w: tuple(v) for w, v in table.items()}


SYNONYMS: dict[str, tuple[str, ...]] = _build_synonyms(_SYN_GROUPS)

CONTRACTIONS: dict[str, str] = {
    "can't": "cannot", "won't": "will not", "shan't": "shall not", "ain't": "is not", "let's": "let us",
    "i'm": "i am", "it's": "it is", "that's": "that is", "there's": "there is", "what's": "what is",
    "he's": "he is", "she's": "she is", "who's": "who is", "here's": "here is", "y'all": "you all",
}
_SUFFIXES = (("n't", " not"), ("'re", " are"), ("'ve", " have"), ("'ll", " will"), ("'d", " would"),
             ("'m", " am"))


# ------------------------------------------------------------------------------------------ helpers
def _rng(seed: int, name: str, *extra: int) -> np.random.Generator:
    """A generator fixed by (seed, manipulation name, extra ints); stable across processes."""
    return np.random.default_rng([seed, zlib.crc32(name.encode()), *extra])


def _count(strength: float, n: int) -> int:
    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"strength must be in [0, 1], got {strength}")
    return math.floor(strength * n + 0.5)


def _split_token(token: str) -> tuple[str, str, str]:
    """(leading punctuation, core word, trailing punctuation)."""
    m = re.match(r"^(\W*)(.*?)(\W*)$", token, flags=re.S)
    return (m.group(1), m.group(2), m.group(3)) if m else ("", token, "")


def _match_case(word: str, like: str) -> str:
    if like.isupper() and len(like) > 1:
        return word.upper()
    if like[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


# ------------------------------------------------------------------------------------------ EDA operations
def eda_swap(text: str, rng: np.random.Generator, alpha: float = 0.1) -> str:
    """Random swap: ``max(1, int(alpha * words))`` swaps of two distinct random positions."""
    words = text.split()
    if len(words) < 2:
        return text
    for _ in range(max(1, int(alpha * len(words)))):
        i, j = rng.choice(len(words), size=2, replace=False)
        words[i], words[j] = words[j], words[i]
    return " ".join(words)


def _synonym_candidates(words: Sequence[str], synonyms: Mapping[str, Sequence[str]]) -> list[int]:
    out = []
    for i, w in enumerate(words):
        core = _split_token(w)[1].lower()
        if core and core not in STOPWORDS and synonyms.get(core):
            out.append(i)
    return out


def eda_replace(text: str, rng: np.random.Generator, alpha: float = 0.1,
                synonyms: Mapping[str, Sequence[str]] = SYNONYMS) -> str:
    """Synonym replacement: up to ``max(1, int(alpha * words))`` distinct non-stopwords with a synonym, each
    replaced (by one random synonym) at all its occurrences."""
    words = text.split()
    cand = _synonym_candidates(words, synonyms)
    if not cand:
        return text
    distinct = list(dict.fromkeys(_split_token(words[i])[1].lower() for i in cand))
    rng.shuffle(distinct)
    for core in distinct[:max(1, int(alpha * len(words)))]:
        options = list(synonyms[core])
        new = options[int(rng.integers(len(options)))]
        for i, w in enumerate(words):
            lead, c, trail = _split_token(w)
            if c.lower() == core:
                words[i] = lead + _match_case(new, c) + trail
    return " ".join(words)


def eda_insert(text: str, rng: np.random.Generator, alpha: float = 0.1,
               synonyms: Mapping[str, Sequence[str]] = SYNONYMS) -> str:
    """Random insertion: ``max(1, int(alpha * words))`` times, a synonym of a random non-stopword of the
    text is inserted at a random position (unchanged when no word has a synonym, as in Wei & Zou)."""
    words = text.split()
    cand = _synonym_candidates(words, synonyms)
    if not cand:
        return text
    for _ in range(max(1, int(alpha * len(words)))):
        core = _split_token(words[cand[int(rng.integers(len(cand)))]])[1].lower()
        options = list(synonyms[core])
        new = options[int(rng.integers(len(options)))]
        pos = int(rng.integers(len(words) + 1))
        words.insert(pos, new)
        cand = [i + (i >= pos) for i in cand]
    return " ".join(words)


def eda_delete(text: str, rng: np.random.Generator, alpha: float = 0.1) -> str:
    """Random deletion: each word deleted with probability ``alpha``; at least one word of a 2+ word text is
    deleted and one is always kept."""
    words = text.split()
    if len(words) < 2:
        return text
    keep = rng.random(len(words)) > alpha
    if keep.all():
        keep[int(rng.integers(len(words)))] = False
    if not keep.any():
        keep[int(rng.integers(len(words)))] = True
    return " ".join(w for w, k in zip(words, keep, strict=True) if k)


def _expand(word: str) -> str:
    low = word.lower()
    if low in CONTRACTIONS:
        return CONTRACTIONS[low]
    for suffix, full in _SUFFIXES:
        if low.endswith(suffix) and len(low) > len(suffix):
            return low[: -len(suffix)] + full
    return low


def flatten_style(text: str) -> str:
    """The ``style`` manipulation of one text: contractions expanded, lowercased, non-word characters
    removed, whitespace collapsed."""
    text = text.replace("\u2019", "'")
    text = re.sub(r"\w+(?:'\w+)+", lambda m: _expand(m.group(0)), text)
    text = re.sub(r"[^\w\s]|_", " ", text.lower())
    return " ".join(text.split())


# ------------------------------------------------------------------------------------------ manipulations
def _per_text(bag: list[str], strength: float, seed: int, name: str,
              edit: Callable[[str, np.random.Generator], str]) -> list[str]:
    order = _rng(seed, name).permutation(len(bag))
    out = list(bag)
    for pos in order[:_count(strength, len(bag))]:
        out[pos] = edit(bag[pos], _rng(seed, name, int(pos)))
    return out


def _tdm_peaked(bag: list[str], strength: float, seed: int, head_share: float) -> list[str]:
    counts = Counter(bag)
    first = {t: i for i, t in reversed(list(enumerate(bag)))}
    ranked = sorted(counts, key=lambda t: (-counts[t], first[t]))
    head = ranked[:max(1, math.ceil(head_share * len(ranked)))]
    head_set = set(head)
    weights = np.array([counts[t] for t in head], dtype=np.float64)
    weights /= weights.sum()
    tail_pos = [i for i, t in enumerate(bag) if t not in head_set]
    order = _rng(seed, "tdm-peaked").permutation(len(tail_pos))
    out = list(bag)
    for r in order[:_count(strength, len(tail_pos))]:
        pos = tail_pos[int(r)]
        out[pos] = head[int(_rng(seed, "tdm-peaked", pos).choice(len(head), p=weights))]
    return out


def _largest_remainder(values: np.ndarray, total: int) -> np.ndarray:
    base = np.floor(values + 1e-9).astype(int)
    rest = total - int(base.sum())
    if rest > 0:
        frac = values - base
        base[np.argsort(-frac, kind="stable")[:rest]] += 1
    return base


def _tdm_flat(bag: list[str], strength: float, seed: int) -> list[str]:
    counts = Counter(bag)
    first = {t: i for i, t in reversed(list(enumerate(bag)))}
    texts = sorted(counts, key=lambda t: (-counts[t], first[t]))
    c = np.array([counts[t] for t in texts], dtype=np.float64)
    n, d = len(bag), len(texts)
    target = _largest_remainder((1 - strength) * c + strength * n / d, n)
    rank = np.empty(n, dtype=int)
    rank[_rng(seed, "tdm-flat").permutation(n)] = np.arange(n)
    freed: list[int] = []
    for t, have, want in zip(texts, c.astype(int), target, strict=True):
        if want < have:
            positions = sorted((i for i, x in enumerate(bag) if x == t), key=lambda i: rank[i])
            freed.extend(positions[:have - want])
    fill = [t for t, have, want in zip(texts, c.astype(int), target, strict=True) for _ in range(max(0, want - have))]
    out = list(bag)
    for pos, t in zip(sorted(freed, key=lambda i: rank[i]), fill, strict=True):
        out[pos] = t
    return out


def _nti(bag: list[str], strength: float, seed: int, noise_texts: Sequence[str] | None) -> list[str]:
    if not noise_texts:
        raise ValueError("nti needs noise_texts (texts outside the reference bag)")
    order = _rng(seed, "nti").permutation(len(bag))
    noise_order = _rng(seed, "nti", 1).permutation(len(noise_texts))
    out = list(bag)
    for r, pos in enumerate(order[:_count(strength, len(bag))]):
        out[pos] = noise_texts[int(noise_order[r % len(noise_texts)])]
    return out


def manipulate(bag: Sequence[str], manipulation: str, strength: float, *, seed: int = 0,
               noise_texts: Sequence[str] | None = None, alpha: float = 0.1,
               synonyms: Mapping[str, Sequence[str]] | None = None, head_share: float = 0.1) -> list[str]:
    """The reference ``bag`` manipulated at ``strength`` in [0, 1] (0 returns it unchanged); see the
    module docstring for each manipulation."""
    bag = list(bag)
    _count(strength, len(bag))  # validates strength
    if strength == 0 or not bag:
        return bag
    syn = SYNONYMS if synonyms is None else synonyms
    if manipulation == "tdm-peaked":
        return _tdm_peaked(bag, strength, seed, head_share)
    if manipulation == "tdm-flat":
        return _tdm_flat(bag, strength, seed)
    if manipulation == "nti":
        return _nti(bag, strength, seed, noise_texts)
    edits: dict[str, Callable[[str, np.random.Generator], str]] = {
        "eda-swap": lambda t, g: eda_swap(t, g, alpha),
        "eda-replace": lambda t, g: eda_replace(t, g, alpha, syn),
        "eda-delete": lambda t, g: eda_delete(t, g, alpha),
        "eda-insert": lambda t, g: eda_insert(t, g, alpha, syn),
        "style": lambda t, g: flatten_style(t),
    }
    if manipulation not in edits:
        raise ValueError(f"unknown manipulation {manipulation!r}; known: {', '.join(MANIPULATIONS)}")
    return _per_text(bag, strength, seed, manipulation, edits[manipulation])


# ------------------------------------------------------------------------------------------ validation
def _spearman(x: np.ndarray, y: np.ndarray) -> Any:
    """scipy's ``spearmanr`` (scipy.stats, 0.5 s to import, loaded when a correlation is first computed: every run
    imports this module through the metric catalogue)."""
    from scipy.stats import spearmanr

    return spearmanr(x, y)


def _rank_correlation(levels: np.ndarray, scores: np.ndarray, higher_is_better: bool) -> tuple[float, float, str | None]:
    finite = np.isfinite(scores)
    if finite.sum() < 3:
        return math.nan, math.nan, "fewer than 3 levels with a finite score"
    x, y = levels[finite], scores[finite]
    if np.ptp(y) == 0:
        return math.nan, math.nan, "metric is constant across levels"
    res = _spearman(x, y)
    sign = -1.0 if higher_is_better else 1.0  # a similarity should fall as the noise level rises
    return sign * float(res.statistic), float(res.pvalue), None


def validate_metrics(reference_bag: Sequence[str], metrics: Mapping[str, Metric], *,
                     manipulations: Sequence[str] = MANIPULATIONS, levels: Sequence[float] = LEVELS,
                     seed: int = 0, higher_is_better: Mapping[str, bool] | None = None,
                     noise_texts: Sequence[str] | None = None, alpha: float = 0.1,
                     synonyms: Mapping[str, Sequence[str]] | None = None, head_share: float = 0.1,
                     prefetch: Callable[[list[str]], Any] | None = None) -> pd.DataFrame:
    """Seed 003 §4.2: per manipulation, bags at every level are scored by each ``metric(reference, bag)``
    and the scores are Spearman-correlated with the level; ``rho`` is sign-corrected so +1 means the metric
    ranks the bags exactly in their true order (``higher_is_better[m]``, default True: a similarity).

    One row per (metric, manipulation): rho, p_value (scipy's two-sided), n_levels (finite scores),
    n_distinct_bags, reason (why rho is NaN: constant metric, unchanged bags, metric error), scores (one per
    level) and signature (manipulation, levels, seed, bag size and the manipulation's options; the
    metric's own signature is the caller's). Level 0 (the reference against itself) is part of the ranking. ``nti`` is skipped (with a
    reason) when no ``noise_texts`` are given. A metric that raises gets NaN and the error as reason.
    ``prefetch``, when given, sees every distinct text of every bag once before any metric runs (so a caller
    can embed them all in one pass instead of metric by metric)."""
    reference = list(reference_bag)
    levels_arr = np.asarray(levels, dtype=np.float64)
    if len(levels_arr) < 3 or np.any(np.diff(levels_arr) <= 0):
        raise ValueError(f"levels must be at least 3 strictly increasing strengths, got {list(levels)}")
    hib = dict(higher_is_better or {})
    planned: list[tuple[str, list[list[str]], int, str | None]] = []  # manipulation, bags, distinct, skip
    for manipulation in manipulations:
        if manipulation == "nti" and not noise_texts:
            planned.append((manipulation, [], 0, "nti needs noise_texts (texts outside the reference bag)"))
            continue
        bags = [manipulate(reference, manipulation, float(s), seed=seed, noise_texts=noise_texts,
                           alpha=alpha, synonyms=synonyms, head_share=head_share) for s in levels_arr]
        distinct = len({tuple(b) for b in bags})
        planned.append((manipulation, bags, distinct,
                        "manipulation left the bag unchanged at every level" if distinct == 1 else None))
    if prefetch is not None:
        prefetch(list(dict.fromkeys([*reference, *(t for _, bags, _, _ in planned for bag in bags for t in bag)])))
    rows = []
    for manipulation, bags, distinct, skip in planned:
        signature = make_signature(
            "metaeval", manipulation=manipulation, levels=",".join(f"{x:g}" for x in levels_arr), seed=seed,
            n=len(reference), corr="spearman-vs-level",
            alpha=alpha if manipulation.startswith("eda-") else None,
            synonyms=("builtin" if synonyms is None else "custom")
            if manipulation in ("eda-replace", "eda-insert") else None,
            head_share=head_share if manipulation == "tdm-peaked" else None,
            tokens="whitespace" if manipulation.startswith("eda-") else None,
        )
        for name, metric in metrics.items():
            row = {"metric": name, "manipulation": manipulation, "rho": math.nan, "p_value": math.nan,
                   "n_levels": 0, "n_distinct_bags": distinct, "reason": skip,
                   "scores": [], "signature": signature}
            if skip is None:
                try:
                    scores = np.array([float(metric(reference, b)) for b in bags], dtype=np.float64)
                except Exception as exc:  # a broken metric is reported, not fatal to the others
                    row["reason"] = f"metric raised {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                else:
                    rho, p, reason = _rank_correlation(levels_arr, scores, hib.get(name, True))
                    row.update(rho=rho, p_value=p, reason=reason, n_levels=int(np.isfinite(scores).sum()),
                               scores=scores.tolist())
            rows.append(row)
    return pd.DataFrame(rows, columns=["metric", "manipulation", "rho", "p_value", "n_levels", "n_distinct_bags",
                                       "reason", "scores", "signature"])


def run_metaeval(corpus_texts: Sequence[str], metrics: Mapping[str, Metric], *, bag_size: int = 100,
                 n_bags: int = 1, seed: int = 0, manipulations: Sequence[str] = MANIPULATIONS,
                 levels: Sequence[float] = LEVELS, higher_is_better: Mapping[str, bool] | None = None,
                 alpha: float = 0.1, synonyms: Mapping[str, Sequence[str]] | None = None,
                 head_share: float = 0.1, prefetch: Callable[[list[str]], Any] | None = None) -> pd.DataFrame:
    """``n_bags`` reference bags of ``bag_size`` texts (100: the seed's cap) sampled without replacement from
    the corpus with ``seed``; each bag's noise pool (for ``nti``) is every corpus text not in it. Returns
    :func:`validate_metrics` rows for every bag with a ``bag`` column (0..n_bags-1); average them with
    :func:`summarize_metaeval`."""
    texts = [t for t in corpus_texts if isinstance(t, str) and t.strip()]
    if len(texts) < 2:
        raise ValueError("run_metaeval needs at least 2 non-empty corpus texts")
    size = min(bag_size, len(texts) - 1)  # keep at least one text for the noise pool
    frames = []
    for b in range(n_bags):
        idx = _rng(seed, "bag", b).choice(len(texts), size=size, replace=False)
        bag = [texts[i] for i in idx]
        inside = set(bag)
        noise = [t for t in texts if t not in inside]
        frame = validate_metrics(bag, metrics, manipulations=manipulations, levels=levels, seed=seed + b,
                                 higher_is_better=higher_is_better, noise_texts=noise, alpha=alpha,
                                 synonyms=synonyms, head_share=head_share, prefetch=prefetch)
        frames.append(frame.assign(bag=b, bag_size=size))
    return pd.concat(frames, ignore_index=True)


def summarize_metaeval(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation of rho over bags per (metric, manipulation), with n_bags (all) and
    n_defined (bags with a finite rho) and the most common reason among undefined ones."""
    def first_reason(s: pd.Series) -> str | None:
        s = s.dropna()
        return None if s.empty else str(s.value_counts().index[0])

    grouped = rows.groupby(["metric", "manipulation"], sort=False)
    return grouped.agg(rho_mean=("rho", "mean"), rho_std=("rho", "std"), n_bags=("rho", "size"),
                       n_defined=("rho", "count"), reason=("reason", first_reason)).reset_index()


# ------------------------------------------------------------------------------------------ correlations
def metric_correlations(scores: pd.DataFrame, columns: Sequence[str] | None = None, *, absolute: bool = True,
                        min_periods: int = 3) -> pd.DataFrame:
    """Spearman matrix between metric columns of ``scores`` (rows: strategies, or samples), seed 000 Fig. 5.

    Each pair uses only the rows where both are finite (pairwise NaN handling); fewer than ``min_periods``
    such rows, or a constant column on them, give NaN. ``absolute=True`` (Fig. 5 shows absolute rank
    correlations) returns |rho|; the diagonal is 1 for a column with 2+ distinct finite values."""
    cols = list(columns) if columns is not None else [c for c in scores.columns
                                                      if pd.api.types.is_numeric_dtype(scores[c])]
    missing = [c for c in cols if c not in scores.columns]
    if missing:
        raise ValueError(f"metric_correlations: columns not in the scores: {missing}")
    values = scores[cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    k = len(cols)
    out = np.full((k, k), np.nan)
    for i in range(k):
        for j in range(i, k):
            ok = np.isfinite(values[:, i]) & np.isfinite(values[:, j])
            x, y = values[ok, i], values[ok, j]
            if ok.sum() < min_periods or np.ptp(x) == 0 or np.ptp(y) == 0:
                continue
            rho = 1.0 if i == j else float(_spearman(x, y).statistic)
            out[i, j] = out[j, i] = abs(rho) if absolute else rho
    return pd.DataFrame(out, index=cols, columns=cols)
