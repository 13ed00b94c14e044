"""Linkability of released posts (tasks/privacy/linkability.py): the same-author pair AUC is roc_auc_score's on the
same pairs; style links real speakers' posts (conventions) and simulated users' (clearly above 0.5, interval too);
with the authors shuffled the interval covers 0.5; a seed gives the same figure; no pair, a reason."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from tasks.corpus.simulate import simulate_histories
from tasks.privacy.linkability import KEYS, pair_scores, same_author_auc, sample_pairs, weighted_auc

CONVENTIONS = Path(__file__).resolve().parent.parent / "data" / "conventions.parquet"


@pytest.fixture(scope="module")
def speeches() -> pd.DataFrame:
    """Real posts: runs of 5 consecutive sentences of a convention speech, of the 40 speakers with most runs."""
    if not CONVENTIONS.exists():
        pytest.skip(f"{CONVENTIONS} missing: run `synthugc datasets fetch conventions`")
    corpus = pd.read_parquet(CONVENTIONS).sort_values(["group_id", "position"])
    corpus["run"] = corpus.groupby("group_id").cumcount() // 5
    posts = corpus.groupby(["author_id", "group_id", "run"], sort=False)["text"].agg(" ".join).reset_index()
    speakers = posts["author_id"].value_counts().index[:40]
    return posts[posts["author_id"].isin(speakers)].reset_index(drop=True)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> tuple[pd.DataFrame, Path]:
    """Simulated posts of 30 users with personal styles (tasks/corpus/simulate.py): half released, the other half
    written as the adversary's histories."""
    folder = tmp_path_factory.mktemp("simulated")
    posts = pd.read_parquet(simulate_histories(n_users=30, n_posts=900, mean_chars=120, seed=3,
                                               out_path=folder / "all.parquet", vocab_size=3000))
    released = posts.iloc[::2].reset_index(drop=True)
    posts.iloc[1::2].to_parquet(folder / "histories.parquet")
    return released, folder / "histories.parquet"


def test_auc_is_roc_auc_score_on_the_same_pairs(speeches):
    texts, authors = speeches["text"].tolist(), speeches["author_id"].tolist()
    result = same_author_auc(texts, authors, seed=4, max_pairs=3000, n_resamples=50)
    i, j, same = sample_pairs(authors, seed=4, max_pairs=3000)
    assert result["n_same"] == same.sum() == 1500 and result["n_other"] == (~same).sum() == 1500
    assert all(authors[a] == authors[b] for a, b in zip(i[same], j[same], strict=True))
    assert not any(authors[a] == authors[b] for a, b in zip(i[~same], j[~same], strict=True))
    assert len(set(zip(i.tolist(), j.tolist(), strict=True))) == len(i)  # no pair twice
    scores = pair_scores(texts, i, j, texts)
    assert result["value"] == pytest.approx(roc_auc_score(same, scores), abs=1e-12)
    rounded = np.round(scores, 1)  # ties count half, as roc_auc_score counts them
    assert weighted_auc(rounded, same) == pytest.approx(roc_auc_score(same, rounded), abs=1e-12)


def test_style_links_real_speakers_posts_and_shuffled_authors_do_not(speeches):
    texts, authors = speeches["text"].tolist(), speeches["author_id"].tolist()
    result = same_author_auc(texts, authors, seed=0)
    assert set(KEYS) <= set(result) and "reason" not in result
    assert result["n_authors"] == 40 and result["n_posts"] == len(texts)
    assert result["value"] > 0.6 and result["ci_low"] > 0.55 and result["ci_low"] < result["value"] < result["ci_high"]
    json.dumps(result, allow_nan=False)  # JSON-ready
    shuffled = np.random.default_rng(0).permutation(authors).tolist()
    chance = same_author_auc(texts, shuffled, seed=0)
    assert chance["ci_low"] < 0.5 < chance["ci_high"] and abs(chance["value"] - 0.5) < 0.05
    assert same_author_auc(texts, authors, seed=0) == result  # deterministic for a seed
    assert same_author_auc(texts, authors, seed=1)["value"] != result["value"]  # other pairs drawn


def test_style_links_simulated_users_with_the_adversarys_histories(simulated):
    released, histories = simulated
    texts, authors = released["text"].tolist(), released["author_id"].tolist()
    result = same_author_auc(texts, authors, histories=str(histories), seed=0)
    assert result["value"] > 0.7 and result["ci_low"] > 0.6, result
    assert "450 posts of the adversary's histories" in result["model"]
    own = same_author_auc(texts, authors, seed=0)
    assert "released posts themselves (no histories given)" in own["model"] and own["ci_low"] > 0.6


def test_no_pair_of_a_kind_gives_a_reason():
    texts = ["I walked to work in the rain.", "The bus was late again!", "Soup for the whole week."]
    alone = same_author_auc(texts, ["a", "b", "c"])
    assert math.isnan(alone["value"]) and alone["n_same"] == 0 and alone["reason"] == "no two posts share an author"
    one = same_author_auc(texts, ["a", "a", "a"])
    assert math.isnan(one["value"]) and one["n_same"] == 3 and "no different-author pair" in one["reason"]
    with pytest.raises(ValueError, match="differ in length"):
        same_author_auc(texts, ["a"])
