"""The classifier attack: exact mode predicts what scikit-learn's own TfidfVectorizer + LinearSVC pipeline
predicts, the two-stage path's numba solver is LinearSVC's optimisation, two stages agree with exact where
the true author is a candidate, the disjoint adversary never trains on the sources, the registry knows
the attack (listing, validation, a run with the stylometric attack profiles the histories once), and its
evidence is the true author's largest contributions x_f * w_f, which masking takes away."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.preprocessing import normalize
from sklearn.svm import LinearSVC

from tasks.corpus.simulate import simulate_histories, simulate_synthetic
from tasks.errors import ConfigError
from tasks.parallel import fit_process_count
from tasks.privacy.attacks import attack_names, available_attacks, build_attack, catalogue_rows, run_attacks
from tasks.privacy.attribution import held_out_doc_ids
from tasks.privacy.audit import attack_timelines
from tasks.privacy.classifier.attack import fit_classifier, reidentify_classifier
from tasks.privacy.classifier.exact import ExactModel, validation_split
from tasks.privacy.classifier.params import ClassifierParams
from tasks.privacy.classifier.rerank import _post_rows, _rerank_all
from tasks.privacy.classifier.two_stage import candidate_posts
from tasks.privacy.stylometric.features import _ngram_keys, normalize_texts
from tasks.privacy.stylometric.kernels import _views, character_classes
from tasks.privacy.stylometric.params import StyloParams
from tasks.privacy.stylometric.scoring import reidentify_stylometric

DEBATES = Path(__file__).resolve().parent.parent / "data" / "debates.parquet"


@pytest.fixture(scope="module")
def debates() -> tuple[pd.DataFrame, pd.DataFrame]:
    if not DEBATES.exists():
        pytest.skip(f"{DEBATES} missing: run `synthugc datasets fetch debates`")
    corpus = pd.read_parquet(DEBATES).astype({"text": object, "author_id": object, "doc_id": object})
    released = corpus[corpus["split"] == "test"].assign(strategy="copy", variant="first", status="ok")
    return corpus[["doc_id", "author_id", "text"]], attack_timelines(released)


def scikit_learn_model(hist: pd.DataFrame, syn: pd.DataFrame, c: float, seed: int
                       ) -> tuple[sp.csr_matrix, list, LinearSVC, dict[str, int]]:
    """The attack in scikit-learn alone: one TfidfVectorizer over character 2-4-grams and word 1-2-grams
    (scikit-learn's own analyzers, cased, words kept apart by a prefix; sublinear TF, smooth IDF, L2), a
    LinearSVC (one-vs-rest, squared hinge) on the history posts, and each timeline's posts counted
    together (no n-gram across two posts), weighted and normalised the same way: (the timelines' rows, their
    ids, the model, the vocabulary)."""
    chars = TfidfVectorizer(analyzer="char", ngram_range=(2, 4), lowercase=False).build_analyzer()
    words = TfidfVectorizer(analyzer="word", ngram_range=(1, 2), lowercase=False).build_analyzer()

    def analyzer(text: str) -> list[str]:
        return chars(text) + ["\x00" + w for w in words(text)]

    vec = TfidfVectorizer(analyzer=analyzer, sublinear_tf=True)
    x = vec.fit_transform(hist["text"])
    model = LinearSVC(C=c, random_state=seed).fit(x, hist["author_id"].to_numpy(object))
    groups = list(dict.fromkeys(syn["group_id"]))
    counts = CountVectorizer(analyzer=analyzer, vocabulary=vec.vocabulary_).transform(syn["text"]).astype(float)
    summed = sp.csr_matrix(np.vstack([np.asarray(counts[(syn["group_id"] == g).to_numpy()].sum(axis=0))
                                      for g in groups]))
    summed.data = 1.0 + np.log(summed.data)
    return sp.csr_matrix(normalize(summed @ sp.diags(vec.idf_))), groups, model, vec.vocabulary_


def scikit_learn_pipeline(hist: pd.DataFrame, syn: pd.DataFrame, c: float, seed: int) -> tuple[np.ndarray, list, list]:
    """:func:`scikit_learn_model`'s decision values for the timelines (timelines x classes), ids and classes."""
    x, groups, model, _ = scikit_learn_model(hist, syn, c, seed)
    return model.decision_function(x), groups, list(model.classes_)


def test_exact_mode_predicts_what_scikit_learn_predicts(debates) -> None:
    hist, syn = debates
    params = ClassifierParams(c_grid=(), c=0.5, mode="exact")
    for setting in ("full", "disjoint"):
        held = held_out_doc_ids(syn, setting)
        visible = hist if held is None else hist[~hist["doc_id"].isin(held)]
        ref, groups, authors = scikit_learn_pipeline(visible, syn, 0.5, params.seed)
        res = reidentify_classifier(hist, syn, params, setting=setting)
        per = res.per_timeline.set_index("group_id").loc[groups]
        assert (per["predicted_author"].to_numpy() == np.asarray(authors, object)[ref.argmax(1)]).all()
        true = pd.Index(authors).get_indexer(per["author_id"])  # -1: no history left (a moderator, disjoint)
        np.testing.assert_allclose(per["score_true"], np.where(true >= 0, ref[np.arange(len(groups)), true], np.nan),
                                   atol=1e-4)
        np.testing.assert_allclose(per["score_top"], ref.max(axis=1), atol=1e-4)
        assert res.summary["mode_used"] == "exact" and res.summary["n_history_posts"] == len(visible)
        assert res.summary["n_timelines"] == len(groups) and res.summary["adversary"] == setting
    assert res.summary["accuracy_at_1"] > res.summary["chance"]


def test_c_is_tuned_on_held_out_posts_then_refitted(debates) -> None:
    hist, _ = debates
    grid = ClassifierParams(c_grid=(0.1, 1.0, 10.0), mode="exact")
    side = fit_classifier(hist, grid, None)
    assert isinstance(side, ExactModel) and set(side.validation) == {0.1, 1.0, 10.0}
    best = max(side.validation.values())
    assert side.c == min(c for c, v in side.validation.items() if v == best)  # ties go to the smaller C
    fixed = fit_classifier(hist, ClassifierParams(c_grid=(), c=side.c, mode="exact"), None)
    np.testing.assert_array_equal(side.coef, fixed.coef)  # refitted on every post with the chosen C
    texts = normalize_texts(pa.array(hist["text"].tolist(), pa.large_string()), False)
    owner = pd.factorize(hist["author_id"])[0]
    held = validation_split(texts, owner, 0.2, seed=1)
    np.testing.assert_array_equal(held, validation_split(texts, owner, 0.2, seed=1))
    share = pd.Series(held).groupby(owner).mean()
    assert share.between(0.1, 0.3).all() and not np.array_equal(held, validation_split(texts, owner, 0.2, seed=2))


def test_the_c_grid_fitted_in_processes_equals_the_grid_fitted_here(debates, monkeypatch) -> None:
    """The grid's fits in processes of their own give the model, the C and the validation figures of the
    same fits one after the other in this process (liblinear is seeded per fit, never shared)."""
    hist, _ = debates
    grid = ClassifierParams(c_grid=(0.1, 1.0, 10.0), mode="exact")
    monkeypatch.setenv("SYNTHUGC_FIT_PROCESSES", "1")
    here = fit_classifier(hist, grid, None)
    monkeypatch.setenv("SYNTHUGC_FIT_PROCESSES", "3")
    assert fit_process_count(3) == 3 and fit_process_count(1) == 1
    apart = fit_classifier(hist, grid, None)
    assert apart.c == here.c and apart.validation == here.validation and len(here.validation) == 3
    np.testing.assert_array_equal(apart.coef, here.coef)
    np.testing.assert_array_equal(apart.intercept, here.intercept)


def test_a_fitted_exact_model_is_read_back_from_the_cache_folder(debates, tmp_path, monkeypatch) -> None:
    """A second fit on the same history file, parameters and held-out documents reads the model the first
    wrote (the same weights, C and validation figures, without fitting); other held-out documents, a
    rewritten file or an unreadable cached file are fitted again."""
    import tasks.privacy.classifier.attack as classifier
    import tasks.privacy.classifier.exact_cache as exact_cache

    hist, syn = debates
    path = tmp_path / "histories.parquet"
    hist.to_parquet(path, index=False)
    params = ClassifierParams(c_grid=(0.3, 1.0), mode="exact")
    held = held_out_doc_ids(syn, "disjoint")
    fitted = fit_classifier(str(path), params, held, cache=tmp_path / "models")
    [written] = (tmp_path / "models").glob("*.npz")
    fresh = reidentify_classifier(hist, syn, params, setting="disjoint").per_timeline  # a DataFrame: never cached
    fits = []
    monkeypatch.setattr(exact_cache, "fit_exact", lambda *a, **k: fits.append(a) or fitted)
    read = fit_classifier(str(path), params, held, cache=tmp_path / "models")
    assert not fits and read is not fitted
    np.testing.assert_array_equal(read.coef, fitted.coef)
    np.testing.assert_array_equal(read.vocab, fitted.vocab)
    assert (read.c, read.validation, read.n_posts) == (fitted.c, fitted.validation, fitted.n_posts)
    assert list(read.authors) == list(fitted.authors)
    attacked = classifier.classifier_attack(read, syn, "disjoint").per_timeline
    assert (attacked["predicted_author"] == fresh["predicted_author"]).all()
    np.testing.assert_array_equal(attacked["score_true"], fresh["score_true"])
    fit_classifier(str(path), params, None, cache=tmp_path / "models")  # the full adversary's: another model
    assert len(fits) == 1
    hist.iloc[1:].to_parquet(path, index=False)  # a rewritten file
    fit_classifier(str(path), params, held, cache=tmp_path / "models")
    assert len(fits) == 2
    hist.to_parquet(path, index=False)
    written.write_bytes(b"not a model")
    fit_classifier(str(path), params, held, cache=tmp_path / "models")
    assert len(fits) == 3


@pytest.mark.parametrize(("n_threads", "n_classes"), [(1, 4), (3, 4), (1, 8), (2, 9)])
def test_rerank_solver_is_linear_svc(n_threads: int, n_classes: int) -> None:
    """The two-stage re-ranker's dual coordinate descent solves LinearSVC's problem: on the same hashed
    features (one bucket per column) its decision values on a timeline equal scikit-learn's, whether the posts
    and timelines are striped over one thread or several, and whether the candidates fill the weight rows' lanes
    (8) or leave some of them padding (4, 9)."""
    rng = np.random.default_rng(0)
    vocab = [f"w{chr(97 + i)}" for i in range(n_classes + 4)]
    posts = [" ".join(rng.choice(vocab[a:a + 4], 6)) + "!" * a for a in range(n_classes) for _ in range(8)]
    owner = np.repeat(np.arange(n_classes), 8)
    one = [" ".join(rng.choice(vocab[1:5], 6)) + "!"] * 2
    timeline = one * n_threads  # n_threads timelines of the same two posts: one a stripe
    bits = 16
    idf = np.ones(1 << bits)
    lo, hi, wlo, whi = StyloParams().ngram_args()
    texts = normalize_texts(pa.array(posts, pa.large_string()), False)
    offsets, data, _ = _views(texts)
    indptr, idx, val = _post_rows(offsets, data, lo, hi, wlo, whi, character_classes(), np.uint64(64 - bits), idf,
                                  n_threads)
    x = sp.csr_matrix((val.astype(float), idx, indptr), shape=(len(posts), 1 << bits))
    tl_offsets, tl_data, _ = _views(normalize_texts(pa.array(timeline, pa.large_string()), False))
    _, keys = _ngram_keys(normalize_texts(pa.array(one, pa.large_string()), False), StyloParams())
    t = np.bincount((keys >> np.uint64(64 - bits)).astype(np.int64), minlength=1 << bits).astype(float)
    t[t > 0] = 1.0 + np.log(t[t > 0])
    t /= np.linalg.norm(t)
    for c in (0.1, 1.0):
        got = _rerank_all(np.array([list(range(n_classes))] * n_threads), np.arange(0, 8 * n_classes + 1, 8), indptr,
                          idx, val, np.arange(0, 2 * n_threads + 1, 2), tl_offsets, tl_data, lo, hi, wlo, whi,
                          character_classes(), np.uint64(64 - bits), idf, c, 1e-6, 100_000, 1, n_threads)
        ref = LinearSVC(C=c, tol=1e-8, max_iter=100_000).fit(x, owner).decision_function(sp.csr_matrix(t))
        np.testing.assert_allclose(got, np.repeat(ref, n_threads, axis=0), atol=2e-4)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pd.DataFrame]:
    path = str(tmp_path_factory.mktemp("classifier") / "h.parquet")
    simulate_histories(30, 6_000, seed=5, out_path=path, row_group_rows=1_500, vocab_size=3_000)
    return path, simulate_synthetic(path, 15, 150, rewrite_strength=0.2, seed=6)


