"""Attribute profiling: how well can an adversary's classifier infer a sensitive attribute (seed 000 §3.4,
§5.1.2), on real text and on each synthetic version of it?

The adversary trains on the REAL train split (label ``attr_<name>``), then predicts the attribute of the
real test split and of each synthetic rewrite of the test split; the rewrite keeps the real document's
label (joined by ``doc_id``). Less accuracy on synthetic text = more group privacy. The article measures
"reduction in profiling accuracy"; we report it paired (original vs synthetic on the same covered test
documents) and against chance.

Choices:

- chance = the majority-class rate of the evaluated test units (what a constant guess scores). 1/n_classes
  (``uniform_rate``) is reported too; for balanced data both agree.
- ``advantage_removed`` = (orig - synth) / (orig - chance): the share of the adversary's advantage over
  chance that the rewrite removed (1 = down to chance; NaN when the original is not above chance).
- Readable evidence (seed 004): per-class top weighted words of the linear model (appendix B), and the
  distribution of each text set's word tokens over bins of classifier weight (appendix C): clear
  (-inf, -0.3], slightly (-0.3, -0.1], neutral (-0.1, 0.1], slightly (0.1, 0.3], clear (0.3, inf), intervals
  closed on the right as written there. A token's weight is its unigram coefficient in the linear model
  towards the class (binary: towards ``classes_[1]``, so the negative side is ``classes_[0]``; multiclass:
  one set of bins per class, one-vs-rest direction); a token outside the model's vocabulary weighs 0
  (neutral). Shares count token occurrences and sum to 1 per (set, class). These word tables always come
  from a linear model, also when ``model='encoder'`` (a linear model is then fitted alongside).
- ``level='author'``: every author's posts in a split are concatenated into one unit (timeline-level
  profiling); the unit's label is the author's most frequent attribute value.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from tasks.corpus.schema import ATTR_PREFIX, STATUS_OK
from tasks.errors import InputError
from tasks.intervals import N_RESAMPLES, Residual, bootstrap, residual_risk, wilson
from tasks.models.registry import model_id, resolve_model
from tasks.scores import ORIGINAL
from tasks.training.classifiers import EncoderClassifier, LinearTextClassifier
from tasks.training.task_metrics import macro_f1_codes

#: seed 004 appendix C: bin edges of classifier weight (clear / slightly / neutral / slightly / clear)
BIN_EDGES: tuple[float, ...] = (-0.3, -0.1, 0.1, 0.3)


@dataclass
class ProfilingResult:
    """Profiling scores and their evidence; every table is a DataFrame.

    ``scores``: one row per text set (``original`` first, then each synthetic set): n_units, coverage,
    accuracy, macro_f1, orig_accuracy/orig_macro_f1 (real text of the same units), reduction
    (orig_accuracy - accuracy), reduction_f1, chance, above_chance, advantage_removed, and the intervals of
    :func:`intervals` (n_correct, accuracy_ci_*, macro_f1_ci_*, advantage and advantage_ci_*).
    ``predictions``: set, unit, y_true, y_pred. ``top_words``: class, rank, word, weight.
    ``word_bins``: set, class, bin, lower, upper, n_words, share."""

    attribute: str
    model: str
    level: str
    classes: list[Any]
    scores: pd.DataFrame
    predictions: pd.DataFrame
    top_words: pd.DataFrame
    word_bins: pd.DataFrame
    counts: dict[str, int] = field(default_factory=dict)
    chance_definition: str = "majority-class rate of the evaluated test units"
    signature: str = ""


def _attr_column(corpus: pd.DataFrame, attr: str) -> str:
    col = attr if attr.startswith(ATTR_PREFIX) else ATTR_PREFIX + attr
    if col not in corpus.columns:
        have = [c for c in corpus.columns if c.startswith(ATTR_PREFIX)]
        raise InputError(f"attribute column is missing (attribute columns present: {have or 'none'})",
                         column=col)
    return col


def _require(df: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    for col in columns:
        if col not in df.columns:
            raise InputError(f"{what} has no column '{col}' (columns: {', '.join(map(str, df.columns))})",
                             column=col)


def _mode(values: pd.Series) -> Any:
    counts = values.value_counts()
    return counts.index[0] if len(counts) else None  # ties: value_counts keeps first-seen order


def _units(docs: pd.DataFrame, level: str, labels: dict | None = None) -> pd.DataFrame:
    """(unit, text, y) rows: one per document, or one per author (texts joined by newlines)."""
    if level == "post":
        return pd.DataFrame({"unit": docs["doc_id"].astype(str).to_numpy(), "text": docs["text"].to_numpy(),
                             "y": docs["y"].to_numpy()})
    sort = [c for c in ("author_id", "group_id", "position") if c in docs.columns]
    ordered = docs.sort_values(sort, kind="mergesort")
    grouped = ordered.groupby("author_id", sort=True)
    text = grouped["text"].agg(lambda s: "\n".join(s.astype(str)))
    y = pd.Series(labels) if labels is not None else grouped["y"].agg(_mode)
    return pd.DataFrame({"unit": text.index.astype(str), "text": text.to_numpy(),
                         "y": y.reindex(text.index).to_numpy()})


def author_units(docs: pd.DataFrame, col: str) -> pd.DataFrame:
    """(unit, text, y): each author's posts with a value of ``col`` joined into one unit (timeline-level
    profiling), labelled with the author's most frequent value; rows without an author or a value left out."""
    rows = docs[docs[col].notna() & docs["author_id"].notna()]
    return _units(rows.assign(author_id=rows["author_id"].astype(str), y=rows[col]), "author")


