"""Membership audit (distance to the closest synthetic record): copies give AUC 1, unrelated synthetic text
AUC ~0.5; the AUC equals scikit-learn's; bootstrap CI; canaries; edge cases."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from tasks.errors import InputError
from tasks.privacy.membership import auc_score, bootstrap_auc, insert_canaries, membership_audit

WORDS = ["coffee", "rain", "bus", "late", "again", "love", "this", "city", "work", "tired", "weekend", "friends",
         "game", "tonight", "pizza", "music", "sleep", "monday", "sunny", "walk", "dog", "cat", "phone", "news"]


def posts(n: int, seed: int, prefix: str) -> pd.DataFrame:
    rng = random.Random(seed)
    return pd.DataFrame({"doc_id": [f"{prefix}-{i}" for i in range(n)],
                         "text": [" ".join(rng.choices(WORDS, k=8)) for _ in range(n)]})


@pytest.fixture(scope="module")
def data() -> tuple[pd.DataFrame, pd.DataFrame]:
    return posts(80, 0, "m"), posts(80, 1, "n")


def test_copies_of_members_give_auc_one(data):
    members, non = data
    synthetic = members.assign(status="ok")
    res = membership_audit(members, non, synthetic, n_bootstrap=200, seed=0)
    assert res["auc"] == 1.0 and res["ci_low"] == 1.0
    assert res["mean_distance_members"] == pytest.approx(0.0, abs=1e-9)
    assert res["tpr_at_fpr_01"] == 1.0
    d = res["distances"]
    assert (d[d["member"]]["doc_id"] == d[d["member"]]["closest_synthetic_doc_id"]).all()
    assert res["n_members"] == 80 and res["n_non_members"] == 80 and res["reason"] is None


def test_unrelated_synthetic_gives_chance_auc(data):
    members, non = data
    rng = random.Random(2)
    other = ["quantum", "ledger", "velvet", "harbor", "glacier", "orchid", "tundra", "zephyr"]
    synthetic = pd.DataFrame({"doc_id": [f"s{i}" for i in range(50)],
                              "text": [" ".join(rng.choices(other, k=8)) for _ in range(50)]})
    res = membership_audit(members, non, synthetic, n_bootstrap=300, seed=0)
    assert 0.35 < res["auc"] < 0.65
    assert res["ci_low"] < 0.5 < res["ci_high"]


def test_auc_matches_sklearn_and_bootstrap_is_seeded(data):
    from sklearn.metrics import roc_auc_score

    members, non = data
    synthetic = pd.concat([members.iloc[:20], posts(30, 5, "s")], ignore_index=True)  # partial copying
    res = membership_audit(members, non, synthetic, n_bootstrap=300, seed=7)
    d = res["distances"]
    assert res["auc"] == pytest.approx(roc_auc_score(d["member"], -d["distance"]))
    assert 0.55 < res["auc"] < 1.0
    assert res["ci_low"] <= res["auc"] <= res["ci_high"]
    again = membership_audit(members, non, synthetic, n_bootstrap=300, seed=7)
    assert (again["ci_low"], again["ci_high"]) == (res["ci_low"], res["ci_high"])
    other = membership_audit(members, non, synthetic, n_bootstrap=300, seed=8)
    assert (other["ci_low"], other["ci_high"]) != (res["ci_low"], res["ci_high"])

    # the fast AUC equals sklearn's, ties included
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 5, 50).astype(float), rng.integers(0, 5, 70).astype(float)
    y = np.r_[np.ones(50), np.zeros(70)]
    assert auc_score(pos, neg) == pytest.approx(roc_auc_score(y, np.r_[pos, neg]))
    low, high, stats = bootstrap_auc(pos, neg, n_bootstrap=500, seed=1)
    assert low == pytest.approx(np.quantile(stats, 0.025)) and high == pytest.approx(np.quantile(stats, 0.975))


def test_closest_record_matches_brute_force(data):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_distances

    members, non = data
    synthetic = posts(25, 9, "s")
    res = membership_audit(members, non, synthetic, n_bootstrap=10)
    texts = pd.concat([members, non])["text"].tolist()
    vec = TfidfVectorizer(analyzer="char", ngram_range=(3, 3)).fit(texts + synthetic["text"].tolist())
    full = cosine_distances(vec.transform(texts), vec.transform(synthetic["text"]))
    np.testing.assert_allclose(res["distances"]["distance"], full.min(axis=1), atol=1e-9)


def test_edge_cases(data):
    members, non = data
    with pytest.raises(InputError, match="no non-members"):
        membership_audit(members, non.iloc[:0], members)
    with pytest.raises(InputError, match="no members"):
        membership_audit(members.iloc[:0], non, members)
    with pytest.raises(InputError, match="'text'"):
        membership_audit(members, non, pd.DataFrame({"doc_id": ["a"]}))
    with pytest.raises(ValueError, match="embed"):
        membership_audit(members, non, members, embed="bow")
    empty = membership_audit(members, non, members.iloc[:0])
    assert np.isnan(empty["auc"]) and "empty" in empty["reason"]
    failed_only = membership_audit(members, non, members.assign(status="failed"))
    assert np.isnan(failed_only["auc"]) and failed_only["n_synthetic"] == 0


def test_canaries_inserted_and_exposed(data):
    members, non = data
    corpus = members.assign(split="train", label="x", attr_gender="f", author_id="u1")
    with_canaries, ids = insert_canaries(corpus, 5, seed=3)
    assert len(with_canaries) == 85 and ids == [f"canary-3-{i}" for i in range(5)]
    c = with_canaries.set_index("doc_id").loc[ids]
    assert c["text"].is_unique and (c["split"] == "train").all() and c["author_id"].is_unique
    assert (c["attr_gender"] == "f").all()
    again, _ = insert_canaries(corpus, 5, seed=3)
    pd.testing.assert_frame_equal(again, with_canaries)

    src = with_canaries[["doc_id", "text"]]
    # a strategy that copies two canaries verbatim and rewrites everything else into unrelated text
    synthetic = pd.concat([src[src["doc_id"].isin(ids[:2])], posts(40, 11, "s")], ignore_index=True)
    res = membership_audit(src, non, synthetic, canary_ids=ids, n_bootstrap=50)
    assert res["n_canaries"] == 5 and res["canary_exposure"] == pytest.approx(2 / 5)
    cans = res["canaries"].set_index("doc_id")
    assert cans.loc[ids[0], "distance"] == pytest.approx(0, abs=1e-9) and cans.loc[ids[0], "p_value"] == 0
    assert not cans.loc[ids[4], "exposed"]
    assert res["n_members"] == 80  # canaries are scored apart from the member AUC
    with pytest.raises(InputError, match="canary"):
        membership_audit(members, non, synthetic, canary_ids=["nope"])


@pytest.mark.slow
def test_sbert_space(data):
    members, non = data
    res = membership_audit(members.iloc[:30], non.iloc[:30], members.iloc[:30], embed="sbert", n_bootstrap=50)
    assert res["auc"] == 1.0 and res["embed"] == "sbert"