def test_two_stages_rank_the_same_top_1_as_exact(sim) -> None:
    """Where the true author is among stage 1's candidates, re-ranking them finds the author the SVM over
    every author finds (here both find every one of them; elsewhere they may differ: two models)."""
    path, syn = sim
    k = 5
    for setting in ("full", "disjoint"):
        exact = reidentify_classifier(path, syn, ClassifierParams(mode="exact", c_grid=()), setting=setting)
        staged = reidentify_classifier(path, syn, ClassifierParams(mode="two_stage", top_k=k), setting=setting)
        stage1 = reidentify_stylometric(path, syn, StyloParams(), setting=setting).per_timeline
        assert exact.summary["mode_used"] == "exact" and staged.summary["mode_used"] == "two_stage"
        candidate = (stage1["rank"] <= k).to_numpy()
        assert candidate.sum() >= 10 and staged.summary["top_k_recall"] == candidate.mean()
        np.testing.assert_array_equal(staged.per_timeline["predicted_author"][candidate],
                                      exact.per_timeline["predicted_author"][candidate])
        assert exact.per_timeline["correct"][candidate].all()
        assert staged.summary["n_history_users"] == exact.summary["n_history_users"]
    # the auto mode: 6,000 posts x 30 authors is over a limit of 100k pairs, under the default
    assert ClassifierParams(exact_max_pairs=100_000).resolved_mode(path) == "two_stage"
    assert ClassifierParams().resolved_mode(path) == "exact"
    assert ClassifierParams(exact_max_pairs=5_999).resolved_mode(pd.read_parquet(path)) == "two_stage"


