"""The embedding attack (mean MiniLM sentence embedding per author and timeline, cosine) against a
direct SentenceTransformer computation on debate turns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tasks.privacy.audit import attack_timelines
from tasks.privacy.embedding_attack import reidentify_embedding

DEBATES = Path(__file__).resolve().parent.parent / "data" / "debates.parquet"


@pytest.mark.slow
def test_embedding_attack_equals_direct_computation() -> None:
    if not DEBATES.exists():
        pytest.skip(f"{DEBATES} missing: run `synthugc datasets fetch debates`")
    from tasks.models.loaders import load_sentence_encoder
    from tasks.models.registry import resolve_model

    corpus = pd.read_parquet(DEBATES).astype({"text": object, "author_id": object, "doc_id": object})
    corpus = corpus[corpus["group_id"] == "debates-1st"].head(80)
    released = corpus.iloc[::4].assign(strategy="copy", variant="first", status="ok")
    syn = attack_timelines(released)
    hist = corpus[["doc_id", "author_id", "text"]]
    res = reidentify_embedding(hist, syn, setting="disjoint")
    model = load_sentence_encoder(resolve_model("sentence_encoder"))
    visible = hist[~hist["doc_id"].isin(set(syn["doc_id"]))]
    authors = list(dict.fromkeys(visible["author_id"]))
    a = np.vstack([model.encode(visible.loc[visible["author_id"] == au, "text"].tolist()).mean(0) for au in authors])
    groups = list(dict.fromkeys(syn["group_id"]))
    t = np.vstack([model.encode(syn.loc[syn["group_id"] == g, "text"].tolist()).mean(0) for g in groups])
    ref = (t / np.linalg.norm(t, axis=1, keepdims=True)) @ (a / np.linalg.norm(a, axis=1, keepdims=True)).T
    per = res.per_timeline
    assert list(per["group_id"]) == groups and res.summary["adversary"] == "disjoint"
    np.testing.assert_allclose(per["score_top"], ref.max(1), atol=1e-5)
    assert (per["predicted_author"].to_numpy() == np.asarray(authors, object)[ref.argmax(1)]).all()
    assert res.summary["n_history_posts"] == len(visible) and res.summary["chance"] == pytest.approx(1 / len(authors))
