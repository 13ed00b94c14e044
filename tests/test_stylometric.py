"""The stylometric attack: exact mode equals the scikit-learn reference on the debates corpus, the
sketch stays within its documented error, the Dask path equals one process, edge cases lose nothing."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from sklearn.metrics.pairwise import cosine_similarity

from tasks.corpus.simulate import simulate_histories, simulate_synthetic
from tasks.errors import InputError
from tasks.parallel import dask_client
from tasks.privacy.attribution import held_out_doc_ids
from tasks.privacy.audit import attack_timelines
from tasks.privacy.stylometric.features import reference_vectorizer
from tasks.privacy.stylometric.params import StyloParams
from tasks.privacy.stylometric.profiles import profile_histories, profile_histories_dask
from tasks.privacy.stylometric.scoring import (
    reidentify_stylometric,
    similarity,
    stylometric_attack,
    timeline_profiles,
)

DEBATES = Path(__file__).resolve().parent.parent / "data" / "debates.parquet"


def sklearn_reference(hist: pd.DataFrame, syn: pd.DataFrame, params: StyloParams) -> tuple[np.ndarray, list, list]:
    """The 15-line attack: TF-IDF over history posts, author and timeline centroids, cosine."""
    vec = reference_vectorizer(params)
    x = vec.fit_transform(hist["text"])
    authors = list(dict.fromkeys(hist["author_id"]))
    a = np.vstack([np.asarray(x[(hist["author_id"] == au).to_numpy()].mean(axis=0)) for au in authors])
    t_x = vec.transform(syn["text"])
    groups = list(dict.fromkeys(syn["group_id"]))
    t = np.vstack([np.asarray(t_x[(syn["group_id"] == g).to_numpy()].mean(axis=0)) for g in groups])
    return cosine_similarity(t, a), groups, authors


@pytest.fixture(scope="module")
def debates() -> tuple[pd.DataFrame, pd.DataFrame]:
    if not DEBATES.exists():
        pytest.skip(f"{DEBATES} missing: run `synthugc datasets fetch debates`")
    corpus = pd.read_parquet(DEBATES)
    corpus = corpus.assign(text=corpus["text"].astype(object), author_id=corpus["author_id"].astype(object),
                           doc_id=corpus["doc_id"].astype(object))
    released = corpus[corpus["split"] == "test"].assign(strategy="copy", variant="first", status="ok")
    return corpus[["doc_id", "author_id", "text"]], attack_timelines(released)


@pytest.mark.parametrize(("ngram_range", "words", "lowercase"),
                         [((2, 4), (1, 2), False), ((3, 3), (0, 0), True), ((2, 2), (2, 3), True)])
def test_exact_mode_equals_scikit_learn_on_debates(debates, ngram_range, words, lowercase) -> None:
    hist, syn = debates
    params = StyloParams(ngram_min=ngram_range[0], ngram_max=ngram_range[1], word_min=words[0], word_max=words[1],
                         lowercase=lowercase, mode="exact")
    for setting in ("full", "disjoint"):
        held = held_out_doc_ids(syn, setting)
        visible = hist if held is None else hist[~hist["doc_id"].isin(held)]
        ref, groups, authors = sklearn_reference(visible, syn, params)
        profiles = profile_histories(hist, params, held_out=held)
        timelines, got_groups, _, _ = timeline_profiles(profiles, syn)
        got = similarity(timelines, profiles)
        assert list(got_groups) == groups and list(profiles.authors) == authors
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
        res = stylometric_attack(profiles, syn, setting)
        assert (res.per_timeline["predicted_author"].to_numpy() == np.asarray(authors, object)[ref.argmax(1)]).all()
        assert res.summary["adversary"] == setting and res.summary["n_timelines"] == len(groups)
    full = reidentify_stylometric(hist, syn, params, setting="full").summary
    disj = reidentify_stylometric(hist, syn, params, setting="disjoint").summary
    assert full["accuracy_at_1"] == 1.0 and full["chance"] == pytest.approx(1 / 9)
    assert full["chance"] < disj["accuracy_at_1"] < 1.0  # other turns still give speakers away


def test_sketch_within_documented_error_of_exact(debates) -> None:
    hist, syn = debates
    exact = profile_histories(hist, StyloParams(mode="exact"))
    ref = similarity(timeline_profiles(exact, syn)[0], exact)
    for width, tol in ((4096, 0.1), (16384, 0.05)):
        sketch = profile_histories(hist, StyloParams(mode="sketch", width=width, hash_bits=20))
        got = similarity(timeline_profiles(sketch, syn)[0], sketch)
        err = np.abs(got - ref)
        # count sketch: sd ~ sqrt((1 + cos^2) / width) per inner product; the max over 30x9 pairs stays
        # within ~4 sd, the mean within ~1 sd
        assert err.mean() < 1.5 * math.sqrt(2 / width) and err.max() < tol
        assert (got.argmax(1) == ref.argmax(1)).mean() >= 0.9


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pd.DataFrame]:
    path = str(tmp_path_factory.mktemp("stylo") / "h.parquet")
    simulate_histories(300, 30_000, seed=3, out_path=path, row_group_rows=10_000, vocab_size=5_000)
    return path, simulate_synthetic(path, 30, 600, rewrite_strength=0.3, seed=4)


def test_dask_shards_equal_single_process(sim, tmp_path: Path) -> None:
    path, syn = sim
    table = pq.read_table(path)
    shards = []
    for i, (lo, hi) in enumerate(((0, 9_000), (9_000, 21_000), (21_000, 30_000))):
        shards.append(str(tmp_path / f"s{i}.parquet"))
        pq.write_table(table.slice(lo, hi - lo), shards[-1])
    params = StyloParams(mode="sketch", width=1024, hash_bits=18)  # 4 MB of text: auto would profile it as text
    held = held_out_doc_ids(syn, "disjoint")
    one = profile_histories(path, params, chunk_rows=7_000, held_out=held)
    with dask_client(n_workers=2, threads_per_worker=1) as client:
        many = profile_histories_dask(client, shards, params, chunk_rows=4_000, held_out=held)
    order = pd.Index(many.authors).get_indexer(one.authors)
    assert (order >= 0).all() and len(order) == len(many.authors) == 299  # one user had only released posts
    np.testing.assert_allclose(many.profiles[order], one.profiles, atol=1e-6)
    np.testing.assert_array_equal(many.idf, one.idf)
    assert many.n_posts == one.n_posts == 30_000 - len(syn)
    a, b = stylometric_attack(one, syn, "disjoint"), stylometric_attack(many, syn, "disjoint")
    np.testing.assert_array_equal(a.per_timeline["rank"], b.per_timeline["rank"])


def test_sketch_profiles_are_the_same_on_one_thread_or_several(sim, monkeypatch) -> None:
    """The sketch kernels stripe their posts over threads (the sample, the document frequencies, the owners'
    rows): three stripes give the profiles one gives, to the bit."""
    from tasks.privacy.stylometric import kernels

    path, _ = sim
    params = StyloParams(mode="sketch", width=1024, hash_bits=18, df_sample=10_000)  # a sample: 1 post in 3
    profiles = {}
    for n_threads in (1, 3):
        monkeypatch.setattr(kernels, "kernel_threads", lambda n=n_threads: n)
        profiles[n_threads] = profile_histories(path, params, chunk_rows=7_000)
    assert profiles[3].n_posts == 30_000
    np.testing.assert_array_equal(profiles[3].authors, profiles[1].authors)
    np.testing.assert_array_equal(profiles[3].idf, profiles[1].idf)
    np.testing.assert_array_equal(profiles[3].profiles, profiles[1].profiles)


def test_rewrite_strength_lowers_accuracy_and_beats_minhash_when_disjoint(sim) -> None:
    from tasks.privacy.reidentify import reidentify

    path, _ = sim
    acc = []
    for strength in (0.0, 0.6, 1.0):
        syn = simulate_synthetic(path, 30, 600, rewrite_strength=strength, seed=4)
        acc.append(reidentify_stylometric(path, syn, setting="disjoint").summary["accuracy_at_1"])
    assert acc[0] >= acc[1] >= acc[2] and acc[0] > acc[2] and acc[0] > 0.5
    syn = simulate_synthetic(path, 30, 600, rewrite_strength=0.0, seed=4)
    assert reidentify(path, syn, setting="disjoint").summary["accuracy"] < acc[0]


def test_edge_cases_lose_nothing() -> None:
    hist = pd.DataFrame({
        "doc_id": ["a1", "a2", "b1", "c1", "e1", "r1", "r2", "z1"],
        "author_id": ["a", "a", "b", "c", "e", "r", "r", None],
        "text": ["Hello there, my friend!", "Hello again, dear friend!", "only one post", "", None,
                 "Привет, друг! Как дела?", "Привет всем, друзья!", "no author"],
    })
    syn = pd.DataFrame({
        "doc_id": ["a1", "b1", "c1", "r1", "x1"],
        "group_id": ["ga", "gb", "gc", "gr", "gx"],
        "author_id": ["a", "b", "c", "r", "x"],
        "text": ["Hello there, my friend!", "only one post", "", "Привет, друг!", "今天天气很好"],
    })
    for mode in ("exact", "sketch"):
        params = StyloParams(mode=mode, width=256, hash_bits=12)  # type: ignore[arg-type]
        full = reidentify_stylometric(hist, syn, params, setting="full")
        per = full.per_timeline.set_index("group_id")
        assert len(per) == 5 and per.loc["ga", "correct"] and per.loc["gr", "correct"]
        assert not per.loc["gx", "in_history"] and not per.loc["gx", "correct"]  # unknown author: a miss
        assert not per.loc["gc", "correct"]  # an empty text scores 0 with everyone: a tie, a miss
        assert full.summary["n_history_users"] == 5 and full.summary["n_history_posts"] == 7  # null author dropped
        disj = reidentify_stylometric(hist, syn, params, setting="disjoint").per_timeline.set_index("group_id")
        assert not disj.loc["gb", "in_history"] and disj.loc["gb", "reciprocal_rank"] == 0  # one-post user
        assert disj.loc["gr", "in_history"] and disj.loc["gr", "correct"]  # Cyrillic style survives
    empty = pd.DataFrame({"doc_id": pd.Series([], dtype=object), "author_id": pd.Series([], dtype=object),
                          "text": pd.Series([], dtype=object)})
    for mode in ("exact", "sketch"):
        s = reidentify_stylometric(empty, syn, StyloParams(mode=mode, hash_bits=12)).summary  # type: ignore[arg-type]
        assert math.isnan(s["accuracy_at_1"]) and math.isnan(s["chance"]) and "empty" in s["reason"]
    with pytest.raises(InputError, match="several true authors"):
        reidentify_stylometric(hist, syn.assign(group_id="g"))
    with pytest.raises(ValueError, match="power of two"):
        StyloParams(width=1000)


def test_exact_mode_equals_scikit_learn_on_mixed_scripts() -> None:
    """Word tokens follow Python's \\w on any script (Cyrillic, CJK, Arabic, digits, underscore), emoji
    and punctuation are characters only, and runs of any Unicode whitespace collapse to one space while a
    single one stays as it is, as in scikit-learn."""
    texts = ["Привет, мир! как дела_2024?", "東京タワー は 高い 東京 です", "مرحبا بالعالم 123 !!", "ok 👍 ok…  fine",
             "Ünïcödé wörds   and  ÉCOLE", "a b c d e", "x_y z9 ٣٤ 𝔘𝔫𝔦", "Привет мир", "東京 です", "fine ok 👍",
             "tabs\t\tand\nnew\r\nlines \u3000\u2003 wide  ", "single\ttab\nline\x0bvt\x1c sep\xa0nbsp\u2028end\n"]
    hist = pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(texts))], "author_id": [f"u{i % 4}" for i in range(len(texts))],
                         "text": texts})
    syn = pd.DataFrame({"group_id": ["g0", "g0", "g1", "g2"], "author_id": ["u0", "u0", "u1", "u2"],
                        "text": ["Привет мир ok", "дела_2024 東京", "مرحبا 123", "wörds ÉCOLE 👍"]})
    params = StyloParams(mode="exact", word_min=1, word_max=2)
    ref, groups, authors = sklearn_reference(hist, syn, params)
    profiles = profile_histories(hist, params)
    timelines, got_groups, _, _ = timeline_profiles(profiles, syn)
    got = similarity(timelines, profiles)
    assert list(profiles.authors) == authors and list(got_groups) == groups
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


def test_sampled_document_frequencies_hold_the_ranking(sim) -> None:
    """At the article's scale document frequencies come from a hashed sample of the posts; on a tenth of
    the posts the attack keeps its ranking and the cosines move little."""
    path, syn = sim
    full = profile_histories(path, StyloParams(mode="sketch", width=1024, hash_bits=18))
    part = profile_histories(path, StyloParams(mode="sketch", width=1024, hash_bits=18, df_sample=3_000))
    assert part.n_posts == full.n_posts == 30_000
    a = similarity(timeline_profiles(full, syn)[0], full)
    b = similarity(timeline_profiles(part, syn)[0], part)
    assert np.abs(a - b).mean() < 0.02 and (a.argmax(1) == b.argmax(1)).mean() >= 0.9
    assert not np.array_equal(full.idf, part.idf)  # the sample really is a sample


def test_histories_are_profiled_once_per_setting(sim, monkeypatch) -> None:
    """Every strategy of a run attacks the same histories: the profiles are computed once per (file,
    parameters, held-out documents) and reused; another setting or changed parameters profile again."""
    import tasks.privacy.attacks.stylometric as registered
    from tasks.privacy.attacks import build_attack, run_attacks

    path, syn = sim
    calls = []
    real = registered.profile_histories
    monkeypatch.setattr(registered, "profile_histories", lambda *a, **k: calls.append(k.get("held_out")) or real(*a, **k))
    attack = [build_attack("stylometric", {"width": 1024, "hash_bits": 18})]
    first = run_attacks(path, syn, attack, ["full", "disjoint"])
    again = run_attacks(path, syn.assign(text=syn["text"].str.upper()), attack, ["full", "disjoint"])
    assert len(calls) == 2 and calls[0] is None and len(calls[1]) == len(syn)  # full, then disjoint: once each
    assert [r.summary["adversary"] for r in first] == [r.summary["adversary"] for r in again] == ["full", "disjoint"]
    run_attacks(path, syn, [build_attack("stylometric", {"width": 2048, "hash_bits": 18})], ["full"])
    assert len(calls) == 3


def text_reference(hist: pd.DataFrame, syn: pd.DataFrame, params: StyloParams) -> tuple[np.ndarray, list, list]:
    """Text mode in scikit-learn: IDF over the history posts, each author's and each timeline's summed
    counts (its posts as one text, no n-gram across two posts), sublinear TF, IDF, L2, cosine."""
    import scipy.sparse as sp
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.preprocessing import normalize

    vec = reference_vectorizer(params).fit(hist["text"])
    counts = CountVectorizer(analyzer=vec.build_analyzer(), vocabulary=vec.vocabulary_)

    def profiles(texts: pd.Series, owners: pd.Series) -> tuple[sp.csr_matrix, list]:
        names = list(dict.fromkeys(owners))
        x = counts.transform(texts).astype(float)
        summed = sp.csr_matrix(np.vstack([np.asarray(x[(owners == o).to_numpy()].sum(axis=0)) for o in names]))
        summed.data = 1.0 + np.log(summed.data)
        return normalize(summed @ sp.diags(vec.idf_)), names

    a, authors = profiles(hist["text"], hist["author_id"])
    t, groups = profiles(syn["text"], syn["group_id"])
    return (t @ a.T).toarray(), groups, authors


def test_text_mode_equals_scikit_learn_on_debates(debates) -> None:
    hist, syn = debates
    for params in (StyloParams(mode="text"), StyloParams(mode="text", ngram_min=3, ngram_max=3, word_max=0,
                                                         lowercase=True)):
        for setting in ("full", "disjoint"):
            held = held_out_doc_ids(syn, setting)
            visible = hist if held is None else hist[~hist["doc_id"].isin(held)]
            ref, groups, authors = text_reference(visible, syn, params)
            profiles = profile_histories(hist, params, held_out=held)
            timelines, got_groups, _, _ = timeline_profiles(profiles, syn)
            assert profiles.mode == "text" and list(profiles.authors) == authors and list(got_groups) == groups
            np.testing.assert_allclose(similarity(timelines, profiles), ref, rtol=0, atol=1e-12)
            res = stylometric_attack(profiles, syn, setting)
            assert res.summary["mode_used"] == "text"
            assert (res.per_timeline["predicted_author"].to_numpy() == np.asarray(authors, object)[ref.argmax(1)]).all()


def test_auto_mode_is_text_up_to_its_size_then_sketch(debates, tmp_path: Path) -> None:
    hist, syn = debates
    path = tmp_path / "h.parquet"
    hist.to_parquet(path)
    small = profile_histories(path, StyloParams())  # 0.3 MB of text
    assert small.mode == "text" and StyloParams().mode == "auto"
    big = profile_histories(path, StyloParams(text_max_mb=0))
    assert big.mode == "sketch" and big.profiles.shape == (9, 4096)
    assert profile_histories(hist, StyloParams(text_max_mb=0)).mode == "sketch"  # a DataFrame's text is measured
    text = profile_histories(path, StyloParams(mode="text"))
    np.testing.assert_array_equal(similarity(timeline_profiles(small, syn)[0], small),
                                  similarity(timeline_profiles(text, syn)[0], text))
    assert StyloParams().signature != StyloParams(text_max_mb=1).signature
    with pytest.raises(ValueError, match="mode must be"):
        StyloParams(mode="fast")  # type: ignore[arg-type]


CONVENTIONS = DEBATES.parent / "conventions.parquet"


def test_text_profiles_find_convention_speakers_mean_profiles_miss() -> None:
    """The default profile on real short posts: each speaker's other sentences as history, a run of 5
    consecutive sentences as the timeline (disjoint). Averaging one-sentence post vectors read 0.17 here;
    the speaker's sentences as one text read 0.41 (seed 0; 0.42 on average over 10 seeds)."""
    from tasks.corpus.splits import author_timelines

    if not CONVENTIONS.exists():
        pytest.skip(f"{CONVENTIONS} missing: run `synthugc datasets fetch conventions`")
    corpus = pd.read_parquet(CONVENTIONS).astype({"text": object, "author_id": object, "doc_id": object})
    timelines, _ = author_timelines(corpus, n_posts=5, seed=0)
    syn = timelines[["doc_id", "author_id", "group_id", "text"]]
    hist = corpus[["doc_id", "author_id", "text"]]
    mean = reidentify_stylometric(hist, syn, StyloParams(mode="exact"), setting="disjoint").summary
    auto = reidentify_stylometric(hist, syn, StyloParams(), setting="disjoint").summary
    assert auto["mode_used"] == "text" and auto["n_timelines"] == 181
    assert auto["accuracy_at_1"] > mean["accuracy_at_1"] + 0.15 and auto["accuracy_at_1_ci_low"] > 0.3


def test_evidence_follows_the_text_profiles(debates, tmp_path: Path) -> None:
    """In text mode the evidence scores the timeline's posts joined against the author's posts joined; a
    history file written by pandas (string, not large_string, texts) is read as well."""
    from tasks.privacy.stylometric.evidence import stylometric_evidence

    hist, syn = debates
    path = tmp_path / "h.parquet"
    hist.to_parquet(path)
    text = stylometric_evidence(path, syn, StyloParams(), held_out=None, top=5)
    mean = stylometric_evidence(path, syn, StyloParams(mode="exact"), held_out=None, top=5)
    assert set(text["group_id"]) == set(mean["group_id"]) == set(syn["group_id"])
    assert (text["contribution"] > 0).all() and text.groupby("group_id").size().eq(5).all()
    assert not text[["feature", "contribution"]].equals(mean[["feature", "contribution"]])