def test_a_true_author_outside_the_top_k_is_a_miss(sim) -> None:
    """With one candidate the re-ranker has nothing to choose: every timeline goes to stage 1's best, and
    the others keep stage 1's order below it (accuracy@10 and MRR as the stylometric attack's)."""
    path, _ = sim
    hard = simulate_synthetic(path, 15, 150, rewrite_strength=1.0, seed=6)
    one = reidentify_classifier(path, hard, ClassifierParams(mode="two_stage", top_k=1), setting="disjoint")
    stylo = reidentify_stylometric(path, hard, StyloParams(), setting="disjoint")
    a, b = one.per_timeline, stylo.per_timeline
    np.testing.assert_array_equal(a["predicted_author"], b["predicted_author"])
    np.testing.assert_array_equal(a["rank"], b["rank"])
    assert one.summary["top_k_recall"] == stylo.summary["accuracy_at_1"] < 1.0


def test_disjoint_never_trains_on_the_sources(sim) -> None:
    path, syn = sim
    held = held_out_doc_ids(syn, "disjoint")
    texts, owner = candidate_posts(path, held, np.array(sorted(set(syn["author_id"]))), 10_000, False)
    source = set(pd.read_parquet(path).set_index("doc_id").loc[sorted(held), "text"])
    assert len(owner) and not source & set(texts.to_pylist())  # simulated posts are distinct texts
    kept, _ = candidate_posts(path, None, np.array(sorted(set(syn["author_id"]))), 10_000, False)
    assert source <= set(kept.to_pylist())
    _, who = candidate_posts(path, held, np.array(sorted(set(syn["author_id"]))), 3, False)
    assert np.bincount(who).max() == 3 and (np.diff(who) >= 0).all()  # the first 3 of each, grouped
    for mode in ("exact", "two_stage"):
        full = reidentify_classifier(path, syn, ClassifierParams(mode=mode, c_grid=()), setting="full").summary
        disjoint = reidentify_classifier(path, syn, ClassifierParams(mode=mode, c_grid=()), setting="disjoint").summary
        assert full["n_history_posts"] == 6_000 and disjoint["n_history_posts"] == 6_000 - len(held)


