"""Bag-level metrics against their references: sacrebleu, rouge-score, nltk.lm, scikit-learn, scipy,
brute-force matching, and hand-computed Algorithm 1 values."""

from __future__ import annotations

import itertools
import math
import zlib

import numpy as np
import pandas as pd
import pytest
from nltk.lm import KneserNeyInterpolated
from nltk.lm.preprocessing import padded_everygram_pipeline
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU
from scipy.optimize import linear_sum_assignment
from scipy.stats import entropy
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

from tasks.metrics.bag_clusters import cluster_score
from tasks.metrics.bag_common import DegenerateBag, word_tokens
from tasks.metrics.bag_documents import IdfTable, cos_tf, cos_tfidf
from tasks.metrics.bag_lm import KneserNeyLM, inv_kl, inv_pp, unigram_kl
from tasks.metrics.bag_pairs import (
    align_metric,
    align_score,
    bleu3_matrix,
    cider_d_matrix,
    pair_metric,
    rouge_l_matrix,
)
from tasks.metrics.bags import (
    ALL_METRICS,
    BagConfig,
    aggregate_bags,
    bag_scores,
    bag_signature,
    summarise_bags,
)

TEXTS = [
    "the cat sat on the mat", "a cat was sitting on the mat", "hello", "", "hello world", "   ", ".",
    "I LOVE this place!!! best pizza in town :)", "i love this place, the best pizza in town",
    "the the the the cat", "the cat", "on the mat the cat sat", "Ünïcödé tëxt — with dashes", "lol",
    "cat cat mat mat sat sat", "search for nike running shoes", "search nike shoes",
]


def fake_embed(texts):
    """Deterministic bag-of-words hashing vectors (identical texts -> identical vectors)."""
    out = np.zeros((len(texts), 32))
    for i, t in enumerate(texts):
        for w in word_tokens(t):
            out[i, zlib.crc32(w.encode()) % 32] += 1.0
        out[i, 31] += 0.1  # empty texts get a vector too
    return out


def random_texts(rng: np.random.Generator, n: int, vocab: str = "a b c d e f g h") -> list[str]:
    words = vocab.split()
    return [" ".join(rng.choice(words, size=rng.integers(0, 12))) for _ in range(n)]


# --- sentence similarities -----------------------------------------------------------------------------


def test_bleu3_matrix_equals_sacrebleu() -> None:
    rng = np.random.default_rng(0)
    texts = TEXTS + random_texts(rng, 15)
    for order in (3, 4):
        bleu = BLEU(max_ngram_order=order, effective_order=True)
        got = bleu3_matrix(texts, texts, max_order=order)
        want = np.array([[bleu.sentence_score(g, [r]).score / 100 for r in texts] for g in texts])
        assert np.max(np.abs(got - want)) <= 1e-9
    assert got[0, 0] == pytest.approx(1.0) and got[0, 13] == 0.0


def test_rouge_l_matrix_equals_rouge_score() -> None:
    rng = np.random.default_rng(1)
    texts = TEXTS + random_texts(rng, 20, "x y z w")  # small vocabulary: long, non-trivial LCS
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    got = rouge_l_matrix(texts, texts)
    want = np.array([[scorer.score(r, g)["rougeL"].fmeasure for r in texts] for g in texts])
    assert np.max(np.abs(got - want)) <= 1e-9


def test_pair_is_mean_of_all_pairs_and_bleu_is_directional() -> None:
    ref, gen = TEXTS[:4], TEXTS[4:9]
    bleu = BLEU(max_ngram_order=3, effective_order=True)
    want = np.mean([bleu.sentence_score(g, [r]).score / 100 for g in gen for r in ref])
    assert pair_metric(ref, gen, "bleu3") == pytest.approx(want, abs=1e-12)
    assert pair_metric(["the cat"], ["the cat sat on the mat"]) != pair_metric(["the cat sat on the mat"],
                                                                               ["the cat"])


# --- alignment -----------------------------------------------------------------------------------------


def brute_force_align(sim: np.ndarray) -> float:
    n = sim.shape[0]
    return max(sum(sim[i, p[i]] for i in range(n)) for p in itertools.permutations(range(n))) / n


def test_align_equals_brute_force_matching() -> None:
    rng = np.random.default_rng(2)
    for _ in range(5):
        sim = rng.random((5, 5))
        assert align_score(sim) == pytest.approx(brute_force_align(sim), abs=1e-12)
    # head-heavy generated bag: Pair rewards it, Align does not
    sim = np.array([[1.0, 0.2, 0.2], [1.0, 0.2, 0.2], [1.0, 0.2, 0.2]])
    assert align_score(sim) == pytest.approx((1.0 + 0.2 + 0.2) / 3)


