"""Style Transfer Intensity (STI) and Content Preservation Score (CPS), as defined in seed 002.

STI: a style classifier gives a class distribution for the source and for the output; STI is the Earth
Mover's Distance between the two, negated when the output moves away from the target style. Choices:

- ground distance: classes sit at ordinal positions ``linspace(0, 1, k)`` in the classifier's class order
  (distance between classes i and j = ``|i - j| / (k - 1)``), so the 1-D EMD equals
  ``scipy.stats.wasserstein_distance(pos, pos, p, q)`` and STI lies in [-1, 1] for every k (with two classes
  it is ``|p_out[target] - p_in[target]|``). ``positions`` overrides them. Signature ``ground:ordinal-unit``.
- direction: the output moves *toward* the target when its EMD to the one-hot target is not larger than the
  source's (for two classes: ``p_out[target] >= p_in[target]``, the seed's rule); else STI is negative.
  Signature ``direction:emd-to-target``.
- ``sti_pct``: the seed's "percentage of the total possible, directionally corrected gain": toward the
  target, ``100 * sti / EMD(source, onehot(target))``; away from it, ``100 * sti / EMD(source,
  onehot(away_class))`` (the share of the possible move back to the source style; ``away_class`` defaults to
  the class farthest from the target). A zero denominator (source already at the target and the output not
  moving away) gives NaN and a reason in ``sti_pct_reason``.

CPS: cosine similarity of sentence-encoder embeddings (SBERT; the ``sentence_encoder`` role) of the source
and the output, optionally after masking style tokens in both. Masking follows the seed: word attributions
are normalised to shares of the text's total absolute attribution, sorted descending, and the shortest
prefix whose cumulative share reaches ``threshold`` is masked (so the token crossing the threshold is
included and at least one token is masked when any attribution is positive). Choices:

- tokens are whole words (regex ``\\w+(?:'\\w+)*``), not word pieces (the improvement the seed suggests);
  punctuation is never masked; ``pad`` replaces a word by ``pad_token`` ("[PAD]"), ``remove`` deletes it.
- a text whose attributions are all zero keeps every token (the seed always masked one; it names that as
  a flaw, since it removes content from style-free texts).
- attribution (offline, no gradients; the seed used Integrated Gradients on a fine-tuned BERT):
  ``"occlusion"`` (default) = black-box occlusion with the style classifier, the mean of two effects
  measured as EMD between class distributions: leaving the word out of the text (contextual) and the word
  alone against the empty text (so redundant style words, which leave-one-out alone misses when the
  classifier saturates, still count). These are the first and last terms of a Shapley permutation; it costs
  2 * words + 1 classifier calls per text. The classifier defaults to :class:`SubjectivityClassifier` (the
  seed's style) and works with any StyleClassifier, including :class:`HFSequenceClassifier`;
  ``"vader-lexicon"`` = absolute VADER lexicon valence of the lowercased word (context-free).
- ``mask=None`` (no masking) is the default: the seed's search over thresholds 10-50% chose it.
- a text that is empty (or masked to nothing) gets NaN with a reason in ``cps_reason``.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import numpy as np
import pandas as pd

from tasks.errors import ModelUnavailable
from tasks.metrics.base import MetricResult, reason_column
from tasks.models import loaders
from tasks.models.embeddings import EmbeddingCache, sentence_embeddings
from tasks.models.loaders import device
from tasks.models.registry import ALLOW_DOWNLOADS_ENV, ModelSpec, model_id, resolve_model
from tasks.parallel import resource_lock
from tasks.signatures import make_signature

_WORD = re.compile(r"\w+(?:'\w+)*")
_ATOL = 1e-12


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# ------------------------------------------------------------------------------------------ classifiers
class StyleClassifier(Protocol):
    """What STI and CPS need from a style classifier: ordered class names, a probability matrix and an id
    for signatures."""

    classes: tuple[str, ...]
    id: str

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """(n, k) rows summing to 1, columns in ``classes`` order."""
        ...


@loaders.cache
def load_textblob_lexicon() -> int:
    """Load TextBlob's pattern sentiment lexicon (once per process, under the loaders' lock); returns its size.

    TextBlob fills the lexicon lazily on first use and decides by "is the dict still empty": two threads
    scoring at once either crash (``dictionary changed size during iteration``) or one of them scores with a
    half-filled lexicon and returns wrong subjectivities without an error."""
    from textblob.en import sentiment

    return len(sentiment)


@loaders.cache
def load_vader() -> Any:
    """One VADER SentimentIntensityAnalyzer per process (its lexicon is read-only once built)."""
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


class SubjectivityClassifier:
    """TextBlob's PatternAnalyzer subjectivity s (bundled lexicon, offline) as ``[1 - s, s]`` for the
    classes (objective, subjective)."""

    classes: tuple[str, ...] = ("objective", "subjective")

    def __init__(self) -> None:
        from textblob.en.sentiments import PatternAnalyzer

        load_textblob_lexicon()
        self._analyzer = PatternAnalyzer()
        self.id = f"textblob-{_version('textblob')}-pattern-subjectivity"

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        s = np.array([float(self._analyzer.analyze(t).subjectivity) if t.strip() else 0.0 for t in texts],
                     dtype=np.float64).reshape(-1)
        s = np.clip(s, 0.0, 1.0)
        return np.stack([1.0 - s, s], axis=1) if len(s) else np.zeros((0, 2))


class VaderClassifier:
    """VADER's neg/neu/pos proportions, normalised to sum 1 (an empty or all-zero row counts as neutral),
    for the classes (negative, neutral, positive) in that ordinal order."""

    classes: tuple[str, ...] = ("negative", "neutral", "positive")

    def __init__(self) -> None:
        self._analyzer = load_vader()
        self.id = f"vader-{_version('vaderSentiment')}"

    @property
    def lexicon(self) -> dict[str, float]:
        return self._analyzer.lexicon

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            s = self._analyzer.polarity_scores(text)
            rows.append([s["neg"], s["neu"], s["pos"]])
        out = np.array(rows, dtype=np.float64).reshape(-1, 3)
        total = out.sum(axis=1, keepdims=True)
        zero = total[:, 0] <= 0
        out[zero] = [0.0, 1.0, 0.0]
        total[zero] = 1.0
        return out / total


@loaders.cache
def _load_sequence_classifier(spec: ModelSpec) -> tuple[object, object]:
    local = not spec.allow_downloads
    try:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(spec.path, local_files_only=local)
        model = AutoModelForSequenceClassification.from_pretrained(spec.path, local_files_only=local)
    except (OSError, ValueError, ImportError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelUnavailable(
            f"style classifier: cannot load {spec.name} from {spec.path} ({type(exc).__name__}: {first}); give "
            f"a local fine-tuned sequence-classification folder, or set {ALLOW_DOWNLOADS_ENV}=1"
        ) from exc

    return tokenizer, model.eval().to(device())


class HFSequenceClassifier:
    """Softmax of a transformers AutoModelForSequenceClassification (e.g. the seed's fine-tuned BERT
    subjectivity classifier); ``model`` is a ModelSpec, a local folder or a hub id (resolved offline as the
    ``classifier_backbone`` role). Classes come from ``config.id2label`` in id order. Texts are truncated to
    ``max_length`` tokens and run in batches sorted by length."""

    def __init__(self, model: ModelSpec | str, *, batch_size: int = 32, max_length: int = 512) -> None:
        self.spec = model if isinstance(model, ModelSpec) else resolve_model("classifier_backbone", model)
        self.batch_size = batch_size
        self.max_length = max_length
        _, net = _load_sequence_classifier(self.spec)
        id2label = net.config.id2label
        self.classes = tuple(str(id2label[i]) for i in range(int(net.config.num_labels)))
        self.id = f"{model_id(self.spec)}|maxlen={max_length}"

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        tokenizer, net = _load_sequence_classifier(self.spec)
        texts = list(texts)
        out = np.zeros((len(texts), len(self.classes)), dtype=np.float64)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        dev = next(net.parameters()).device
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            with resource_lock(tokenizer):  # a fast tokenizer's truncation setting is shared mutable state
                enc = tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                max_length=self.max_length, return_tensors="pt")
            with torch.inference_mode():
                logits = net(**{k: v.to(dev) for k, v in enc.items()}).logits
            out[idx] = torch.softmax(logits.float(), dim=-1).cpu().numpy()
        return out


# ------------------------------------------------------------------------------------------ STI
def class_positions(k: int) -> np.ndarray:
    """Default ordinal positions of k classes: ``linspace(0, 1, k)`` (unit span)."""
    return np.linspace(0.0, 1.0, k) if k > 1 else np.zeros(1)


def emd_1d(p: np.ndarray, q: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Row-wise EMD between distributions p and q (n, k) over classes at sorted 1-D ``positions``:
    ``sum_i |CDF_p(i) - CDF_q(i)| * (pos[i+1] - pos[i])`` (equal to scipy's wasserstein_distance)."""
    p, q = np.atleast_2d(p), np.atleast_2d(q)
    gaps = np.diff(positions)
    diff = np.cumsum(p - q, axis=1)[:, :-1]
    return np.abs(diff) @ gaps