def test_registered_listed_and_validated() -> None:
    assert "classifier" in available_attacks() and "classifier" in attack_names("all")
    row = next(r for r in catalogue_rows() if r["name"] == "classifier")
    assert row["description"].startswith("Discriminative: a one-vs-rest linear SVM") and not row["needs_gpu"]
    assert row["params"]["top_k"] == 20 and row["params"]["mode"] == "auto"
    attack = build_attack("classifier", {"c_grid": [0.5, 2], "top_k": 5})  # a config's list becomes a tuple
    assert attack.params.c_grid == (0.5, 2.0) and "c_grid:0.5,2" in attack.signature
    root = r"^privacy\.reidentify\.params\.classifier"
    for params, message in (({"top_k": 0}, root + r": top_k must be in \[1, 10000\]"),
                            ({"c": -1.0}, root + r": c must be a positive number"),
                            ({"c": "1"}, root + r"\.c: Input should be a valid number"),
                            ({"mode": "fast"}, root + r"\.mode: Input should be 'auto', 'exact' or 'two_stage'"),
                            ({"ngram_min": 5}, root + r": need 1 <= ngram_min <= ngram_max"),
                            ({"topk": 3}, root + r"\.topk: unknown parameter \(known: c, c_grid, "),
                            ({"c_grid": [0.0]}, root + r": c_grid values must be positive numbers")):
        with pytest.raises(ConfigError, match=message):
            build_attack("classifier", params)