def test_align_unequal_sizes() -> None:
    rng = np.random.default_rng(3)
    sim = rng.random((2, 4))  # G has 2 items, R has 4: G upsampled by tiling, deterministic
    tiled = sim[[0, 0, 1, 1], :]
    assert align_score(sim, resample="up", seed=0) == pytest.approx(brute_force_align(tiled))
    assert align_score(sim, resample="up", seed=0) == align_score(sim, resample="up", seed=99)
    rows, cols = linear_sum_assignment(sim, maximize=True)
    assert align_score(sim, resample="none") == pytest.approx(sim[rows, cols].mean())
    sim3 = rng.random((3, 5))  # 5 = 3 + 2: two random extra copies, averaged over draws
    draws = []
    rng_ref = np.random.default_rng(7)
    for _ in range(4):
        idx = np.concatenate([np.arange(3), rng_ref.choice(3, 2, replace=False)])
        draws.append(brute_force_align(sim3[idx, :]))
    assert align_score(sim3, resample="up", draws=4, seed=7) == pytest.approx(np.mean(draws))
    down = align_score(sim3, resample="down", draws=3, seed=0)
    assert 0 < down <= 1 and down != align_score(sim3, resample="up", draws=3, seed=0)
    with pytest.raises(ValueError, match="resample"):
        align_score(sim3, resample="sideways")  # type: ignore[arg-type]


def test_identical_and_disjoint_bags_pair_align() -> None:
    bag = ["search for nike running shoes", "look for shoes for running", "search nike shoes"]
    other = ["cheap flights to rome", "weather tomorrow", "play some jazz"]
    for sim in ("bleu3", "rougeL", "sbert"):
        assert align_metric(bag, bag, sim, embed=fake_embed) == pytest.approx(1.0)
        assert align_metric(bag, other, sim, embed=fake_embed) < 0.35
    assert pair_metric(bag, bag, "rougeL") < 1.0  # pairs across different texts count too
    assert align_metric(["x"], [""], "bleu3") == 0.0  # one-item bags, empty text: no crash


# --- document metrics ----------------------------------------------------------------------------------


def sklearn_cos(ref, gen, vectorizer) -> float:
    vectorizer.fit([*ref, *gen])
    r = np.asarray(vectorizer.transform(ref).sum(axis=0)).ravel()
    g = np.asarray(vectorizer.transform(gen).sum(axis=0)).ravel()
    return float(r @ g / (np.linalg.norm(r) * np.linalg.norm(g)))


def test_cos_tf_and_tfidf_equal_sklearn() -> None:
    ref = ["search for nike running shoes", "search nike shoes", "I want to buy nike shoes!"]
    gen = ["search for adidas shoes", "buy nike shoes", "search for nike running shoes", "shoes?"]
    kw = {"tokenizer": word_tokens, "lowercase": False, "token_pattern": None}
    assert cos_tf(ref, gen) == pytest.approx(sklearn_cos(ref, gen, CountVectorizer(**kw)), abs=1e-12)
    assert cos_tfidf(ref, gen) == pytest.approx(sklearn_cos(ref, gen, TfidfVectorizer(norm=None, **kw)),
                                                abs=1e-12)
    corpus = [*ref, *gen, "search for a phone", "search for a lamp", "search the web"]
    idf = IdfTable.fit(corpus)
    vec = TfidfVectorizer(norm=None, **kw).fit(corpus)
    assert np.allclose(idf.weights(list(vec.get_feature_names_out())), vec.idf_)
    assert cos_tfidf(ref, gen, idf=idf) != cos_tfidf(ref, gen)
    assert cos_tf(ref, list(reversed(ref))) == pytest.approx(1.0)
    assert cos_tf(["a b"], ["c d"]) == 0.0
    with pytest.raises(DegenerateBag, match="no word token"):
        cos_tf(["", "  "], ["a"])


# --- clustering (Algorithm 1) --------------------------------------------------------------------------


