"""``verbatim``: the share of documents whose synthetic version still contains a long run of their own source.

A document is *verbatim* when its output and its own source share a substring of at least ``min_chars``
characters (30 by default, ``metrics.verbatim.min_chars``). Pasting such a run into a search engine finds
the original post, whatever else was rewritten: a pseudonymised copy (names swapped, every other word the
source's) is verbatim, and so is an unchanged copy.

The comparison (:func:`normalise`, named ``casefold+words`` in the signature): both texts read as their words,
case folded (``str.casefold``): every character that is not a letter or digit (punctuation, symbols, whitespace)
breaks words, and a run of breaks is one space, the ends stripped. A search engine reads text this way, so a run
that differs only in case, spacing or punctuation finds the source as surely: "Well, Mr. President, like who?" is a
copy of "Well, Mr President, like who?", and a sentence split in two at a comma still holds the
run across the full stop. (Lower-casing or re-punctuating a text would otherwise pass for rewriting it.)
``min_chars`` counts characters of the normalised texts.

A text shorter than ``min_chars`` (after normalising) holds no such run; such an output is verbatim only
when it equals its source (an unchanged "Thank you." is a copy; a short output that is a fragment of a long
source, or a short source kept whole inside a longer output, is not). An empty output is never verbatim.
Failed generations (status not ``ok``) are not scored.

The check is a set of the shorter text's ``min_chars``-windows looked up with the longer text's windows
(linear in the two lengths; the first shared window ends the scan), in pure Python: 17,800 pairs of
150-character documents in 0.6 s when no run is shared (every window looked up, the slowest case), 0.06 s
for copies (``benchmarks/verbatim.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tasks.corpus.schema import STATUS_OK
from tasks.intervals import wilson
from tasks.metrics.base import VERBATIM_MIN_CHARS
from tasks.scores import score_frame
from tasks.signatures import make_signature

METRIC = "verbatim"
#: The shortest shared run (characters of the normalised texts) that makes a document verbatim.
DEFAULT_MIN_CHARS = VERBATIM_MIN_CHARS
#: How texts are compared (see the module docstring), as the signature names it.
COMPARISON = "casefold+words"
FAILED = "generation failed"
NO_PAIRS = "no scored pairs"


#: A run of characters that separate words for the comparison: anything but a letter or digit (``str.isalnum``).
_WORD_BREAKS = re.compile(r"[\W_]+")


def normalise(text: str) -> str:
    """``text`` as the comparison reads it: its words, case folded, one space between them (see the module)."""
    return _WORD_BREAKS.sub(" ", str(text)).strip().casefold()


def normalise_with_offsets(text: str) -> tuple[str, np.ndarray]:
    """:func:`normalise`'s text and, per character of it, the offset in ``text`` of the character it comes from (to
    point at a shared run in the text as written)."""
    chars: list[str] = []
    where: list[int] = []
    for i, c in enumerate(str(text)):
        if not c.isalnum():
            if chars and chars[-1] != " ":
                chars.append(" ")
                where.append(i)
            continue
        folded = c.casefold()
        chars += folded
        where += [i] * len(folded)
    if chars and chars[-1] == " ":
        chars.pop()
        where.pop()
    return "".join(chars), np.array(where, np.int64)


def _check_min_chars(min_chars: int) -> int:
    if isinstance(min_chars, bool) or not isinstance(min_chars, int | np.integer) or min_chars < 1:
        raise ValueError(f"min_chars must be a positive integer, got {min_chars!r}")
    return int(min_chars)


def shares_run(source: str, output: str, min_chars: int = DEFAULT_MIN_CHARS) -> bool:
    """Whether two texts, already normalised (:func:`normalise`), share a substring of ``min_chars`` or more
    characters, or are equal and non-empty."""
    if source == output:
        return bool(output)
    short, long = (source, output) if len(source) <= len(output) else (output, source)
    k = min_chars
    if len(short) < k:
        return False
    windows = {short[i:i + k] for i in range(len(short) - k + 1)}
    return any(long[j:j + k] in windows for j in range(len(long) - k + 1))


def verbatim_flags(sources: Sequence[str], outputs: Sequence[str], min_chars: int = DEFAULT_MIN_CHARS) -> np.ndarray:
    """Per aligned (source, output) pair: does the output contain a run of at least ``min_chars`` characters of
    its own source (or equal it)? Texts compared as :func:`normalise` makes them; a boolean array."""
    k = _check_min_chars(min_chars)
    if len(sources) != len(outputs):
        raise ValueError(f"{len(sources)} sources for {len(outputs)} outputs")
    return np.fromiter((shares_run(normalise(s), normalise(o), k) for s, o in zip(sources, outputs, strict=True)),
                       dtype=bool, count=len(sources))


@dataclass(frozen=True)
class VerbatimFigure:
    """The share of verbatim documents among ``n`` scored ones, with its Wilson 95% interval (NaN when n is 0)."""

    value: float
    ci_low: float
    ci_high: float
    n: int
    verbatim: int


def verbatim_figure(flags: Sequence[bool] | np.ndarray) -> VerbatimFigure:
    """The share of True flags (:func:`verbatim_flags` of the scored pairs) with its Wilson 95% interval."""
    flags = np.asarray(flags, dtype=bool)
    n, k = len(flags), int(flags.sum())
    low, high = wilson(k, n)
    return VerbatimFigure(value=k / n if n else float("nan"), ci_low=low, ci_high=high, n=n, verbatim=k)


def verbatim_share(sources: Sequence[str], outputs: Sequence[str],
                   min_chars: int = DEFAULT_MIN_CHARS) -> VerbatimFigure:
    """:func:`verbatim_figure` of :func:`verbatim_flags`: the share of verbatim documents among these pairs."""
    return verbatim_figure(verbatim_flags(sources, outputs, min_chars))


def verbatim_signature(min_chars: int = DEFAULT_MIN_CHARS) -> str:
    """The figure's signature: the metric, the shortest run and the comparison."""
    return make_signature(METRIC, min_chars=_check_min_chars(min_chars), match=COMPARISON)