def test_a_run_with_both_attacks_profiles_the_histories_once(sim, monkeypatch) -> None:
    import tasks.privacy.attacks.stylometric as registered

    path, syn = sim
    registered.StylometricAttack._memo._results.clear()  # the tests before filled it for this file
    calls = []
    real = registered.profile_histories
    monkeypatch.setattr(registered, "profile_histories", lambda *a, **k: calls.append(k.get("held_out")) or real(*a, **k))
    attacks = [build_attack("stylometric"), build_attack("classifier", {"mode": "two_stage", "top_k": 5})]
    results = run_attacks(path, syn, attacks, ["full", "disjoint"])
    assert [(r.summary["attack"], r.summary["adversary"]) for r in results] == [
        ("stylometric", "full"), ("stylometric", "disjoint"), ("classifier", "full"), ("classifier", "disjoint")]
    assert len(calls) == 2  # stage 1 took the stylometric attack's profiles of each setting
    assert all(r.summary["accuracy_at_1"] > 0.5 for r in results)


def test_two_stage_reads_each_candidates_posts_once_and_scores_as_if_read_fresh(tmp_path, monkeypatch):
    """A later attack with the same side (a protect round) reads only the candidates it has not seen, and scores
    every timeline as a fresh side does."""
    import tasks.privacy.classifier.attack as classifier
    import tasks.privacy.classifier.two_stage as two_stage
    from tasks.corpus.simulate import simulate_histories, simulate_synthetic
    from tasks.privacy.audit import attack_timelines

    histories = simulate_histories(80, 4_000, seed=5, out_path=tmp_path / "h.parquet")
    timelines = attack_timelines(simulate_synthetic(histories, n_timelines=12, n_posts=60, rewrite_strength=0.3,
                                                    seed=6).assign(status="ok"))
    params = ClassifierParams(mode="two_stage", top_k=5)
    side = classifier.fit_classifier(histories, params, None)
    groups = list(dict.fromkeys(timelines["group_id"]))
    first, later = timelines[timelines["group_id"].isin(groups[:6])], timelines[timelines["group_id"].isin(groups[4:])]
    fresh = classifier.classifier_attack(classifier.fit_classifier(histories, params, None), later)
    classifier.classifier_attack(side, first)
    seen = set(side.read)
    asked: list[int] = []
    real = two_stage.candidate_posts
    monkeypatch.setattr(two_stage, "candidate_posts", lambda h, held, names, *a: asked.append(len(names)) or
                        real(h, held, names, *a))
    again = classifier.classifier_attack(side, later)
    assert len(asked) == 1 and asked[0] == len(set(side.read) - seen) > 0  # only the candidates not seen before
    assert seen & set(side.read) and asked[0] < len(set(side.read))  # the others were not read again
    pd.testing.assert_frame_equal(again.per_timeline, fresh.per_timeline)


