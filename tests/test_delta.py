"""The Burrows' Delta attack: equal to a plain scikit-learn + numpy + scipy Delta, the adversary settings, the
registry's parameter checks, one profiling per setting, and re-identification on simulated histories."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from scipy.spatial.distance import cityblock, cosine
from sklearn.feature_extraction.text import CountVectorizer

from tasks.corpus.simulate import simulate_histories, simulate_synthetic
from tasks.errors import ConfigError
from tasks.privacy.attacks import build_attack, run_attacks
from tasks.privacy.attribution import held_out_doc_ids
from tasks.privacy.delta import (
    TOKEN_PATTERN,
    DeltaParams,
    count_listed,
    delta_attack,
    delta_scores,
    profile_histories,
    timeline_z,
    word_keys,
)

WORDS = ["the", "The", "and", "of", "to", "a", "I", "it's", "don't", "e-mail", "Überall", "straße", "слово",
         "Слово", "日本語", "παράδειγμα", "x", "42", "4", "_under_score", "naïve", "café", "well,", "yes!", "ok...",
         "wow", "so", "very", "much", "zebra", "apple", "banana", "KIWI", "kiwi", "mango", "ÉCOLE", "école"]


def _corpus(n_authors: int = 12, posts: int = 10, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Histories whose authors favour different words (each draws from its own skewed distribution), and
    timelines of new posts by some of them."""
    rng = np.random.default_rng(seed)
    rows, timeline_rows = [], []
    for a in range(n_authors):
        weights = rng.dirichlet(np.full(len(WORDS), 0.3))
        for i in range(posts + 3):
            text = " ".join(rng.choice(WORDS, int(rng.integers(3, 25)), p=weights))
            if i < posts:
                rows.append({"doc_id": f"d{a}-{i}", "author_id": f"a{a:02d}", "text": text})
            elif a % 2 == 0:
                timeline_rows.append({"doc_id": f"n{a}-{i}", "group_id": f"t{a}", "author_id": f"a{a:02d}",
                                      "text": text})
    return pd.DataFrame(rows), pd.DataFrame(timeline_rows)


def reference_delta(hist: pd.DataFrame, syn: pd.DataFrame, mfw: int,
                    variant: str) -> tuple[np.ndarray, list[str], list[str]]:
    """Delta the plain way: scikit-learn's counts, pandas z-scores, scipy's distances, one pair at a time."""
    every = CountVectorizer()
    x = every.fit_transform(hist["text"])
    totals = np.asarray(x.sum(axis=0)).ravel()
    ranked = sorted(zip(every.get_feature_names_out(), totals, strict=True), key=lambda wc: (-wc[1], wc[0]))
    words = [w for w, _ in ranked[:mfw]]
    vec = CountVectorizer(vocabulary=words)
    analyzer = every.build_analyzer()

    def freqs(texts: pd.Series, owner: pd.Series) -> pd.DataFrame:
        counts = pd.DataFrame(vec.transform(texts).toarray(), columns=words).groupby(owner.to_numpy()).sum()
        n_tokens = pd.Series([len(analyzer(t)) for t in texts]).groupby(owner.to_numpy()).sum()
        return counts.div(n_tokens, axis=0)

    authors = sorted(hist["author_id"].unique())
    groups = sorted(syn["group_id"].unique())
    f_authors = freqs(hist["text"], hist["author_id"]).loc[authors]
    mean, std = f_authors.mean(), f_authors.std(ddof=0)
    z_authors = (f_authors - mean) / std
    z_timelines = (freqs(syn["text"], syn["group_id"]).loc[groups] - mean) / std
    score = (lambda u, v: 1 - cosine(u, v)) if variant == "cosine" else (lambda u, v: -cityblock(u, v) / len(words))
    scores = np.array([[score(z_timelines.loc[g].to_numpy(), z_authors.loc[a].to_numpy()) for a in authors]
                       for g in groups])
    return scores, groups, authors