def evidence_words(model: LinearTextClassifier, texts: list[str], classes: list[Any], top: int) -> list[list[str]]:
    """Per text, the words in it that pull ``model`` towards its class (positive weight, strongest first, ties
    by word; the ``top`` strongest), each in every casing the text writes it, so that masking finds them."""
    weights = model.word_weights()
    tokenizer = model.pipeline_.named_steps["tfidf"].build_tokenizer()
    out = []
    for text, cls in zip(texts, classes, strict=True):
        surfaces: dict[str, set[str]] = {}
        for token in tokenizer(text):
            surfaces.setdefault(token.lower(), set()).add(token)
        w = weights[cls].reindex(list(surfaces)).dropna()
        w = w[w > 0].rename("weight").rename_axis("word").reset_index()
        w = w.sort_values(["weight", "word"], ascending=[False, True], kind="mergesort").head(top)
        out.append([s for word in w["word"] for s in sorted(surfaces[word])])
    return out


def _score(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[float, float]:
    from sklearn.metrics import accuracy_score, f1_score

    if len(y_true) == 0:
        return float("nan"), float("nan")
    labels = sorted(set(y_true.tolist()) | set(y_pred.tolist()), key=str)
    return (float(accuracy_score(y_true, y_pred)),
            float(f1_score(y_true, y_pred, average="macro", labels=labels, zero_division=0)))


def _majority_count(y: np.ndarray) -> int:
    return int(pd.Series(y).value_counts().iloc[0]) if len(y) else 0


def intervals(y: np.ndarray, pred: np.ndarray, *, n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """The 95% intervals of one set's profiling figures: accuracy (Wilson), macro-F1 (percentile bootstrap
    over units), and the advantage over the majority class (Anonymeter's residual risk with the majority
    class of the same units as the control attack)."""
    n = len(y)
    n_correct = int((y == pred).sum()) if n else 0
    codes = pd.factorize(np.concatenate([y, pred]).astype(str))[0].reshape(2, n).T if n else np.zeros((0, 2), int)
    f1_ci = bootstrap(codes, macro_f1_codes, n_resamples=n_resamples, seed=seed)
    acc_ci = wilson(n_correct, n)
    risk = advantage(y, pred)
    return {"n_correct": n_correct, "accuracy_ci_low": acc_ci[0], "accuracy_ci_high": acc_ci[1],
            "macro_f1_ci_low": f1_ci[0], "macro_f1_ci_high": f1_ci[1], "advantage": risk.value,
            "advantage_ci_low": risk.ci_low, "advantage_ci_high": risk.ci_high}


def advantage(y: np.ndarray, pred: np.ndarray) -> Residual:
    """The classifier's advantage over the majority class: Anonymeter's residual risk of its predictions
    ``pred`` with the majority class of the same units ``y`` as the control attack."""
    n = len(y)
    return residual_risk(int((y == pred).sum()) if n else 0, n, _majority_count(y), n)


def relabelled(y: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """The predictions of an attacker who knows how the evaluated units were selected: each predicted value
    replaced by the true value most common among the units given it (ties keep the prediction). A set kept
    because a similar classifier got it wrong (protect's ``on_fail: drop``) is then no safer than the
    classifier's errors make it: predictions that are reliably wrong (a flipped binary attribute) count as
    the information they are."""
    y, pred = np.asarray(y, dtype=object), np.asarray(pred, dtype=object)
    out = pred.copy()
    for value in pd.unique(pred):
        given = pred == value
        counts = pd.Series(y[given]).value_counts()
        if len(counts) and counts.iloc[0] > counts.get(value, 0):
            out[given] = counts.index[0]
    return out


def _synthetic_sets(synthetic: dict[str, pd.DataFrame] | None) -> list[tuple[str, pd.DataFrame, int]]:
    """(set name, ok rows with one row per doc_id, rows dropped as duplicates); one set per variant."""
    out = []
    for name, frame in (synthetic or {}).items():
        _require(frame, ("doc_id", "text"), f"synthetic set '{name}'")
        rows = frame[frame["status"] == STATUS_OK] if "status" in frame.columns else frame
        rows = rows[np.asarray([isinstance(t, str) for t in rows["text"]], dtype=bool)]
        variants = rows["variant"].dropna().unique().tolist() if "variant" in rows.columns else []
        parts = ([(f"{name}/{v}", rows[rows["variant"] == v]) for v in variants] if len(variants) > 1
                 else [(str(name), rows)])
        for set_name, part in parts:
            dedup = part.drop_duplicates("doc_id", keep="first")
            out.append((set_name, dedup.assign(doc_id=dedup["doc_id"].astype(str)), len(part) - len(dedup)))
    return out


def word_bin_shares(model: LinearTextClassifier, texts: list[str], *,
                    edges: tuple[float, ...] = BIN_EDGES) -> pd.DataFrame:
    """Share of the word tokens of ``texts`` in each weight bin of ``model`` (seed 004, appendix C).

    Columns: class (the direction: weights towards it are positive), bin, lower, upper, n_words, share.
    Bins are closed on the right: (-inf, e0], (e0, e1], ..., (e_last, inf)."""
    weights = model.word_weights()
    classes = list(model.classes_)
    directions = [classes[1]] if len(classes) == 2 else classes
    counts = Counter(tok for text in texts for tok in model.tokenize(text))
    words = list(counts)
    n = np.asarray([counts[w] for w in words], dtype=float)
    bounds = [-np.inf, *edges, np.inf]
    rows = []
    for cls in directions:
        w = weights[cls].reindex(words).fillna(0.0).to_numpy() if words else np.zeros(0)
        # right-closed bins: index i such that bounds[i] < w <= bounds[i+1]
        idx = np.searchsorted(np.asarray(edges), w, side="left")
        neg = classes[0] if len(classes) == 2 else f"not {cls}"
        names = _bin_names(len(edges) + 1, neg, cls)
        total = n.sum()
        for b in range(len(edges) + 1):
            k = float(n[idx == b].sum())
            rows.append({"class": cls, "bin": names[b], "lower": bounds[b], "upper": bounds[b + 1],
                         "n_words": int(k), "share": k / total if total else float("nan")})
    return pd.DataFrame(rows)


def _bin_names(n_bins: int, neg: Any, pos: Any) -> list[str]:
    if n_bins == 5:
        return [f"clear {neg}", f"slightly {neg}", "neutral", f"slightly {pos}", f"clear {pos}"]
    return [f"bin {i}" for i in range(n_bins)]


def profile_attribute(corpus: pd.DataFrame, attr: str, *, synthetic: dict[str, pd.DataFrame] | None = None,
                      model: Literal["linear", "encoder"] = "linear", seed: int = 0,
                      level: Literal["post", "author"] = "post", top_k: int = 20,
                      bin_edges: tuple[float, ...] = BIN_EDGES, linear_params: dict | None = None,
                      encoder_params: dict | None = None, spec: Any = None,
                      n_resamples: int = N_RESAMPLES) -> ProfilingResult:
    """Train an attribute classifier on the real train split, score it on the real test split and on each
    synthetic version of it (see the module docstring for every choice).

    ``synthetic`` maps a set name (e.g. a strategy) to a synthetic table (doc_id, text, status[, variant]);
    only ``status == ok`` rows count, a table with several variants gives one set per variant.
    ``n_resamples``: the bootstrap resamples of the macro-F1 interval.
    ``level='author'`` profiles authors (timelines) instead of posts."""
    if model not in ("linear", "encoder"):
        raise ValueError(f"model must be 'linear' or 'encoder', got {model!r}")
    if level not in ("post", "author"):
        raise ValueError(f"level must be 'post' or 'author', got {level!r}")
    col = _attr_column(corpus, attr)
    _require(corpus, ("doc_id", "text", "split") + (("author_id",) if level == "author" else ()), "corpus")
    docs = corpus.assign(doc_id=corpus["doc_id"].astype(str), y=corpus[col])
    if level == "author":  # author ids are unit keys: compare them as strings
        docs["author_id"] = docs["author_id"].where(docs["author_id"].isna(), docs["author_id"].astype(str))
    has_label = docs["y"].notna()
    train, test = docs[docs["split"] == "train"], docs[docs["split"] == "test"]
    counts = {"n_train_docs": len(train), "n_train_missing_attr": int((~has_label[train.index]).sum()),
              "n_test_docs": len(test), "n_test_missing_attr": int((~has_label[test.index]).sum())}
    train, test = train[train["y"].notna()], test[test["y"].notna()]
    if level == "author":
        train, test = train[train["author_id"].notna()], test[test["author_id"].notna()]
    if test.empty:
        raise InputError(f"no test-split document has attribute '{col}'; profiling needs labelled test documents",
                         column=col)
    train_units = _units(train, level)
    test_units = _units(test, level)
    author_label = dict(zip(test_units["unit"], test_units["y"], strict=True)) if level == "author" else None
    counts.update(n_train_units=len(train_units), n_test_units=len(test_units))

    linear = LinearTextClassifier(seed=seed, **(linear_params or {})).fit(train_units["text"], train_units["y"])
    if model == "linear":
        clf: Any = linear
        model_sig = f"tfidf-word{linear.ngram_range[0]}-{linear.ngram_range[1]}gram+logreg(C={linear.C})"
    else:
        spec = spec or resolve_model("classifier_backbone")
        clf = EncoderClassifier(spec, seed=seed, **(encoder_params or {})).fit(train_units["text"],
                                                                               train_units["y"])
        model_sig = f"finetuned:{model_id(spec)}(epochs={clf.epochs},lr={clf.lr})"
    classes = list(clf.classes_)

    rows, preds, bins = [], [], []
    orig_pred = pd.Series(np.asarray(clf.predict(test_units["text"].tolist()), dtype=object),
                          index=test_units["unit"].to_numpy())

    def add(set_name: str, units: pd.DataFrame, pred: np.ndarray, orig: np.ndarray, extra: dict) -> None:
        y = units["y"].to_numpy(dtype=object)
        acc, f1 = _score(y, pred)
        o_acc, o_f1 = _score(y, orig)
        chance = _majority_count(y) / len(y) if len(y) else float("nan")
        rows.append({"set": set_name, "n_units": len(units), "coverage": len(units) / len(test_units),
                     "accuracy": acc, "macro_f1": f1, "orig_accuracy": o_acc, "orig_macro_f1": o_f1,
                     "reduction": o_acc - acc, "reduction_f1": o_f1 - f1, "chance": chance,
                     "uniform_rate": 1 / len(classes), "above_chance": acc - chance,
                     "advantage_removed": (o_acc - acc) / (o_acc - chance) if o_acc > chance else float("nan"),
                     **intervals(y, np.asarray(pred, dtype=object), n_resamples=n_resamples, seed=seed), **extra})
        preds.append(pd.DataFrame({"set": set_name, "unit": units["unit"].to_numpy(), "y_true": y,
                                   "y_pred": pred}))
        bins.append(word_bin_shares(linear, units["text"].tolist(), edges=bin_edges).assign(set=set_name))

    base = orig_pred.to_numpy()
    add(ORIGINAL, test_units, base, base, {"n_duplicates": 0})
    for set_name, rows_ok, n_dup in _synthetic_sets(synthetic):
        joined = test.drop(columns=["text"]).merge(rows_ok[["doc_id", "text"]], on="doc_id", how="inner")
        units = _units(joined, level, author_label)
        if level == "author":  # the real side of a pair: the same authors' same documents
            orig_units = _units(test[test["doc_id"].isin(joined["doc_id"])], level, author_label)
            orig = np.asarray(clf.predict(orig_units["text"].tolist()), dtype=object)
        else:
            orig = orig_pred.reindex(units["unit"]).to_numpy()
        pred = (np.asarray(clf.predict(units["text"].tolist()), dtype=object) if len(units)
                else np.asarray([], dtype=object))
        add(set_name, units, pred, orig, {"n_duplicates": n_dup})

    signature = (f"profiling|attr={col}|model={model_sig}|level={level}|seed={seed}|n_train={len(train_units)}"
                 f"|n_test={len(test_units)}|tokens=sklearn-word{_sklearn_version()}")
    word_bins = pd.concat(bins, ignore_index=True)[["set", "class", "bin", "lower", "upper", "n_words", "share"]]
    return ProfilingResult(
        attribute=col, model=model, level=level, classes=classes,
        scores=pd.DataFrame(rows), predictions=pd.concat(preds, ignore_index=True),
        top_words=linear.top_weighted_words(top_k), word_bins=word_bins, counts=counts, signature=signature)


def _sklearn_version() -> str:
    import sklearn

    return sklearn.__version__