def test_cluster_score_hand_computed() -> None:
    ref = ["buy nike shoes", "buy nike shoes", "cheap flights"]
    gen = ["buy nike shoes", "cheap flights", "cheap flights"]
    # clusters {shoes: 2 R + 1 G}, {flights: 1 R + 2 G}; p(B) = 1/2, d = 1/6 each, weight 3/6 -> sum 1/6
    assert cluster_score(ref, gen) == pytest.approx(6.0)
    assert cluster_score(ref, ref) == math.inf
    # pure clusters: sum = 2 p (1 - p) = 1/2 for equal sizes
    assert cluster_score(["a b", "a b"], ["c d", "c d"]) == pytest.approx(2.0)
    # unequal sizes: R=1, G=3 all in one cluster -> inf; R alone -> 1 / (2 * 1/4 * 3/4)
    assert cluster_score(["a"], ["a", "a", "a"]) == math.inf
    assert cluster_score(["z"], ["a", "a", "a"]) == pytest.approx(1 / (2 * 0.25 * 0.75))
    # min_samples=3: the lone texts are noise, each a singleton cluster
    assert cluster_score(["a", "a", "q"], ["a", "r", "s"], min_samples=3) == pytest.approx(
        1 / (3 / 6 * abs(0.5 - 2 / 3) + 3 * (1 / 6) * 0.5))
    assert cluster_score(["x y"], ["x y"], encoder="sbert", embed=fake_embed) == math.inf
    assert cluster_score(["", ""], ["", "a"]) == pytest.approx(1 / (3 / 4 * abs(0.5 - 2 / 3) + 1 / 4 * 0.5))


# --- unigram KL ----------------------------------------------------------------------------------------


def test_inv_kl_equals_scipy_entropy() -> None:
    ref = ["search for nike running shoes", "search nike shoes"]
    gen = ["search for adidas shoes", "buy nike shoes", "shoes"]
    vocab = sorted({w for t in ref + gen for w in word_tokens(t)})
    for alpha in (1.0, 0.1):
        def dist(bag, a=alpha):
            c = np.array([sum(word_tokens(t).count(w) for t in bag) for w in vocab], dtype=float) + a
            return c / c.sum()
        want = entropy(dist(gen), dist(ref))  # KL(G || R), nats
        assert unigram_kl(ref, gen, alpha=alpha) == pytest.approx(want, abs=1e-12)
        assert inv_kl(ref, gen, alpha=alpha) == pytest.approx(1 / want, abs=1e-9)
    assert inv_kl(ref, list(reversed(ref))) == math.inf
    assert inv_kl(ref, gen) > inv_kl(ref, ["cheap flights to rome"])


# --- Kneser-Ney LM -------------------------------------------------------------------------------------

TRAIN = ["the cat sat on the mat", "a cat was sitting on the mat", "the cat", "on the mat the cat sat",
         "hello world", "", "the dog sat on the log !"]
EVAL = ["the cat sat on the log", "a dog was on the mat", "the mat", "", "cat cat cat"]


@pytest.mark.parametrize("order,discount", [(4, 0.1), (3, 0.75), (2, 0.5)])
def test_kneser_ney_equals_nltk(order: int, discount: float) -> None:
    sents = [word_tokens(t) for t in TRAIN]
    train, vocab = padded_everygram_pipeline(order, sents)
    ref = KneserNeyInterpolated(order, discount=discount)
    ref.fit(train, vocab)
    lm = KneserNeyLM(order, discount, variant="nltk").fit(sents)
    checked = 0
    for text in EVAL:
        for word, ctx in lm.eval_ngrams(word_tokens(text)):
            assert lm.logscore(word, ctx) == pytest.approx(ref.logscore(word, ctx), abs=1e-6)
            checked += 1
    assert checked > 20
    assert lm.logscore("zebra", ("the",)) == ref.logscore("zebra", ("the",)) == -math.inf  # nltk: unknown = 0
    ngrams = [(*c, w) for t in EVAL for w, c in lm.eval_ngrams(word_tokens(t))]
    assert lm.perplexity(word_tokens(t) for t in EVAL) == pytest.approx(ref.perplexity(ngrams), rel=1e-9)


def test_kneser_ney_default_is_normalised_with_unknown_words() -> None:
    lm = KneserNeyLM(4, 0.1).fit(word_tokens(t) for t in TRAIN)
    support = [*sorted(lm.vocab), "<some unknown word>"]
    contexts = {c for t in EVAL + TRAIN for _, c in lm.eval_ngrams(word_tokens(t))} | {(), ("zzz", "the")}
    for ctx in contexts:
        assert sum(lm.score(w, ctx) for w in support) == pytest.approx(1.0, abs=1e-12)
    assert 0 < lm.score("zebra", ("the",)) < lm.score("cat", ("the",))
    assert math.isfinite(lm.perplexity([["zebra", "crossing"]]))


