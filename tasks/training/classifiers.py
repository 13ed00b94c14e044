"""Text classifiers shared by utility (downstream tasks) and privacy (attribute profiling).

Two models with one scikit-learn-like interface (``fit(texts, labels)``, ``predict``, ``predict_proba``,
``classes_``):

- :class:`LinearTextClassifier`: TF-IDF word 1-2grams + logistic regression or a linear SVM. Fast, deterministic, and its
  weights are readable. ``C='auto'`` (with ``class_weight='auto'``) chooses the regularisation and the class
  weighting on a validation split (or by cross-validation on the training rows without one), as any careful
  baseline does: at a fixed C=1 the model underfits short texts (SMS spam: macro-F1 0.55 against 0.89 at
  C=10). Its weights are readable: :meth:`~LinearTextClassifier.top_weighted_words` lists the words of each class
  (seed 004, appendix B) and :meth:`~LinearTextClassifier.word_weights` feeds the weight-bin analysis
  (seed 004, appendix C).
- :class:`EncoderClassifier`: fine-tunes ``AutoModelForSequenceClassification`` on the registry's
  ``classifier_backbone`` (MiniLM offline; the article used DistilBERT) with the article's recipe
  (seed 000, A.6: cross-entropy, 3 epochs, batch 32, AdamW, lr 1e-3, eps 1e-8), a linear learning-rate
  decay and early stopping on validation.

Labels may be any hashable values (strings, ints); ``classes_`` is their sorted unique set. Rows whose
label is missing (None/NaN/NA) are skipped and counted in ``n_skipped_``; a text that is not a string, a
length mismatch or fewer than two classes raise :class:`TrainingDataError` naming the problem.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tasks.errors import InputError, ModelUnavailable
from tasks.models.loaders import TORCH_RNG_LOCK, _offline, _unavailable, device, load_tokenizer
from tasks.models.registry import ModelSpec, resolve_model
from tasks.parallel import resource_lock
from tasks.training.dialogue import state_snapshot, torch_threads
from tasks.training.task_metrics import macro_f1

#: Word tokens of one character count too ("i", "u", "4"): short UGC relies on them.
TOKEN_PATTERN = r"(?u)\b\w+\b"

#: The grid of inverse L2 strengths tried by ``C='auto'``: four decades in half-decade steps.
C_GRID: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
#: The class weightings tried by ``class_weight='auto'``: none, and inverse class frequency (skewed labels).
CLASS_WEIGHT_GRID: tuple[str | None, ...] = (None, "balanced")
AUTO = "auto"
#: The linear models: logistic regression (probabilities) or a linear SVM (squared hinge, LinearSVC).
LOSSES: tuple[str, ...] = ("logistic", "hinge")

#: The article's learning rate (A.6: DistilBERT, 3 epochs, batch 32, AdamW, eps 1e-8), kept for the offline
#: MiniLM with early stopping on validation as the safeguard: 1e-3 is above the 2e-5..1e-4 usually used
#: for full fine-tuning and can be unstable on harder tasks, but on 240 balanced rotten_tomatoes snippets
#: (review vs plot) MiniLM reached test macro-F1 0.96 at 1e-3 against 0.87 at 5e-5 (still underfit after
#: 3 epochs). Pass ``lr`` to change it.
DEFAULT_ENCODER_LR = 1e-3


class TrainingDataError(InputError, ValueError):
    """Bad classifier input (texts, labels). A ValueError, as scikit-learn raises, and an InputError, so
    the CLI prints one line."""


def _is_missing(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # arrays, lists: not a scalar label
        return False


def check_texts(texts: Any, name: str = "texts") -> list[str]:
    """``texts`` as a list of str; raises TrainingDataError naming the first non-string position."""
    if isinstance(texts, str):
        raise TrainingDataError(f"{name} must be a sequence of strings, got a single str")
    if isinstance(texts, pd.Series):
        texts = texts.tolist()
    try:
        out = list(texts)
    except TypeError as exc:
        raise TrainingDataError(f"{name} must be a sequence of strings, got {type(texts).__name__}") from exc
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TrainingDataError(f"{name}[{i}] is {type(text).__name__} ({text!r:.40}), not str")
    return out


def prepare_labelled(texts: Any, labels: Any) -> tuple[list[str], np.ndarray, int]:
    """(texts, labels, n_skipped): rows with a missing label dropped and counted; texts checked as str.

    Raises TrainingDataError on a length mismatch, a non-string text, or fewer than two classes left."""
    if isinstance(texts, str):
        raise TrainingDataError("texts must be a sequence of strings, got a single str")
    texts = texts.tolist() if isinstance(texts, pd.Series) else list(texts)
    labels = labels.tolist() if isinstance(labels, pd.Series | np.ndarray) else list(labels)
    if len(texts) != len(labels):
        raise TrainingDataError(f"texts and labels differ in length: {len(texts)} texts, {len(labels)} labels")
    keep = [not _is_missing(y) for y in labels]
    kept_texts = check_texts([t for t, k in zip(texts, keep, strict=True) if k])
    kept_labels = np.asarray([y for y, k in zip(labels, keep, strict=True) if k], dtype=object)
    n_classes = len(set(kept_labels.tolist()))
    if n_classes < 2:
        raise TrainingDataError(
            f"need at least two classes to train a classifier, got {n_classes} "
            f"({len(kept_labels)} labelled rows, {len(labels) - len(kept_labels)} with a missing label)")
    return kept_texts, kept_labels, len(labels) - len(kept_labels)


def _classes(labels: np.ndarray) -> np.ndarray:
    try:
        return np.asarray(sorted(set(labels.tolist())), dtype=object)
    except TypeError as exc:
        raise TrainingDataError(f"labels of mixed types cannot be ordered: {exc}") from exc


def _convergence_warning() -> type[Warning]:
    from sklearn.exceptions import ConvergenceWarning

    return ConvergenceWarning


def _not_fitted(model: object) -> None:
    from sklearn.exceptions import NotFittedError

    raise NotFittedError(f"this {type(model).__name__} is not fitted yet; call fit(texts, labels) first")


# ------------------------------------------------------------------------- choosing C and class weight
# The search behind ``C='auto'`` / ``class_weight='auto'`` of :class:`LinearTextClassifier`: the grid, the
# folds that score it and the scores; the classifier keeps the choice.

Folds = list[tuple[list[str], np.ndarray, list[str], np.ndarray]]


def tuning_grid(C: float | str, class_weight: str | dict | None) -> list[tuple[float, str | dict | None]]:
    """The (C, class_weight) settings to try: :data:`C_GRID` for ``C='auto'`` x :data:`CLASS_WEIGHT_GRID` for
    ``class_weight='auto'``, a fixed value standing alone (one setting: nothing to choose)."""
    c_values = C_GRID if C == AUTO else (float(C),)
    weights = CLASS_WEIGHT_GRID if class_weight == AUTO else (class_weight,)
    return [(c, w) for c in c_values for w in weights]


def selection_folds(texts: list[str], labels: np.ndarray, val: tuple[list[str], np.ndarray] | None,
                    seed: int) -> tuple[Folds, str] | None:
    """The (train texts, train labels, held texts, held labels) folds that score the grid, and how they were
    made: the validation split when it holds two classes (``validation``), else stratified k-fold on the
    training rows (``cross-validation``, k = 5 or the rarest class's row count); None when a class has one row."""
    from sklearn.model_selection import StratifiedKFold

    if val is not None and len(set(val[1].tolist())) >= 2:
        return [(texts, labels, *val)], "validation"
    rarest = int(pd.Series(labels).value_counts().min())
    if rarest < 2:
        return None
    splitter = StratifiedKFold(n_splits=min(5, rarest), shuffle=True, random_state=seed)
    folds = [([texts[i] for i in tr], labels[tr], [texts[i] for i in te], labels[te])
             for tr, te in splitter.split(np.zeros(len(labels)), labels)]
    return folds, "cross-validation"


def grid_scores(grid: Sequence[tuple[float, str | dict | None]], folds: Folds, vectorizer: Callable[[], Any],
                estimator: Callable[[float, str | dict | None], Any]) -> np.ndarray:
    """Mean held-out macro-F1 of each setting of ``grid`` over ``folds``; each fold's vectorizer is fitted on
    its training rows only."""
    scores = np.zeros(len(grid))
    for train_texts, train_labels, held_texts, held_labels in folds:
        vec = vectorizer()
        x_train, x_held = vec.fit_transform(train_texts), vec.transform(held_texts)
        for k, (c, weight) in enumerate(grid):
            with warnings.catch_warnings():  # the largest C of the grid may stop at max_iter; it is scored
                warnings.simplefilter("ignore", _convergence_warning())
                pred = estimator(c, weight).fit(x_train, train_labels).predict(x_held)
            scores[k] += macro_f1(held_labels.tolist(), pred.tolist()) / len(folds)
    return scores


def selection_table(grid: Sequence[tuple[float, str | dict | None]], scores: np.ndarray) -> tuple[int, pd.DataFrame]:
    """(index of the chosen setting, the grid with its scores: columns C, class_weight, macro_f1, chosen)."""
    best = int(np.argmax(scores))  # first maximum: grid order is C ascending, no weighting first
    return best, pd.DataFrame({"C": [c for c, _ in grid],
                               "class_weight": [str(w) if w is not None else "none" for _, w in grid],
                               "macro_f1": scores, "chosen": np.arange(len(grid)) == best})


def _validation_split(val_texts: Any, val_labels: Any) -> tuple[list[str], np.ndarray] | None:
    """The labelled rows of ``val_texts``/``val_labels`` that choose 'auto' settings; None when none are given
    or fewer than two classes are left (bad texts or a length mismatch still raise TrainingDataError)."""
    val = None
    if val_texts is not None and val_labels is not None and len(val_labels):
        try:
            val = prepare_labelled(val_texts, val_labels)[:2]
        except TrainingDataError as exc:
            if "at least two classes" not in str(exc):
                raise
    return val


def top_words(weights: pd.DataFrame, k: int) -> pd.DataFrame:
    """The ``k`` highest-weighted words of each class of a word x class weight table
    (:meth:`LinearTextClassifier.word_weights`): columns class, rank (1 = strongest), word, weight; ties
    broken by the word."""
    parts = []
    for cls in weights.columns:
        col = weights[cls].rename("weight").reset_index()
        col = col.sort_values(["weight", "word"], ascending=[False, True], kind="mergesort").head(k)
        parts.append(pd.DataFrame({"class": cls, "rank": np.arange(1, len(col) + 1),
                                   "word": col["word"].to_numpy(), "weight": col["weight"].to_numpy()}))
    return pd.concat(parts, ignore_index=True)


# ---------------------------------------------------------------------------------------------- linear


class LinearTextClassifier:
    """TF-IDF (word n-grams) + a linear model with L2 penalty, deterministic given ``seed``: logistic
    regression (``loss='logistic'``, lbfgs; has probabilities) or a linear SVM (``loss='hinge'``,
    scikit-learn's LinearSVC, squared hinge; predictions and weights only, about 5-10x faster to fit, the
    usual strong text baseline).

    The pipeline is exactly :meth:`make_pipeline` (a scikit-learn Pipeline), so results equal a direct
    scikit-learn fit with the same parameters. ``C`` is the inverse L2 strength; ``class_weight='balanced'``
    reweights skewed classes (off by default, as in the article's baselines).

    ``C='auto'`` and/or ``class_weight='auto'`` choose them among :data:`C_GRID` x :data:`CLASS_WEIGHT_GRID`
    by macro-F1 on the validation rows given to :meth:`fit` (the vectorizer is fitted on the training rows
    only; ties go to the smaller C, then to no weighting). Without a validation split holding two classes,
    the choice is made by stratified k-fold cross-validation on the training rows (k = 5, fewer when the
    rarest class has fewer rows), and with a class of one row C=1 / no weighting is used. The choice is in
    ``C_``, ``class_weight_``, ``selected_by_`` and the full grid in ``selection_``."""

    def __init__(self, *, ngram_range: tuple[int, int] = (1, 2), min_df: int | float = 1,
                 max_features: int | None = None, sublinear_tf: bool = False, C: float | str = 1.0,
                 class_weight: str | dict | None = None, max_iter: int = 1000, seed: int = 0,
                 loss: str = "logistic") -> None:
        if isinstance(C, str) and C != AUTO:
            raise ValueError(f"C must be a positive number or 'auto', got {C!r}")
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
        self.loss = loss
        self.ngram_range = tuple(ngram_range)
        self.min_df = min_df
        self.max_features = max_features
        self.sublinear_tf = sublinear_tf
        self.C = C
        self.class_weight = class_weight
        self.max_iter = max_iter
        self.seed = seed
        self.pipeline_: Any = None
        self.n_skipped_ = 0
        self.n_train_ = 0
        self.C_: float | None = None
        self.class_weight_: str | dict | None = None
        self.selected_by_ = "fixed"  # fixed, validation, cross-validation or default
        self.selection_: pd.DataFrame | None = None

    def _vectorizer(self) -> Any:
        from sklearn.feature_extraction.text import TfidfVectorizer

        return TfidfVectorizer(ngram_range=self.ngram_range, min_df=self.min_df, max_features=self.max_features,
                               sublinear_tf=self.sublinear_tf, token_pattern=TOKEN_PATTERN, lowercase=True)

    def _estimator(self, C: float, class_weight: str | dict | None) -> Any:
        from sklearn.linear_model import LogisticRegression
        from sklearn.svm import LinearSVC

        if self.loss == "hinge":
            return LinearSVC(C=C, class_weight=class_weight, max_iter=self.max_iter, random_state=self.seed)
        return LogisticRegression(C=C, class_weight=class_weight, max_iter=self.max_iter, random_state=self.seed)

    def make_pipeline(self, C: float | None = None, class_weight: str | dict | None = AUTO) -> Any:
        """The unfitted scikit-learn Pipeline (``tfidf`` -> ``clf``) this classifier fits (with the given or
        chosen ``C`` / ``class_weight``; an 'auto' not yet chosen reads as C=1 / no weighting)."""
        from sklearn.pipeline import Pipeline

        if C is None:
            C = self.C_ if self.C_ is not None else (1.0 if self.C == AUTO else float(self.C))
        if isinstance(class_weight, str) and class_weight == AUTO:
            class_weight = self.class_weight_ if self.C_ is not None else (
                None if self.class_weight == AUTO else self.class_weight)
        return Pipeline([("tfidf", self._vectorizer()), ("clf", self._estimator(C, class_weight))])

    def _select(self, texts: list[str], labels: np.ndarray, val: tuple[list[str], np.ndarray] | None) -> None:
        """Choose (C, class_weight) on ``val`` or by cross-validation; fills C_, class_weight_, selection_."""
        grid = tuning_grid(self.C, self.class_weight)
        if len(grid) == 1:
            self.C_, self.class_weight_ = grid[0]
            self.selected_by_ = "fixed"
            return
        chosen = selection_folds(texts, labels, val, self.seed)
        if chosen is None:
            self.C_, self.class_weight_ = 1.0 if self.C == AUTO else float(self.C), (
                None if self.class_weight == AUTO else self.class_weight)
            self.selected_by_ = "default"
            return
        folds, self.selected_by_ = chosen
        best, table = selection_table(grid, grid_scores(grid, folds, self._vectorizer, self._estimator))
        self.C_, self.class_weight_ = grid[best]
        self.selection_ = table

    def fit(self, texts: Any, labels: Any, *, val_texts: Any = None, val_labels: Any = None) -> LinearTextClassifier:
        """Fit on the rows with a label (missing labels skipped, counted in ``n_skipped_``); with 'auto'
        settings, choose them first on the labelled rows of ``val_texts``/``val_labels``."""
        texts, labels, self.n_skipped_ = prepare_labelled(texts, labels)
        _classes(labels)  # mixed, unorderable label types fail here with a clear message
        self._select(texts, labels, _validation_split(val_texts, val_labels))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", _convergence_warning())  # max_iter reached: the fit is still used
            self.pipeline_ = self.make_pipeline(self.C_, self.class_weight_).fit(texts, labels)
        self.n_train_ = len(texts)
        return self

    @property
    def classes_(self) -> np.ndarray:
        if self.pipeline_ is None:
            _not_fitted(self)
        return self.pipeline_.classes_

    def predict(self, texts: Any) -> np.ndarray:
        if self.pipeline_ is None:
            _not_fitted(self)
        return self.pipeline_.predict(check_texts(texts))

    def predict_proba(self, texts: Any) -> np.ndarray:
        """(n, n_classes) probabilities, columns in ``classes_`` order (``loss='logistic'`` only)."""
        if self.pipeline_ is None:
            _not_fitted(self)
        if self.loss != "logistic":
            raise AttributeError(f"predict_proba needs loss='logistic'; this classifier has loss={self.loss!r}")
        return self.pipeline_.predict_proba(check_texts(texts))

    # --- readable weights -------------------------------------------------------------------------
    def word_weights(self, *, unigrams_only: bool = True) -> pd.DataFrame:
        """Feature x class table of weights towards each class.

        Multiclass: the class's row of ``coef_``. Binary: logistic regression has one row, the weight
        towards ``classes_[1]``; ``classes_[0]`` gets its negation (a word pulling towards class 0)."""
        if self.pipeline_ is None:
            _not_fitted(self)
        features = self.pipeline_.named_steps["tfidf"].get_feature_names_out()
        coef = self.pipeline_.named_steps["clf"].coef_
        classes = list(self.classes_)
        rows = np.vstack([-coef[0], coef[0]]) if len(classes) == 2 else coef
        table = pd.DataFrame(rows.T, index=pd.Index(features, name="word"), columns=classes)
        if unigrams_only:
            table = table[~table.index.str.contains(" ", regex=False)]
        return table

    def top_weighted_words(self, k: int = 20, *, unigrams_only: bool = True) -> pd.DataFrame:
        """The ``k`` highest-weighted words of each class (seed 004, appendix B): columns class, rank
        (1 = strongest), word, weight. Ties are broken by the word, so the table is stable."""
        return top_words(self.word_weights(unigrams_only=unigrams_only), k)

    def tokenize(self, text: str) -> list[str]:
        """The word tokens (unigrams) of ``text`` as the vectorizer sees them (lowercased)."""
        if self.pipeline_ is None:
            _not_fitted(self)
        vec = self.pipeline_.named_steps["tfidf"]
        return vec.build_tokenizer()(vec.build_preprocessor()(text))


# ---------------------------------------------------------------------------------------------- encoder


def load_sequence_classifier(spec: ModelSpec | None, classes: np.ndarray) -> tuple[Any, Any]:
    """(tokenizer, model): ``spec`` (default: the registry's ``classifier_backbone``) with a freshly initialised
    classification head over ``classes`` (labels are their str). Raises ModelUnavailable for a model that is
    not a transformer encoder or cannot be loaded."""
    spec = spec or resolve_model("classifier_backbone")
    n_labels = len(classes)
    if spec.kind not in ("hf-encoder", "sentence-transformers"):
        raise ModelUnavailable(f"model for role 'classifier_backbone': {spec.name} is a {spec.kind} model, "
                               f"not a transformer encoder")
    tokenizer = load_tokenizer(spec)
    local = _offline(spec)
    try:
        from transformers import AutoModelForSequenceClassification
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # "newly initialized classifier weights" is expected here
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                spec.path, num_labels=n_labels, local_files_only=local,
                id2label={i: str(c) for i, c in enumerate(classes)},
                label2id={str(c): i for i, c in enumerate(classes)})
        finally:
            hf_logging.set_verbosity(verbosity)
    except (OSError, ValueError, ImportError) as exc:
        raise _unavailable(spec, exc) from exc
    return tokenizer, model