def test_a_pass_reads_the_next_ranks_ahead_so_a_rewritten_timeline_needs_no_pass(tmp_path, monkeypatch):
    """The pass of a first attack also reads each timeline's candidates up to ``READ_AHEAD * top_k``: the same
    timelines a little rewritten (a protect round), whose candidates move within those ranks, are attacked
    without reading the histories again, and scored as a fresh side scores them."""
    import tasks.privacy.classifier.attack as classifier
    import tasks.privacy.classifier.two_stage as two_stage
    from tasks.corpus.simulate import simulate_histories, simulate_synthetic
    from tasks.privacy.audit import attack_timelines

    histories = simulate_histories(80, 4_000, seed=5, out_path=tmp_path / "h.parquet")
    timelines = attack_timelines(simulate_synthetic(histories, n_timelines=12, n_posts=60, rewrite_strength=0.3,
                                                    seed=6).assign(status="ok"))
    params = ClassifierParams(mode="two_stage", top_k=5)
    side = classifier.fit_classifier(histories, params, None)
    first = classifier.classifier_attack(side, timelines)
    assert len(side.read) > first.summary["n_candidates"] > 0  # more than the candidates it re-ranked
    rewritten = timelines.assign(text=[t if i % 3 else " ".join(t.split()[1:]) for i, t in enumerate(timelines["text"])])
    asked: list[int] = []
    real = two_stage.candidate_posts
    monkeypatch.setattr(two_stage, "candidate_posts", lambda h, held, names, *a: asked.append(len(names)) or
                        real(h, held, names, *a))
    again = classifier.classifier_attack(side, rewritten)
    assert asked == []  # every candidate of the rewritten timelines was read ahead
    fresh = classifier.classifier_attack(classifier.fit_classifier(histories, params, None), rewritten)
    assert asked  # a fresh side does read them
    pd.testing.assert_frame_equal(again.per_timeline, fresh.per_timeline)


def test_two_stage_takes_stage_ones_sketch_idf_and_estimates_its_own_otherwise(tmp_path, monkeypatch):
    """Where stage 1 profiled in sketch mode over the re-ranker's n-grams and buckets, the re-ranker's IDF is stage
    1's (no pass of its own over the histories); over text-mode profiles or other buckets it estimates its own."""
    import tasks.privacy.classifier.two_stage as two_stage
    from tasks.privacy.classifier.attack import classifier_attack

    passes: list[int] = []
    real = two_stage._sketch_df
    monkeypatch.setattr(two_stage, "_sketch_df", lambda *a, **k: passes.append(1) or real(*a, **k))
    text = simulate_histories(30, 1_200, seed=3, out_path=tmp_path / "text.parquet")
    side = fit_classifier(text, ClassifierParams(mode="two_stage"), None)
    assert side.stage1.mode == "text" and len(passes) == 1
    monkeypatch.setattr(StyloParams, "resolved_mode", lambda self, text_bytes: "sketch")
    sketched = simulate_histories(30, 1_200, seed=3, out_path=tmp_path / "sketch.parquet")
    side = fit_classifier(sketched, ClassifierParams(mode="two_stage"), None)
    assert side.stage1.mode == "sketch" and side.idf is side.stage1.idf and len(passes) == 1
    timelines = attack_timelines(simulate_synthetic(sketched, n_timelines=8, n_posts=24, rewrite_strength=0.2,
                                                    seed=4).assign(status="ok"))
    assert classifier_attack(side, timelines).summary["accuracy_at_1"] >= 0.5  # chance is 1/30
    other = fit_classifier(sketched, ClassifierParams(mode="two_stage", hash_bits=18), None)
    assert len(passes) == 2 and other.idf.shape == (1 << 18,)


def _runs(timelines: pd.DataFrame, posts: int) -> pd.DataFrame:
    """Each timeline cut into runs of ``posts`` posts (more, shorter timelines)."""
    run = timelines.groupby("group_id", sort=False).cumcount() // posts
    return timelines.assign(group_id=timelines["group_id"] + "/" + run.astype(str))