def verbatim_scores(pairs: pd.DataFrame, min_chars: int = DEFAULT_MIN_CHARS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per pair (columns doc_id, strategy, variant, status, source, text): ``verbatim`` 1.0 / 0.0 (NaN with
    ``verbatim_reason`` for a failed generation), and per (strategy, variant) a long score row: the share of
    verbatim documents among the scored ones, its Wilson interval, ``n`` and ``n_failed``."""
    ok = (pairs["status"] == STATUS_OK).to_numpy()
    sources = pairs["source"].astype(str).to_numpy()[ok].tolist()
    outputs = pairs["text"].astype("string").fillna("").to_numpy()[ok].tolist()
    values = np.full(len(pairs), np.nan)
    values[ok] = verbatim_flags(sources, outputs, min_chars)
    per_pair = pd.DataFrame({"doc_id": pairs["doc_id"].to_numpy(), "strategy": pairs["strategy"].to_numpy(),
                             "variant": pairs["variant"].to_numpy(), METRIC: values,
                             f"{METRIC}_reason": pd.Series([None if o else FAILED for o in ok], dtype="string")})
    signature = verbatim_signature(min_chars)
    rows: list[dict[str, Any]] = []
    for (strategy, variant), part in per_pair.groupby(["strategy", "variant"], sort=False):
        scored = part[METRIC].dropna().to_numpy() == 1.0
        figure = verbatim_figure(scored)
        rows.append({"strategy": strategy, "variant": variant, "level": "privacy", "metric": METRIC,
                     "value": figure.value, "std": np.nan, "median": np.nan, "n": figure.n,
                     "n_failed": int(part[METRIC].isna().sum()), "ci_low": figure.ci_low, "ci_high": figure.ci_high,
                     "signature": signature, "reason": None if figure.n else NO_PAIRS})
    return per_pair.drop(columns="strategy"), score_frame(rows)