def _class_index(classes: Sequence[str], which: int | str, what: str) -> int:
    if isinstance(which, str):
        if which not in classes:
            raise ValueError(f"{what} {which!r} is not one of the classifier's classes {list(classes)}")
        return list(classes).index(which)
    if not 0 <= which < len(classes):
        raise ValueError(f"{what} index {which} is out of range for classes {list(classes)}")
    return int(which)


def sti(sources: Sequence[str], outputs: Sequence[str], *, classifier: StyleClassifier,
        target_class: int | str, away_class: int | str | None = None,
        positions: Sequence[float] | None = None) -> MetricResult:
    """Style Transfer Intensity per (source, output) pair: columns ``sti`` (signed EMD in [-1, 1] with the
    default positions), ``sti_pct`` (signed % of the possible gain) and ``sti_pct_reason``; see the module
    docstring for the ground distance, the direction rule and the denominators."""
    sources, outputs = list(sources), list(outputs)
    if len(sources) != len(outputs):
        raise ValueError(f"sti: {len(sources)} sources but {len(outputs)} outputs")
    classes = tuple(classifier.classes)
    k = len(classes)
    pos = class_positions(k) if positions is None else np.asarray(positions, dtype=np.float64)
    if pos.shape != (k,) or np.any(np.diff(pos) <= 0):
        raise ValueError(f"sti: positions must be {k} strictly increasing numbers, got {list(pos)}")
    t = _class_index(classes, target_class, "target_class")
    a = int(np.argmax(np.abs(pos - pos[t]))) if away_class is None else _class_index(classes, away_class,
                                                                                     "away_class")
    probs = classifier.predict_proba(sources + outputs) if sources else np.zeros((0, k))
    p_in, p_out = probs[:len(sources)], probs[len(sources):]
    onehot_t = np.zeros(k)
    onehot_t[t] = 1.0
    onehot_a = np.zeros(k)
    onehot_a[a] = 1.0
    emd = emd_1d(p_in, p_out, pos)
    d_in = emd_1d(p_in, onehot_t[None, :], pos)
    d_out = emd_1d(p_out, onehot_t[None, :], pos)
    toward = d_out <= d_in + _ATOL
    value = np.where(toward, emd, -emd)
    possible = np.where(toward, d_in, emd_1d(p_in, onehot_a[None, :], pos))
    undefined = possible <= _ATOL
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = np.where(undefined, np.nan, 100.0 * value / np.where(undefined, 1.0, possible))
    reasons = [("source already at the target style: no possible gain" if toward[i]
                else "source already at the away class: no possible loss") if undefined[i] else None
               for i in range(len(sources))]
    scores = pd.DataFrame({"sti": value, "sti_pct": pct, reason_column("sti_pct"): pd.Series(reasons, dtype=object)})
    common = dict(classifier=classifier.id, classes="/".join(classes), target=classes[t],
                  ground="ordinal-unit" if positions is None else "positions:" + ",".join(f"{x:g}" for x in pos),
                  direction="emd-to-target")
    return MetricResult(scores=scores, signatures={
        "sti": make_signature("sti", **common),
        "sti_pct": make_signature("sti_pct", **common, away=classes[a]),
    })