def test_evidence_is_the_true_authors_largest_contributions_and_masking_it_lowers_their_score(debates) -> None:
    """The contribution test: every evidence feature is carried by its timeline's text as written, its
    contribution is x_f * w_f of scikit-learn's own TfidfVectorizer + LinearSVC fitted on the same posts with the
    same C, no carried feature with a larger contribution is left out, and masking the evidence with the protect
    move lowers the true author's decision value for most timelines."""
    from tasks.privacy.evidence import carried_by
    from tasks.protect.moves import mask_evidence

    hist, syn = debates
    timelines = _runs(syn, 8)
    attack = build_attack("classifier", {"mode": "exact", "c_grid": [], "c": 0.5})
    held = held_out_doc_ids(timelines, "disjoint")
    prepared = attack.prepare(hist, "disjoint", held)
    assert type(attack).returns_evidence
    top = 10
    evidence = attack.evidence(prepared, timelines, top)
    assert list(evidence.columns) == ["group_id", "author_id", "feature", "kind", "contribution"]
    x, groups, model, vocabulary = scikit_learn_model(hist[~hist["doc_id"].isin(held)], timelines, 0.5, 1)
    classes = list(model.classes_)
    texts = timelines.groupby("group_id", sort=False)["text"].agg(list)
    known = timelines.groupby("group_id", sort=False)["author_id"].first().isin(classes)  # the moderator: no history
    assert set(evidence["group_id"]) == set(known.index[known]) and known.sum() >= 10 and not known.all()
    for group, part in evidence.groupby("group_id", sort=False):
        assert len(part) == top and part["author_id"].nunique() == 1 and (part["contribution"] > 0).all()
        assert part["contribution"].is_monotonic_decreasing and set(part["kind"]) <= {"char", "word"}
        g, a = groups.index(group), classes.index(part["author_id"].iloc[0])
        assert all(carried_by(texts[group], f, k).any() for f, k in zip(part["feature"], part["kind"], strict=True))
        cols = [vocabulary[("\x00" if k == "word" else "") + f] for f, k in zip(part["feature"], part["kind"],
                                                                                     strict=True)]
        ref = x[g].toarray().ravel() * model.coef_[a]
        np.testing.assert_allclose(part["contribution"], ref[cols], rtol=1e-3, atol=1e-6)
        # completeness: a feature scikit-learn rates above the last one kept is evidence, or no move can find it
        names = {v: k for k, v in vocabulary.items()}
        above = np.flatnonzero(ref > part["contribution"].min() * (1 + 1e-3) + 1e-6)
        shown = set(zip(part["feature"], part["kind"], strict=True))
        for col in above:
            name = names[col]
            feature, kind = (name[1:], "word") if name.startswith("\x00") else (name, "char")
            assert (feature, kind) in shown or not carried_by(texts[group], feature, kind).any(), (group, feature)
    # masking the evidence where the posts carry it lowers the true author's decision value
    features = {g: list(zip(f["feature"], f["kind"], strict=True)) for g, f in evidence.groupby("group_id")}
    masked = timelines.assign(text=[mask_evidence(t, features.get(g, []))
                                    for t, g in zip(timelines["text"], timelines["group_id"], strict=True)])
    before = attack.run(prepared, timelines).per_timeline.set_index("group_id").loc[list(features)]
    after = attack.run(prepared, masked).per_timeline.set_index("group_id").loc[list(features)]
    assert (after["score_true"] < before["score_true"]).mean() >= 0.9
    assert after["rank"].mean() > before["rank"].mean()
    # ``authors`` limits whose timelines get rows; the model prepare fitted is used, nothing is refitted
    some = set(evidence["author_id"].iloc[:1])
    assert attack.evidence(prepared, timelines.iloc[:0], top, authors=some).empty
    limited = attack.evidence(prepared, timelines, top, authors=some)
    pd.testing.assert_frame_equal(limited, evidence[evidence["author_id"].isin(some)].reset_index(drop=True))


def test_lowercased_features_are_named_as_the_posts_write_them(debates) -> None:
    """With ``lowercase`` the model's features are lowercase; the evidence names each as its timeline writes it,
    capitals kept, so the case-sensitive masking of the protect loop finds it."""
    from tasks.privacy.evidence import carried_by

    hist, syn = debates
    timelines = _runs(syn, 8)
    attack = build_attack("classifier", {"mode": "exact", "c_grid": [], "lowercase": True})
    evidence = attack.evidence(attack.prepare(hist, "full", None), timelines, 10)
    texts = timelines.groupby("group_id", sort=False)["text"].agg(list)
    assert len(evidence) and evidence["feature"].str.contains("[A-Z]").any()
    assert all(carried_by(texts[g], f, k).any() for g, f, k in evidence[["group_id", "feature", "kind"]].itertuples(
        index=False))