def test_tokens_are_scikit_learns() -> None:
    """Mixed scripts, digits, underscores, one-letter words, punctuation, null and empty texts: each text's token
    count and its count of every word are scikit-learn's; the one documented difference is a case mapping such as
    İ (Python: i + a combining dot, which ends a word)."""
    texts = [" ".join(WORDS), "ÀÉÎ--ōū_x 3.14 ab\tcd\u00a0ef", "", None, "a b c", "İstanbul", "the the ÜBERALL"]
    analyzer = CountVectorizer(token_pattern=TOKEN_PATTERN).build_analyzer()
    words = sorted({w for text in texts[:-2] + texts[-1:] for w in analyzer(text or "")})
    counts, total, _ = count_listed(pa.array(texts, pa.large_string()), np.arange(len(texts)),
                                    word_keys(words), len(texts))
    for i, text in enumerate(texts):
        if i == 5:
            continue
        expected = pd.Series(analyzer(text or ""), dtype=object).value_counts()
        assert total[i] == len(analyzer(text or ""))
        assert dict(zip(words, counts[i].tolist(), strict=True)) == {w: int(expected.get(w, 0)) for w in words}
    istanbul, _, _ = count_listed(pa.array(["İstanbul"]), np.zeros(1, np.int64), word_keys(["istanbul"]), 1)
    assert istanbul[0, 0] == 1 and analyzer("İstanbul") == ["stanbul"]


@pytest.mark.parametrize(("mfw", "variant"), [(300, "cosine"), (300, "classic"), (8, "cosine"), (8, "classic")])
def test_equals_the_reference_delta(mfw, variant, tmp_path) -> None:
    """Every score to 1e-9 and every rank, with the MFW cut inside a tie (8) and beyond the vocabulary (300); the
    histories read from parquet in small batches (the streaming path) and as a DataFrame."""
    hist, syn = _corpus()
    ref, groups, authors = reference_delta(hist, syn, mfw, variant)
    path = tmp_path / "h.parquet"
    hist.to_parquet(path, row_group_size=17)
    params = DeltaParams(mfw=mfw, variant=variant)
    for source in (str(path), hist):
        profiles = profile_histories(source, params, chunk_rows=7)
        z, got_groups, _, _ = timeline_z(profiles, syn)
        got = pd.DataFrame(delta_scores(z, profiles), index=got_groups, columns=profiles.authors)
        np.testing.assert_allclose(got.loc[groups, authors].to_numpy(), ref, rtol=0, atol=1e-9)
        per = delta_attack(profiles, syn).per_timeline.set_index("group_id").loc[groups]
        true = [authors.index(a) for a in per["author_id"]]
        ref_rank = (ref >= ref[np.arange(len(groups)), true][:, None]).sum(axis=1)
        np.testing.assert_array_equal(per["rank"].to_numpy(), ref_rank)
        assert per["correct"].mean() > 0.5  # the authors really are told apart
    if mfw == 8:  # the cut falls inside a tie (café and слово, 70 each): code-point order decides
        counts = pd.Series(CountVectorizer().build_analyzer()(" ".join(hist["text"]))).value_counts()
        assert counts.iloc[7] == counts.iloc[8] and "café" in profiles.words.to_pylist()
        assert "слово" not in profiles.words.to_pylist()


def test_settings_hold_out_the_rewritten_posts_and_count_them() -> None:
    """disjoint profiles the histories without the timelines' source posts (equal to profiling what is
    left), full with them; a verbatim copy is found in both; the summary carries the shared fields."""
    hist, _ = _corpus()
    released = hist[hist["author_id"].isin(["a00", "a03", "a07"])].groupby("author_id").head(4)
    syn = released.assign(group_id=released["author_id"])
    attack = build_attack("delta", {"mfw": 50})
    full, disjoint = run_attacks(hist, syn, [attack], ["full", "disjoint"])
    held = held_out_doc_ids(syn, "disjoint")
    alone = delta_attack(profile_histories(hist[~hist["doc_id"].isin(held)], DeltaParams(mfw=50)), syn, "disjoint")
    pd.testing.assert_frame_equal(disjoint.per_timeline, alone.per_timeline)
    assert full.summary["n_history_posts"] == len(hist)
    assert disjoint.summary["n_history_posts"] == len(hist) - len(syn)
    for result, adversary in ((full, "full"), (disjoint, "disjoint")):
        s = result.summary
        assert (s["attack"], s["adversary"], s["signature"]) == ("delta", adversary, attack.signature)
        assert s["chance"] == pytest.approx(1 / 12) and s["n_history_users"] == 12 and s["param_mfw"] == 50
        assert s["accuracy_at_1"] == 1.0 and s["n_timelines"] == 3
    assert full.per_timeline["score_true"].gt(disjoint.per_timeline["score_true"]).all()  # the copies were seen