# ------------------------------------------------------------------------------------------ CPS
Attribution = Literal["occlusion", "vader-lexicon"]


def word_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every word (``\\w+(?:'\\w+)*``) in ``text``; punctuation is not a word."""
    return [m.span() for m in _WORD.finditer(text)]


def _drop(text: str, spans: Sequence[tuple[int, int]], replacement: str) -> str:
    out, last = [], 0
    for start, end in sorted(spans):
        out.append(text[last:start])
        out.append(replacement)
        last = end
    out.append(text[last:])
    joined = "".join(out)
    if replacement == "":
        joined = re.sub(r"[ \t]{2,}", " ", joined).strip()
        joined = re.sub(r" +([,.;:!?])", r"\1", joined)
    return joined


def style_attributions(texts: Sequence[str], *, attribution: Attribution = "occlusion",
                       classifier: StyleClassifier | None = None) -> list[np.ndarray]:
    """Non-negative attribution of every word of every text (one array per text, in word order); see the
    module docstring for ``occlusion`` and ``vader-lexicon``."""
    texts = list(texts)
    spans = [word_spans(t) for t in texts]
    if attribution == "vader-lexicon":
        lexicon = (classifier if isinstance(classifier, VaderClassifier) else VaderClassifier()).lexicon
        return [np.array([abs(float(lexicon.get(t[s:e].lower(), 0.0))) for s, e in sp]) for t, sp in
                zip(texts, spans, strict=True)]
    if attribution != "occlusion":
        raise ValueError(f"attribution must be 'occlusion' or 'vader-lexicon', got {attribution!r}")
    clf = classifier or SubjectivityClassifier()
    variants: list[str] = [""]  # the empty text is the baseline of the word-alone term
    for text, sp in zip(texts, spans, strict=True):
        variants.append(text)
        variants.extend(_drop(text, [s], "") for s in sp)
        variants.extend(text[s:e] for s, e in sp)
    probs = clf.predict_proba(variants)
    pos = class_positions(len(clf.classes))
    baseline = probs[0]
    out, i = [], 1
    for sp in spans:
        n = len(sp)
        full, without, alone = probs[i], probs[i + 1:i + 1 + n], probs[i + 1 + n:i + 1 + 2 * n]
        if n:
            loo = emd_1d(np.repeat(full[None, :], n, axis=0), without, pos)
            solo = emd_1d(np.repeat(baseline[None, :], n, axis=0), alone, pos)
            out.append(0.5 * (loo + solo))
        else:
            out.append(np.zeros(0))
        i += 1 + 2 * n
    return out


def select_style_words(attributions: np.ndarray, threshold: float) -> np.ndarray:
    """Indices of the words to mask: the shortest prefix of words sorted by normalised |attribution|
    (descending, ties by position) whose cumulative share reaches ``threshold``; none when all are zero."""
    a = np.abs(np.asarray(attributions, dtype=np.float64))
    total = a.sum()
    if len(a) == 0 or total <= 0:
        return np.zeros(0, dtype=int)
    order = np.argsort(-a, kind="stable")
    cum = np.cumsum(a[order] / total)
    n = int(np.searchsorted(cum, threshold - 1e-12)) + 1
    order = order[:min(n, len(a))]
    return np.sort(order[a[order] > 0])


def mask_style(texts: Sequence[str], *, mode: Literal["pad", "remove"] = "pad", threshold: float = 0.3,
               attribution: Attribution = "occlusion", classifier: StyleClassifier | None = None,
               pad_token: str = "[PAD]") -> list[str]:
    """Texts with their style words replaced by ``pad_token`` (``pad``) or deleted (``remove``)."""
    if mode not in ("pad", "remove"):
        raise ValueError(f"mask must be None, 'pad' or 'remove', got {mode!r}")
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    texts = list(texts)
    attrs = style_attributions(texts, attribution=attribution, classifier=classifier)
    out = []
    for text, att in zip(texts, attrs, strict=True):
        spans = word_spans(text)
        chosen = [spans[i] for i in select_style_words(att, threshold)]
        out.append(_drop(text, chosen, pad_token if mode == "pad" else "") if chosen else text)
    return out


def cps(sources: Sequence[str], outputs: Sequence[str], *, spec: ModelSpec | None = None,
        cache: EmbeddingCache | None = None, mask: Literal["pad", "remove"] | None = None,
        threshold: float = 0.3, attribution: Attribution = "occlusion", classifier: StyleClassifier | None = None,
        pad_token: str = "[PAD]", batch_size: int = 64) -> MetricResult:
    """Content Preservation Score per pair: cosine of the sentence embeddings of source and output (after
    style masking of both when ``mask`` is set); columns ``cps`` and ``cps_reason``."""
    sources, outputs = list(sources), list(outputs)
    if len(sources) != len(outputs):
        raise ValueError(f"cps: {len(sources)} sources but {len(outputs)} outputs")
    spec = spec or resolve_model("sentence_encoder")
    if mask is not None:
        clf = classifier or (SubjectivityClassifier() if attribution == "occlusion" else None)
        masked = mask_style(sources + outputs, mode=mask, threshold=threshold, attribution=attribution,
                            classifier=clf, pad_token=pad_token)
        src, out = masked[:len(sources)], masked[len(sources):]
    else:
        clf = None
        src, out = sources, outputs
    n = len(src)
    values = np.full(n, np.nan)
    reasons: list[str | None] = [None] * n

    def empty(t: str) -> bool:
        return not t.replace(pad_token, "").strip() if mask == "pad" else not t.strip()

    ok = [i for i in range(n) if not empty(src[i]) and not empty(out[i])]
    for i in set(range(n)) - set(ok):
        reasons[i] = "empty text" + (" after style masking" if mask else "")
    if ok:
        emb = sentence_embeddings([src[i] for i in ok] + [out[i] for i in ok], spec, cache=cache,
                                  batch_size=batch_size).astype(np.float64)
        emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        a, b = emb[:len(ok)], emb[len(ok):]
        values[ok] = np.einsum("ij,ij->i", a, b)
    scores = pd.DataFrame({"cps": values, reason_column("cps"): pd.Series(reasons, dtype=object)})
    signature = make_signature(
        "cps", model=model_id(spec), similarity="cosine", mask=mask or "none",
        threshold=threshold if mask else None, attribution=attribution if mask else None,
        attr_classifier=(clf.id if clf is not None else None) if mask and attribution == "occlusion" else None,
        pad=pad_token if mask == "pad" else None, tokens="words" if mask else None,
    )
    return MetricResult(scores=scores, signatures={"cps": signature})