class EncoderClassifier:
    """Fine-tuned transformer encoder (``AutoModelForSequenceClassification``) for text classification.

    Defaults follow seed 000 A.6 (3 epochs, batch 32, AdamW, eps 1e-8, cross-entropy, lr
    :data:`DEFAULT_ENCODER_LR` = 1e-3) with a linear decay to 0 (the transformers Trainer default schedule)
    and, given validation rows, early stopping on their macro-F1 (see :meth:`fit`).
    Deterministic given ``seed`` on CPU: the head's initialisation, dropout and the batch order all draw
    from ``seed`` (inside ``torch.random.fork_rng``, so the caller's RNG state is left alone); GPU kernels
    may add nondeterminism. Texts longer than ``max_length`` tokens are truncated. ``num_threads`` caps
    torch's CPU threads during fit/predict (on a shared, oversubscribed machine 1 thread was 4-20x faster
    than 2 spinning OpenMP threads)."""

    def __init__(self, spec: ModelSpec | None = None, *, epochs: int = 3, batch_size: int = 32,
                 lr: float = DEFAULT_ENCODER_LR, weight_decay: float = 0.0, eps: float = 1e-8,
                 max_length: int = 128, seed: int = 0, eval_batch_size: int = 64,
                 device: str | None = None, num_threads: int | None = None, patience: int = 2) -> None:
        for name, value in (("epochs", epochs), ("batch_size", batch_size), ("max_length", max_length),
                            ("eval_batch_size", eval_batch_size), ("patience", patience)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
        self.spec = spec
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.eps = eps
        self.max_length = max_length
        self.seed = seed
        self.eval_batch_size = eval_batch_size
        self.device = device
        self.num_threads = num_threads
        self.patience = patience
        self.model_: Any = None
        self.tokenizer_: Any = None
        self.classes_: np.ndarray | None = None
        self.n_skipped_ = 0
        self.n_train_ = 0
        self.history_: list[float] = []  # mean training loss per epoch
        self.val_history_: list[float] = []  # validation macro-F1 per epoch (early stopping)
        self.best_epoch_ = 0
        self.train_seconds_ = 0.0

    def _device(self) -> str:
        if self.device is not None:
            return self.device

        return device()

    def _batches(self, ids: list[list[int]], order: Sequence[int], size: int):
        for start in range(0, len(order), size):
            idx = list(order[start:start + size])
            batch = self.tokenizer_.pad({"input_ids": [ids[i] for i in idx]}, return_tensors="pt")
            yield idx, {k: v.to(self._device()) for k, v in batch.items()}

    def _encode(self, texts: list[str]) -> list[list[int]]:
        with resource_lock(self.tokenizer_):  # the cached tokenizer is shared; its truncation setting is state
            return self.tokenizer_(texts, truncation=True, max_length=self.max_length)["input_ids"]

    def fit(self, texts: Any, labels: Any, *, val_texts: Any = None, val_labels: Any = None) -> EncoderClassifier:
        """Fine-tune on the rows with a label (missing labels skipped, counted in ``n_skipped_``).

        With labelled validation rows (``val_texts``/``val_labels``), early stopping: after each epoch the
        validation macro-F1 is measured, the best epoch's weights are kept (restored at the end) and
        training stops after ``patience`` epochs without improvement. ``best_epoch_`` is 1-based."""
        import torch

        texts, labels, self.n_skipped_ = prepare_labelled(texts, labels)
        self.classes_ = _classes(labels)
        index = {c: i for i, c in enumerate(self.classes_.tolist())}
        y = torch.tensor([index[v] for v in labels.tolist()], dtype=torch.long)
        val: tuple[list[str], list[Any]] | None = None
        if val_texts is not None and val_labels is not None and len(val_labels):
            kept = [(t, v) for t, v in zip(check_texts(val_texts, "val_texts"), list(val_labels), strict=True)
                    if not _is_missing(v)]
            val = ([t for t, _ in kept], [v for _, v in kept]) if kept else None
        dev = self._device()
        started = time.perf_counter()
        with TORCH_RNG_LOCK, torch_threads(self.num_threads), torch.random.fork_rng(devices=[] if dev == "cpu" else None):
            torch.manual_seed(self.seed)
            self.tokenizer_, model = load_sequence_classifier(self.spec, self.classes_)
            model.to(dev).train()
            ids = self._encode(texts)
            steps = self.epochs * math.ceil(len(texts) / self.batch_size)
            optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr, eps=self.eps,
                                          weight_decay=self.weight_decay)
            schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / steps))
            order_rng = torch.Generator().manual_seed(self.seed)
            self.history_, self.val_history_ = [], []
            best, best_state, waited, self.best_epoch_ = -1.0, None, 0, self.epochs
            for epoch in range(self.epochs):
                model.train()
                order = torch.randperm(len(texts), generator=order_rng).tolist()
                total = 0.0
                for idx, batch in self._batches(ids, order, self.batch_size):
                    out = model(**batch, labels=y[idx].to(dev))
                    out.loss.backward()
                    optimizer.step()
                    schedule.step()
                    optimizer.zero_grad(set_to_none=True)
                    total += float(out.loss.detach()) * len(idx)
                self.history_.append(total / len(texts))
                if val is None:
                    continue
                self.model_ = model.eval()
                score = macro_f1(val[1], list(self.predict(val[0])))
                self.val_history_.append(score)
                if score > best + 1e-9:
                    best, best_state, waited, self.best_epoch_ = score, state_snapshot(model), 0, epoch + 1
                else:
                    waited += 1
                    if waited >= self.patience:
                        break
            if best_state is not None:
                model.load_state_dict(best_state)
        self.model_ = model.eval()
        self.n_train_ = len(texts)
        self.train_seconds_ = time.perf_counter() - started
        return self

    @property
    def examples_per_second_(self) -> float:
        """Training throughput of the last fit (examples x epochs / seconds, model load included)."""
        return self.n_train_ * self.epochs / self.train_seconds_ if self.train_seconds_ else float("nan")

    def predict_proba(self, texts: Any) -> np.ndarray:
        """(n, n_classes) softmax probabilities, columns in ``classes_`` order."""
        if self.model_ is None:
            _not_fitted(self)
        import torch

        texts = check_texts(texts)
        out = np.zeros((len(texts), len(self.classes_)), dtype=np.float64)
        if not texts:
            return out
        ids = self._encode(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths pad less
        with torch_threads(self.num_threads), torch.no_grad():
            for idx, batch in self._batches(ids, order, self.eval_batch_size):
                logits = self.model_(**batch).logits
                out[idx] = torch.softmax(logits.float(), dim=-1).cpu().numpy()
        return out

    def predict(self, texts: Any) -> np.ndarray:
        proba = self.predict_proba(texts)
        return self.classes_[proba.argmax(axis=1)] if len(proba) else np.asarray([], dtype=object)