def test_inv_pp() -> None:
    bag = ["search for nike running shoes", "search nike shoes", "do you have running shoes"]
    same, other = inv_pp(bag, bag), inv_pp(bag, ["cheap flights to rome", "play some jazz"])
    assert 0 < other < same <= 1
    assert inv_pp(bag, ["search for nike shoes"], variant="nltk") == 0.0  # 'running' unseen -> inf PP
    assert 0 < inv_pp([""], [""]) <= 1  # empty texts: only </s> is scored


# --- DataFrame wrapper ---------------------------------------------------------------------------------


def test_bag_scores_and_summary() -> None:
    bag = ["search for nike running shoes", "search nike shoes", "search nike shoes"]
    reference = pd.DataFrame({
        "group_id": ["same"] * 3 + ["disjoint"] * 2 + ["no_gen"] + ["tiny"],
        "text": [*bag, "weather tomorrow", "play jazz", "orphan", ""],
    })
    generated = pd.DataFrame({
        "group_id": ["same"] * 3 + ["disjoint"] * 3 + ["tiny", "no_ref"],
        "text": [*reversed(bag), "buy a lamp", "lamp on sale", "cheap lamp", None, "x"],
    })
    scores = bag_scores(reference, generated, embed=fake_embed, seed=1)
    assert list(scores.columns) == ["group_id", "metric", "value", "signature", "reason", "n_reference",
                                    "n_generated"]
    assert len(scores) == 5 * len(ALL_METRICS)
    same = scores[scores.group_id == "same"].set_index("metric")["value"]
    disjoint = scores[scores.group_id == "disjoint"].set_index("metric")["value"]
    for m in ("align_bleu3", "align_rougeL", "align_sbert", "cos_tf", "cos_tfidf"):
        assert same[m] == pytest.approx(1.0)
    assert same["clus_tf"] == same["inv_kl"] == math.inf
    for m in ALL_METRICS:
        assert same[m] > disjoint[m], m
    no_gen = scores[scores.group_id == "no_gen"]
    assert no_gen["value"].isna().all() and (no_gen["reason"] == "empty generated bag").all()
    tiny = scores[scores.group_id == "tiny"].set_index("metric")
    assert tiny.loc["cos_tf", "reason"] == "a bag has no word token" and math.isnan(tiny.loc["cos_tf", "value"])
    assert tiny.loc["align_bleu3", "value"] == 0.0 and pd.isna(tiny.loc["inv_pp", "reason"])
    sig = scores.set_index(["group_id", "metric"]).loc[("same", "align_sbert"), "signature"]
    assert sig == bag_signature("align_sbert", BagConfig(), model="custom", seed=1)
    assert "resample:up" in sig and "seed:1" in sig and "model:custom" in sig

    summary = {s.metric: s for s in summarise_bags(scores)}
    assert set(summary) == set(ALL_METRICS)
    cos = summary["cos_tf"]
    assert cos.value == pytest.approx(np.nanmean(scores[scores.metric == "cos_tf"]["value"]))
    assert "3 of 5 groups undefined" in cos.reason and "agg:mean-over-finite-groups|version:" in cos.signature
    # one identical bag ('same', inf) does not make the strategy's InvKL inf: mean over the finite bags
    inv = scores[scores.metric == "inv_kl"]["value"].to_numpy()
    assert np.isinf(inv).sum() == 1 and np.isfinite(inv).sum() == 1
    assert summary["inv_kl"].value == pytest.approx(np.mean(inv[np.isfinite(inv)]))
    assert "1 of 5 groups scored inf" in summary["inv_kl"].reason


def test_aggregate_bags_mean_over_finite_median_over_defined() -> None:
    values = [2.0, math.inf, 4.0, math.nan, 9.0, math.inf]
    agg = aggregate_bags(values)
    assert agg.mean == pytest.approx(np.mean([2.0, 4.0, 9.0])) and agg.std == pytest.approx(np.std([2, 4, 9], ddof=1))
    assert agg.median == np.median([2.0, math.inf, 4.0, 9.0, math.inf]) == 9.0  # numpy median, inf bags counted
    assert (agg.n, agg.n_inf, agg.n_undefined) == (3, 2, 1)
    assert agg.reason() == ("1 of 6 groups undefined (NaN), left out; 2 of 6 groups scored inf (zero divergence), "
                            "left out of the mean; median over the defined groups 9")
    only_inf = aggregate_bags([math.inf])
    assert math.isnan(only_inf.mean) and only_inf.median == math.inf and "1 of 1 groups scored inf" in only_inf.reason()
    assert aggregate_bags([1.0, 3.0]).reason() is None and aggregate_bags([]).reason() == "no group defines this metric"