def test_two_stage_evidence_is_stage_ones(sim) -> None:
    """Two stages train the re-ranker per timeline and keep no weights: the evidence is the stylometric stage 1's."""
    from tasks.privacy.stylometric.evidence import stylometric_evidence

    path, syn = sim
    attack = build_attack("classifier", {"mode": "two_stage", "top_k": 5})
    held = held_out_doc_ids(syn, "disjoint")
    got = attack.evidence(attack.prepare(path, "disjoint", held), syn, 5)
    assert len(got)
    pd.testing.assert_frame_equal(got, stylometric_evidence(path, syn, StyloParams(), held_out=held, top=5))


def test_feedback_of_both_attacks_computes_stage_ones_evidence_once(sim, tmp_path, monkeypatch) -> None:
    """A protect loop fed back by the stylometric and the two-stage classifier attacks asks the stylometric
    evidence once per round (the classifier's is the same rows), and gets what asking both gave; an exact
    classifier's own evidence is still asked."""
    import tasks.privacy.attacks.classifier as classifier_module
    import tasks.privacy.attacks.stylometric as stylometric_module
    from tasks.protect.attackers import Attackers, RoleSpec

    path, syn = sim
    held = frozenset(held_out_doc_ids(syn, "disjoint"))
    calls: list[str] = []
    for module in (stylometric_module, classifier_module):
        real = module.stylometric_evidence
        monkeypatch.setattr(module, "stylometric_evidence", lambda *a, real=real, name=module.__name__, **k:
                            calls.append(name) or real(*a, **k))
    both = (("stylometric", {}), ("classifier", {"mode": "two_stage", "top_k": 5}))
    attackers = Attackers([RoleSpec("feedback", both, str(path), ("disjoint",))], held, tmp_path)
    got = attackers.evidence(syn, 5, set(syn["author_id"]))
    assert calls == ["tasks.privacy.attacks.stylometric"]
    one = build_attack("stylometric")
    alone = one.evidence(one.prepare(path, "disjoint", held), syn, 5, authors=set(syn["author_id"]))
    assert len(got)
    pd.testing.assert_frame_equal(got, alone)
    exact = Attackers([RoleSpec("feedback", (both[0], ("classifier", {"mode": "exact", "c_grid": []})), str(path),
                                ("disjoint",))], held, tmp_path)
    calls.clear()
    assert len(exact.evidence(syn, 5, set(syn["author_id"]))) > len(alone) and calls == [
        "tasks.privacy.attacks.stylometric"]  # the exact model's evidence is its own, asked too


def test_attacks_prepared_side_by_side_give_what_one_after_the_other_gives(sim, tmp_path) -> None:
    """Protect prepares its roles' attacks two at a time: the attackers keep the roles' order and attack every
    timeline as attackers prepared one after the other (each history memo emptied in between) do."""
    from tasks.privacy.attacks import forget_histories
    from tasks.protect.attackers import Attackers, RoleSpec

    path, syn = sim
    held = frozenset(held_out_doc_ids(syn, "disjoint"))
    attacks = (("stylometric", {}), ("classifier", {"mode": "exact", "c_grid": [0.5, 2.0]}), ("delta", {}))
    specs = [RoleSpec("feedback", attacks[:2], str(path), ("disjoint",)),
             RoleSpec("judge", attacks, str(path), ("full", "disjoint"))]
    got = {}
    for threads in (1, 2):
        forget_histories(path)
        attackers = Attackers(specs, held, tmp_path / f"threads-{threads}", threads=threads)
        got[threads] = ([(e.role, e.attack.name, e.adversary) for e in attackers.entries], attackers.run(syn))
    assert got[2][0] == got[1][0] == [("feedback", "stylometric", "disjoint"), ("feedback", "classifier", "disjoint"),
                                      *[("judge", name, adversary) for name, _ in attacks
                                        for adversary in ("full", "disjoint")]]
    assert len(got[2][1]) == len(syn["group_id"].unique()) * len(got[2][0])
    pd.testing.assert_frame_equal(got[2][1], got[1][1])
