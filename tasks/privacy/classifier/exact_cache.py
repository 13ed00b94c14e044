"""The exact model's cache: a fitted :class:`~tasks.privacy.classifier.exact.ExactModel` kept as one .npz per
(history file, parameters, held-out documents, code) in a cache folder, so a rerun on the same histories
reads the SVM instead of fitting it again (:func:`fit_exact_cached`)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.privacy.classifier.exact import ExactModel, fit_exact
from tasks.privacy.classifier.params import ClassifierParams
from tasks.privacy.reidentify import HistorySource

#: A fitted exact model is kept in the cache folder up to this size (its weights: authors x n-grams x 8 B); a
#: larger one would cost more disk than refitting costs time.
MODEL_CACHE_MAX_BYTES = 1 << 30
#: What the exact model is made by: a change in any of them makes the cached models stale.
_EXACT_CODE = ("tasks/privacy/classifier", "tasks/privacy/stylometric")


def exact_model_key(histories: str, params: ClassifierParams, held_out: frozenset[str] | None) -> str:
    """The name of a fitted model in the cache: the history file's contents, every parameter, the held-out
    documents and the code that fits it."""
    # deferred: loads fsspec only when this runs
    from tasks.store import code_version, fingerprint_config, fingerprint_file

    held = sorted(held_out) if held_out is not None else None
    return fingerprint_config({"histories": fingerprint_file(histories), "params": dataclasses.asdict(params),
                               "held_out": fingerprint_config(held), "code": code_version(*_EXACT_CODE)})[:32]


def save_exact(model: ExactModel, path: Path) -> None:
    """Write ``model`` as one .npz (atomically: a half-written file is never read as a model)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    grid = np.array(sorted(model.validation), float)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    with open(part, "wb") as f:
        np.savez(f, authors=model.authors.astype(str), vocab=model.vocab, idf=model.idf, coef=model.coef,
                 intercept=model.intercept, c=np.array(model.c), grid=grid,
                 validation=np.array([model.validation[c] for c in grid], float).reshape(-1, 2),
                 n_posts=np.array(model.n_posts))
    os.replace(part, path)


def load_exact(path: Path, params: ClassifierParams) -> ExactModel:
    """The model :func:`save_exact` wrote."""
    with np.load(path, allow_pickle=False) as z:
        validation = {float(c): (float(a), float(m)) for c, (a, m) in zip(z["grid"], z["validation"], strict=True)}
        return ExactModel(params, z["authors"].astype(object), z["vocab"], z["idf"], z["coef"], z["intercept"],
                          float(z["c"]), validation, int(z["n_posts"]))


def fit_exact_cached(histories: HistorySource, params: ClassifierParams, held_out: frozenset[str] | None,
                     cache: Path | None, chunk_rows: int = 1_000_000) -> ExactModel:
    """:func:`fit_exact`, kept in ``cache`` (a folder) for a history file: a rerun on the same histories (the
    next protect run, its certificate, ``reidentify``) reads the fitted SVM instead of tuning and fitting it
    again."""
    if cache is None or isinstance(histories, pd.DataFrame):
        return fit_exact(histories, params, held_out, chunk_rows)
    path = cache / f"{exact_model_key(str(histories), params, held_out)}.npz"
    if path.exists():
        try:
            return load_exact(path, params)
        except (OSError, ValueError, KeyError):  # unreadable: fitted again and replaced
            pass
    model = fit_exact(histories, params, held_out, chunk_rows)
    if model.coef.nbytes <= MODEL_CACHE_MAX_BYTES:
        save_exact(model, path)
    return model