def test_bag_scores_validates() -> None:
    frame = pd.DataFrame({"group_id": ["a"], "text": ["x"]})
    with pytest.raises(ValueError, match="unknown metric"):
        bag_scores(frame, frame, metrics=["pair_meteor"])
    with pytest.raises(ValueError, match="column 'user'"):
        bag_scores(frame, frame, group_col="user", metrics=["cos_tf"])
    by_user = bag_scores(frame.rename(columns={"group_id": "user"}), frame.rename(columns={"group_id": "user"}),
                         group_col="user", metrics=["cos_tf", "inv_pp"])
    assert list(by_user["user"]) == ["a", "a"] and by_user["value"].iloc[0] == pytest.approx(1.0)


def test_sbert_metrics_with_the_real_encoder(tmp_path) -> None:
    from tasks.models.embeddings import EmbeddingCache

    bag = ["search for nike running shoes", "do you have running shoes from nike", "search nike shoes"]
    other = ["what is the weather in rome", "play some jazz music"]
    frame_ref = pd.DataFrame({"group_id": ["g"] * 3 + ["h"] * 3, "text": bag + bag})
    frame_gen = pd.DataFrame({"group_id": ["g"] * 3 + ["h"] * 2, "text": list(reversed(bag)) + other})
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    scores = bag_scores(frame_ref, frame_gen, metrics=["pair_sbert", "align_sbert", "clus_sbert"],
                        cache=cache).set_index(["group_id", "metric"])["value"]
    assert cache.misses == 5  # each distinct text embedded once
    assert scores[("g", "align_sbert")] == pytest.approx(1.0, abs=1e-5)
    assert scores[("g", "pair_sbert")] < scores[("g", "align_sbert")]
    assert scores[("h", "align_sbert")] < 0.5 < scores[("g", "pair_sbert")]
    assert scores[("g", "clus_sbert")] == math.inf and math.isfinite(scores[("h", "clus_sbert")])


def test_cider_d_hand_worked_example() -> None:
    """N = 2 reference texts: every n-gram of 'a b' has df 1, weight ln 2; against itself the unigram and
    bigram cosines are 1, orders 3-4 have no n-gram (0), equal bigram lengths (penalty 1): (1+1+0+0)/4*10."""
    assert cider_d_matrix(["a b"], ["a b", "c d"]) == pytest.approx(np.array([[5.0, 0.0]]))
    # a single reference text: log N = 0, every weight 0, CIDEr-D 0 (as pycocoevalcap)
    assert cider_d_matrix(["a b"], ["a b"]) == pytest.approx(np.array([[0.0]]))
    # length penalty: 'a b a b' has 3 bigrams against 1 -> exp(-4 / 72); unigram clip min(2w, w) w / (|v_g| |v_r|)
    got = cider_d_matrix(["a b a b"], ["a b", "c d"])[0, 0]
    uni = (1 + 1) / (math.sqrt(8) * math.sqrt(2))  # counts (2,2) vs (1,1): sum min(2,1)*1 / (sqrt(8) sqrt(2))
    bi = (1 * 1) / (math.sqrt(4 + 1) * 1)  # 'a b' x2, 'b a' x1 (weight ln2, cancels) vs 'a b' x1
    assert got == pytest.approx((uni + bi) / 4 * 10 * math.exp(-4 / 72))


def test_cider_d_equals_pycocoevalcap() -> None:
    """Reference implementation: pycocoevalcap's CiderScorer (CIDEr-D), one scorer per generated text over
    the pairs (g, [r_j]), so its document frequencies are those of the reference bag."""
    cider_scorer = pytest.importorskip("pycocoevalcap.cider.cider_scorer")
    generated = [*TEXTS[:6], "the the the the", "Is it raining? Yes, it is raining!", "x"]
    reference = [*TEXTS[3:10], "It is raining today, isn't it?", "the weather is nice"]
    ours = cider_d_matrix(generated, reference)
    for i, g in enumerate(generated):
        scorer = cider_scorer.CiderScorer(n=4, sigma=6.0)
        for r in reference:
            scorer += (" ".join(word_tokens(g)), [" ".join(word_tokens(r))])
        _, row = scorer.compute_score()
        assert ours[i] == pytest.approx(row, abs=1e-9), g
    assert ours.max() > 0.5
    assert pair_metric(reference, generated, "cider") == pytest.approx(ours.mean())
    assert align_metric(reference, generated, "cider", resample="none") == pytest.approx(
        align_score(ours, resample="none"))
    sig = bag_signature("align_cider")
    assert "sim:cider-d" in sig and "sigma:6.0" in sig and "tok:word-punct-lc" in sig
