"""Text classifiers shared by utility (downstream tasks) and privacy (attribute profiling).

Two models with one scikit-learn-like interface (``fit(texts, labels)``, ``predict``, ``predict_proba``,
``classes_``):

- :class:`LinearTextClassifier`: TF-IDF word 1-2grams + logistic regression. Fast, deterministic, and its
  weights are readable: :meth:`~LinearTextClassifier.top_weighted_words` lists the words of each class
  (seed 004, appendix B) and :meth:`~LinearTextClassifier.word_weights` feeds the weight-bin analysis
  (seed 004, appendix C).
- :class:`EncoderClassifier`: fine-tunes ``AutoModelForSequenceClassification`` on the registry's
  ``classifier_backbone`` (MiniLM offline; the article used DistilBERT) with the article's recipe
  (seed 000, A.6: cross-entropy, 3 epochs, batch 32, AdamW, eps 1e-8) and a linear learning-rate decay.

Labels may be any hashable values (strings, ints); ``classes_`` is their sorted unique set. Rows whose
label is missing (None/NaN/NA) are skipped and counted in ``n_skipped_``; a text that is not a string, a
length mismatch or fewer than two classes raise :class:`TrainingDataError` naming the problem.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from tasks.errors import InputError, ModelUnavailable
from tasks.models.loaders import TORCH_RNG_LOCK
from tasks.models.registry import ModelSpec, resolve_model
from tasks.parallel import resource_lock

#: Word tokens of one character count too ("i", "u", "4"): short UGC relies on them.
TOKEN_PATTERN = r"(?u)\b\w+\b"

#: The article's learning rate for DistilBERT (A.6) is 1e-3, far above the 2e-5..1e-4 usually used to fully
#: fine-tune a BERT-family encoder (at 1e-3 training tends to be unstable on harder tasks; on our toy test
#: task MiniLM still learned). The offline MiniLM defaults to 5e-5 (the rate of the XLNet configuration in
#: the article's Table 14); pass ``lr`` to reproduce the article's 1e-3.
DEFAULT_ENCODER_LR = 5e-5


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


def _not_fitted(model: object) -> None:
    from sklearn.exceptions import NotFittedError

    raise NotFittedError(f"this {type(model).__name__} is not fitted yet; call fit(texts, labels) first")


# ---------------------------------------------------------------------------------------------- linear


class LinearTextClassifier:
    """TF-IDF (word n-grams) + logistic regression (lbfgs, L2), deterministic given ``seed``.

    The pipeline is exactly :meth:`make_pipeline` (a scikit-learn Pipeline), so results equal a direct
    scikit-learn fit with the same parameters. ``C`` is the inverse L2 strength; ``class_weight='balanced'``
    reweights skewed classes (off by default, as in the article's baselines)."""

    def __init__(self, *, ngram_range: tuple[int, int] = (1, 2), min_df: int | float = 1,
                 max_features: int | None = None, sublinear_tf: bool = False, C: float = 1.0,
                 class_weight: str | dict | None = None, max_iter: int = 1000, seed: int = 0) -> None:
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

    def make_pipeline(self) -> Any:
        """The unfitted scikit-learn Pipeline (``tfidf`` -> ``clf``) this classifier fits."""
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import Pipeline

        return Pipeline([
            ("tfidf", TfidfVectorizer(ngram_range=self.ngram_range, min_df=self.min_df,
                                      max_features=self.max_features, sublinear_tf=self.sublinear_tf,
                                      token_pattern=TOKEN_PATTERN, lowercase=True)),
            ("clf", LogisticRegression(C=self.C, class_weight=self.class_weight, max_iter=self.max_iter,
                                       random_state=self.seed)),
        ])

    def fit(self, texts: Any, labels: Any) -> LinearTextClassifier:
        """Fit on the rows with a label (missing labels skipped, counted in ``n_skipped_``)."""
        texts, labels, self.n_skipped_ = prepare_labelled(texts, labels)
        _classes(labels)  # mixed, unorderable label types fail here with a clear message
        self.pipeline_ = self.make_pipeline().fit(texts, labels)
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
        """(n, n_classes) probabilities, columns in ``classes_`` order."""
        if self.pipeline_ is None:
            _not_fitted(self)
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
        weights = self.word_weights(unigrams_only=unigrams_only)
        parts = []
        for cls in weights.columns:
            col = weights[cls].rename("weight").reset_index()
            col = col.sort_values(["weight", "word"], ascending=[False, True], kind="mergesort").head(k)
            parts.append(pd.DataFrame({"class": cls, "rank": np.arange(1, len(col) + 1),
                                       "word": col["word"].to_numpy(), "weight": col["weight"].to_numpy()}))
        return pd.concat(parts, ignore_index=True)

    def tokenize(self, text: str) -> list[str]:
        """The word tokens (unigrams) of ``text`` as the vectorizer sees them (lowercased)."""
        if self.pipeline_ is None:
            _not_fitted(self)
        vec = self.pipeline_.named_steps["tfidf"]
        return vec.build_tokenizer()(vec.build_preprocessor()(text))


# ---------------------------------------------------------------------------------------------- encoder


class EncoderClassifier:
    """Fine-tuned transformer encoder (``AutoModelForSequenceClassification``) for text classification.

    Defaults follow seed 000 A.6 (3 epochs, batch 32, AdamW, eps 1e-8, cross-entropy) with lr
    :data:`DEFAULT_ENCODER_LR` and a linear decay to 0 (the transformers Trainer default schedule).
    Deterministic given ``seed`` on CPU: the head's initialisation, dropout and the batch order all draw
    from ``seed`` (inside ``torch.random.fork_rng``, so the caller's RNG state is left alone); GPU kernels
    may add nondeterminism. Texts longer than ``max_length`` tokens are truncated. ``num_threads`` caps
    torch's CPU threads during fit/predict (on a shared, oversubscribed machine 1 thread was 4-20x faster
    than 2 spinning OpenMP threads)."""

    def __init__(self, spec: ModelSpec | None = None, *, epochs: int = 3, batch_size: int = 32,
                 lr: float = DEFAULT_ENCODER_LR, weight_decay: float = 0.0, eps: float = 1e-8,
                 max_length: int = 128, seed: int = 0, eval_batch_size: int = 64,
                 device: str | None = None, num_threads: int | None = None) -> None:
        for name, value in (("epochs", epochs), ("batch_size", batch_size), ("max_length", max_length),
                            ("eval_batch_size", eval_batch_size)):
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
        self.model_: Any = None
        self.tokenizer_: Any = None
        self.classes_: np.ndarray | None = None
        self.n_skipped_ = 0
        self.n_train_ = 0
        self.history_: list[float] = []  # mean training loss per epoch
        self.train_seconds_ = 0.0

    def _device(self) -> str:
        if self.device is not None:
            return self.device
        from tasks.models.loaders import device

        return device()

    def _load(self, n_labels: int) -> tuple[Any, Any]:
        from tasks.models.loaders import _offline, _unavailable, load_tokenizer

        spec = self.spec or resolve_model("classifier_backbone")
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
                    id2label={i: str(c) for i, c in enumerate(self.classes_)},
                    label2id={str(c): i for i, c in enumerate(self.classes_)})
            finally:
                hf_logging.set_verbosity(verbosity)
        except (OSError, ValueError, ImportError) as exc:
            raise _unavailable(spec, exc) from exc
        return tokenizer, model

    @contextlib.contextmanager
    def _threads(self):
        import torch

        before = torch.get_num_threads()
        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def _batches(self, ids: list[list[int]], order: Sequence[int], size: int):
        for start in range(0, len(order), size):
            idx = list(order[start:start + size])
            batch = self.tokenizer_.pad({"input_ids": [ids[i] for i in idx]}, return_tensors="pt")
            yield idx, {k: v.to(self._device()) for k, v in batch.items()}

    def _encode(self, texts: list[str]) -> list[list[int]]:
        with resource_lock(self.tokenizer_):  # the cached tokenizer is shared; its truncation setting is state
            return self.tokenizer_(texts, truncation=True, max_length=self.max_length)["input_ids"]

    def fit(self, texts: Any, labels: Any) -> EncoderClassifier:
        """Fine-tune on the rows with a label (missing labels skipped, counted in ``n_skipped_``)."""
        import torch

        texts, labels, self.n_skipped_ = prepare_labelled(texts, labels)
        self.classes_ = _classes(labels)
        index = {c: i for i, c in enumerate(self.classes_.tolist())}
        y = torch.tensor([index[v] for v in labels.tolist()], dtype=torch.long)
        dev = self._device()
        started = time.perf_counter()
        with TORCH_RNG_LOCK, self._threads(), torch.random.fork_rng(devices=[] if dev == "cpu" else None):
            torch.manual_seed(self.seed)
            self.tokenizer_, model = self._load(len(self.classes_))
            model.to(dev).train()
            ids = self._encode(texts)
            steps = self.epochs * math.ceil(len(texts) / self.batch_size)
            optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr, eps=self.eps,
                                          weight_decay=self.weight_decay)
            schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / steps))
            order_rng = torch.Generator().manual_seed(self.seed)
            self.history_ = []
            for _ in range(self.epochs):
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
        with self._threads(), torch.no_grad():
            for idx, batch in self._batches(ids, order, self.eval_batch_size):
                logits = self.model_(**batch).logits
                out[idx] = torch.softmax(logits.float(), dim=-1).cpu().numpy()
        return out

    def predict(self, texts: Any) -> np.ndarray:
        proba = self.predict_proba(texts)
        return self.classes_[proba.argmax(axis=1)] if len(proba) else np.asarray([], dtype=object)
