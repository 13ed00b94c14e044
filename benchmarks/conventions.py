"""Every re-identification attack on the 2012 convention speakers, with scikit-learn references.

    .venv/bin/python benchmarks/conventions.py                  # seed 0
    .venv/bin/python benchmarks/conventions.py --seeds 0 1 2 3 4

Split (:func:`tasks.corpus.splits.author_timelines`): per speaker one run of ``--posts`` (5) consecutive
sentences of one speech is a timeline, the speaker's other sentences are the adversary's history; speakers
with fewer than 6 sentences only have history. The released timelines are plain copies (the original
sentences) and the adversary is ``disjoint`` (the timelines' sentences are held out of its histories), so
what an attack finds is the speaker's style and topics, not the sentences. Chance is 1/181.

Rows: the registry's attacks with their default parameters (``stylometric``: ``auto``, which is ``text`` mode
at this size; the same attack in ``exact`` and ``sketch`` mode, the mean of post vectors: the definition
before the text mode existed, ``sketch`` being the old default; ``classifier``: exact mode, C tuned; ``delta``;
``minhash``), and references built with scikit-learn alone on the same split: TF-IDF (sublinear, fitted on
the history sentences) word 1-2-gram and char 2-4-gram author centroids, each as the mean of the speaker's
sentence vectors and as the speaker's sentences joined into one text (timelines likewise), cosine; and a
``LinearSVC`` over char_wb 1-4-grams (scikit-learn's defaults otherwise, timeline joined). ``--svc-forms C ...``
adds the classifier's SVM at each C with a timeline scored as its sentences joined and as the mean of their
rows (how the classifier's timeline form was chosen). Each row: accuracy@1
with its 95% Wilson interval, MRR, seconds (fit and attack, one process, numba kernels compiled before
timing). With several seeds the mean over the seeds is printed after the per-seed tables. The last line is
``RESULT key=value ...`` with the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import record
from tasks.corpus.splits import author_timelines
from tasks.intervals import wilson
from tasks.privacy.attacks import build_attack, run_attacks


def _centroids(hist: pd.DataFrame, syn: pd.DataFrame, make: Callable, joined: bool) -> tuple[np.ndarray, np.ndarray]:
    """(timelines x speakers cosine, speaker ids) of a TfidfVectorizer fitted on the history sentences."""
    from sklearn.preprocessing import normalize

    vec = make().fit(hist["text"])
    if joined:
        authors = hist.groupby("author_id", sort=True)["text"].apply(" ".join)
        timelines = syn.groupby("group_id", sort=False)["text"].apply(" ".join)
        a, t = normalize(vec.transform(authors)), normalize(vec.transform(timelines))
        return (t @ a.T).toarray(), authors.index.to_numpy(object)
    codes, names = pd.factorize(hist["author_id"], sort=True)
    g = sp.csr_matrix((np.ones(len(codes)), (codes, np.arange(len(codes)))))
    tc, _ = pd.factorize(syn["group_id"], sort=False)
    tg = sp.csr_matrix((np.ones(len(tc)), (tc, np.arange(len(tc)))))
    a, t = normalize(g @ vec.transform(hist["text"])), normalize(tg @ vec.transform(syn["text"]))
    return (t @ a.T).toarray(), np.asarray(names, object)


def _svc(hist: pd.DataFrame, syn: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.svm import LinearSVC

    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True)
    model = LinearSVC(random_state=0).fit(vec.fit_transform(hist["text"]), hist["author_id"].to_numpy(object))
    timelines = syn.groupby("group_id", sort=False)["text"].apply(" ".join)
    return model.decision_function(vec.transform(timelines)), np.asarray(model.classes_, object)


def _svc_forms(hist: pd.DataFrame, syn: pd.DataFrame, c: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The classifier's exact model at one C (LinearSVC on its features: the stylometric n-gram keys, sublinear
    TF-IDF of the history sentences) and a timeline scored two ways: its sentences joined into one text
    (summed counts), or the mean of its sentences' rows."""
    import pyarrow as pa

    from tasks.privacy.classifier.exact import decision, linear_svc
    from tasks.privacy.classifier.params import ClassifierParams
    from tasks.privacy.stylometric.features import (
        _exact_counts,
        _smooth_idf,
        _sublinear_rows,
        normalize_texts,
    )

    params = ClassifierParams(c_grid=(), c=c)

    def texts(values: pd.Series) -> pa.Array:
        return normalize_texts(pa.array(values.tolist(), pa.large_string()), params.lowercase)

    counts, vocab = _exact_counts(texts(hist["text"]), params.stylo, None)
    idf = _smooth_idf(np.bincount(counts.indices, minlength=len(vocab)), counts.shape[0])
    model = linear_svc(_sublinear_rows(counts, idf), hist["author_id"].to_numpy(object), c, params)
    tc, groups = pd.factorize(syn["group_id"], sort=False)
    g = sp.csr_matrix((np.ones(len(tc)), (tc, np.arange(len(tc)))), shape=(len(groups), len(tc)))
    posts = _exact_counts(texts(syn["text"]), params.stylo, vocab)[0]
    joined = _sublinear_rows((g @ posts).tocsr(), idf)
    mean = sp.diags(1.0 / np.bincount(tc)) @ g @ _sublinear_rows(posts, idf)
    classes = np.asarray(model.classes_, object)
    return {f"LinearSVC C={c:g} (classifier features), timeline joined": (decision(model, joined), classes),
            f"LinearSVC C={c:g} (classifier features), mean of posts": (decision(model, mean), classes)}