def test_a_timeline_of_an_author_without_history_is_a_miss() -> None:
    hist, syn = _corpus()
    stranger = syn[syn["group_id"] == "t0"].assign(group_id="s", author_id="nobody")
    per = delta_attack(profile_histories(hist), pd.concat([syn, stranger])).per_timeline.set_index("group_id")
    assert not per.loc["s", "in_history"] and not per.loc["s", "correct"] and np.isnan(per.loc["s", "rank"])


@pytest.mark.parametrize(("params", "message"), [
    ({"mfw": 0}, r"mfw must be in \[1, 10000\]; got 0"),
    ({"mfw": 10_001}, r"mfw must be in \[1, 10000\]"),
    ({"mfw": "300"}, r"delta\.mfw: Input should be a valid integer"),
    ({"mfw": True}, r"delta\.mfw: Input should be a valid integer"),
    ({"variant": "manhattan"}, r"delta\.variant: Input should be 'cosine' or 'classic'"),
    ({"words": 5}, r"delta\.words: unknown parameter \(known: mfw, variant\)"),
])
def test_parameters_are_checked(params, message) -> None:
    with pytest.raises(ConfigError, match=message):
        build_attack("delta", params)


def test_signature_names_what_the_numbers_depend_on() -> None:
    default, classic = build_attack("delta").signature, build_attack("delta", {"variant": "classic", "mfw": 100})
    assert "mfw:300" in default and "delta:cosine" in default and "tokens:sklearn-word" in default
    assert "mfw:100" in classic.signature and "delta:classic" in classic.signature


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("delta") / "h.parquet")
    simulate_histories(300, 30_000, seed=3, out_path=path, row_group_rows=10_000, vocab_size=5_000)
    return path


def test_reidentifies_simulated_authors_until_the_rewrite_erases_them(sim) -> None:
    """Far above chance on verbatim posts, in both settings, and falling as the rewrite strength rises."""
    attack = build_attack("delta")
    accuracy = {}
    for strength in (0.0, 0.6, 1.0):
        syn = simulate_synthetic(sim, 30, 600, rewrite_strength=strength, seed=4)
        for result in run_attacks(sim, syn, [attack], ["full", "disjoint"]):
            accuracy[strength, result.summary["adversary"]] = result.summary["accuracy_at_1"]
            chance = result.summary["chance"]
    for adversary in ("full", "disjoint"):
        at = [accuracy[s, adversary] for s in (0.0, 0.6, 1.0)]
        assert at[0] > 50 * chance and at[0] >= at[1] >= at[2] and at[0] > at[2], (adversary, at)


def test_each_attack_profiles_once_per_setting(sim, monkeypatch) -> None:
    """The memo both attacks share: delta and stylometric each profile the histories once per setting,
    however many strategies attack them, without evicting each other's profiles."""
    import tasks.privacy.attacks.delta as delta_module
    import tasks.privacy.attacks.stylometric as stylo_module

    calls = []
    for module in (delta_module, stylo_module):
        real = module.profile_histories
        monkeypatch.setattr(module, "profile_histories",
                            lambda *a, real=real, name=module.__name__, **k: calls.append(name) or real(*a, **k))
    syn = simulate_synthetic(sim, 10, 100, rewrite_strength=0.0, seed=5)
    attacks = [build_attack("delta", {"mfw": 120}), build_attack("stylometric", {"width": 256, "hash_bits": 16})]
    first = run_attacks(sim, syn, attacks, ["full", "disjoint"])
    again = run_attacks(sim, syn, attacks, ["full", "disjoint"])
    assert sorted(calls) == [delta_module.__name__] * 2 + [stylo_module.__name__] * 2
    assert [r.summary["accuracy_at_1"] for r in first] == [r.summary["accuracy_at_1"] for r in again]