def _scored(scores: np.ndarray, authors: np.ndarray, syn: pd.DataFrame) -> dict:
    true = syn.groupby("group_id", sort=False)["author_id"].first().to_numpy(object)
    col = pd.Index(authors).get_indexer(true)
    rank = np.where(col >= 0, (scores >= scores[np.arange(len(col)), np.maximum(col, 0)][:, None]).sum(axis=1),
                    np.inf)
    hits = int((rank == 1).sum())
    low, high = wilson(hits, len(rank))
    return {"accuracy_at_1": hits / len(rank), "accuracy_at_1_ci_low": low, "accuracy_at_1_ci_high": high,
            "mrr": float(np.mean(1.0 / rank)), "n_timelines": len(rank)}


def evaluate(corpus: pd.DataFrame, seed: int, posts: int, svc_forms: list[float]) -> pd.DataFrame:
    from sklearn.feature_extraction.text import TfidfVectorizer

    timelines, hist = author_timelines(corpus, n_posts=posts, seed=seed)
    syn = timelines[["doc_id", "author_id", "group_id", "text"]]
    histories = corpus[["doc_id", "author_id", "text"]]
    hist = hist[hist["author_id"].notna()]
    rows = []
    attacks = {"stylometric (auto: text)": ("stylometric", {}),
               "stylometric exact (mean of posts)": ("stylometric", {"mode": "exact"}),
               "stylometric sketch (mean of posts, old default)": ("stylometric", {"mode": "sketch"}),
               "classifier (exact, C tuned)": ("classifier", {}), "delta": ("delta", {}), "minhash": ("minhash", {})}
    for label, (name, params) in attacks.items():
        t0 = time.perf_counter()
        [result] = run_attacks(histories, syn, [build_attack(name, params)], ["disjoint"])
        s = result.summary
        rows.append({"attack": label, **{k: s[k] for k in ("accuracy_at_1", "accuracy_at_1_ci_low",
                                                         "accuracy_at_1_ci_high", "mrr", "n_timelines")},
                     "seconds": time.perf_counter() - t0, "note": f"C={s['c_used']:g}" if "c_used" in s else ""})
    word = lambda: TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)  # noqa: E731
    char = lambda: TfidfVectorizer(analyzer="char", ngram_range=(2, 4), sublinear_tf=True)  # noqa: E731
    references = {
        "sklearn word 1-2 centroid (mean of posts)": lambda: _centroids(hist, syn, word, False),
        "sklearn word 1-2 centroid (texts joined)": lambda: _centroids(hist, syn, word, True),
        "sklearn char 2-4 centroid (mean of posts)": lambda: _centroids(hist, syn, char, False),
        "sklearn char 2-4 centroid (texts joined)": lambda: _centroids(hist, syn, char, True),
        "sklearn LinearSVC char_wb 1-4": lambda: _svc(hist, syn),
    }
    for label, run in references.items():
        t0 = time.perf_counter()
        scores, authors = run()
        rows.append({"attack": label, **_scored(scores, authors, syn), "seconds": time.perf_counter() - t0,
                     "note": ""})
    for c in svc_forms:
        t0 = time.perf_counter()
        forms = _svc_forms(hist, syn, c)
        seconds = time.perf_counter() - t0
        rows += [{"attack": label, **_scored(scores, authors, syn), "seconds": seconds, "note": "one fit, two forms"}
                 for label, (scores, authors) in forms.items()]
    return pd.DataFrame(rows).assign(seed=seed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--posts", type=int, default=5, help="sentences per timeline")
    ap.add_argument("--svc-forms", type=float, nargs="*", default=[], metavar="C",
                    help="also score the classifier's SVM at each C with a timeline joined and as the mean of its posts")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = Path(args.data_dir) / "conventions.parquet"
    if not path.exists():
        sys.exit(f"{path} missing: run `synthugc datasets fetch conventions`")
    corpus = pd.read_parquet(path).astype({"text": object, "author_id": object, "doc_id": object})
    warm = corpus[corpus["author_id"].isin(sorted(corpus["author_id"].dropna().unique())[:5])]
    warm_tl, _ = author_timelines(warm, n_posts=args.posts)  # compile the numba kernels, untimed
    for name, params in (("stylometric", {}), ("stylometric", {"mode": "exact"}), ("stylometric", {"mode": "sketch"}),
                         ("classifier", {"c_grid": []}), ("delta", {}), ("minhash", {})):
        run_attacks(warm[["doc_id", "author_id", "text"]], warm_tl, [build_attack(name, params)], ["disjoint"])
    load = os.getloadavg()
    tables = []
    for seed in args.seeds:
        table = evaluate(corpus, seed, args.posts, args.svc_forms)
        tables.append(table)
        print(f"\nseed {seed}: {table['n_timelines'].iloc[0]} timelines of {args.posts} sentences, "
              f"{corpus['author_id'].nunique()} speakers (chance {1 / corpus['author_id'].nunique():.4f}), disjoint")
        print(table.to_string(index=False, columns=["attack", "accuracy_at_1", "accuracy_at_1_ci_low",
                                                     "accuracy_at_1_ci_high", "mrr", "seconds", "note"],
                              float_format=lambda x: f"{x:.3f}"))
    both = pd.concat(tables)
    mean = both.groupby("attack", sort=False)[["accuracy_at_1", "mrr", "seconds"]].mean()
    if len(args.seeds) > 1:
        print(f"\nmean over seeds {args.seeds}:")
        print(mean.to_string(float_format=lambda x: f"{x:.3f}"))
    after = os.getloadavg()
    print(f"load average (1/5/15 min) before {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}, after "
          f"{after[0]:.1f}/{after[1]:.1f}/{after[2]:.1f} on {os.cpu_count()} cores")
    keys = {"stylometric (auto: text)": "stylometric", "stylometric exact (mean of posts)": "stylometric_exact",
            "stylometric sketch (mean of posts, old default)": "stylometric_sketch",
            "classifier (exact, C tuned)": "classifier", "delta": "delta", "minhash": "minhash",
            "sklearn word 1-2 centroid (mean of posts)": "word_mean", "sklearn word 1-2 centroid (texts joined)":
            "word_text", "sklearn char 2-4 centroid (mean of posts)": "char_mean",
            "sklearn char 2-4 centroid (texts joined)": "char_text", "sklearn LinearSVC char_wb 1-4": "svc_charwb"}
    for c in args.svc_forms:
        keys[f"LinearSVC C={c:g} (classifier features), timeline joined"] = f"svc_c{c:g}_joined"
        keys[f"LinearSVC C={c:g} (classifier features), mean of posts"] = f"svc_c{c:g}_mean"
    record("conventions", "seeds=" + ",".join(map(str, args.seeds)) + " "
          + " ".join(f"{keys[a]}_acc={row['accuracy_at_1']:.3f}" for a, row in mean.iterrows())
          + " " + " ".join(f"{keys[a]}_s={row['seconds']:.1f}" for a, row in mean.iterrows())
          + f" load1={after[0]:.1f} load5={after[1]:.1f}")


if __name__ == "__main__":
    main()
