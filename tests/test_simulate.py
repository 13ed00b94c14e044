"""Simulated histories and synthetic timelines: sizes, determinism, habits, rewrite strength."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tasks.corpus.simulate import simulate_histories, simulate_synthetic


def test_histories_shape_and_determinism(tmp_path: Path) -> None:
    a = simulate_histories(200, 10_000, mean_chars=150, seed=5, out_path=tmp_path / "a.parquet", row_group_rows=3_000,
                           vocab_size=3_000)
    b = simulate_histories(200, 10_000, mean_chars=150, seed=5, out_path=tmp_path / "b.parquet", row_group_rows=3_000,
                           vocab_size=3_000)
    pf = pq.ParquetFile(a)
    assert pf.metadata.num_rows == 10_000 and pf.metadata.num_row_groups == 4
    df = pd.read_parquet(a)
    assert list(df.columns) == ["author_id", "doc_id", "text"] and df["doc_id"].is_unique
    counts = df["author_id"].value_counts()
    assert len(counts) == 200 and counts.min() >= 1 and counts.max() > 5 * counts.median()  # heavy tail
    assert 100 < df["text"].str.len().mean() < 200 and (df["text"].str.len() > 0).all()
    pd.testing.assert_frame_equal(df, pd.read_parquet(b))
    assert not df.equals(pd.read_parquet(simulate_histories(200, 10_000, seed=6, out_path=tmp_path / "c.parquet",
                                                                         vocab_size=3_000)))


def test_synthetic_timelines(tmp_path: Path) -> None:
    path = simulate_histories(100, 8_000, seed=1, out_path=tmp_path / "h.parquet", vocab_size=3_000)
    hist = pd.read_parquet(path)
    verbatim = simulate_synthetic(path, n_timelines=10, n_posts=205, rewrite_strength=0.0, seed=2)
    assert list(verbatim.columns) == ["doc_id", "group_id", "author_id", "text"] and len(verbatim) == 205
    assert verbatim["group_id"].nunique() == 10 and (verbatim.groupby("group_id")["author_id"].nunique() == 1).all()
    assert verbatim.groupby("group_id").size().isin([20, 21]).all()
    own = set(zip(hist["author_id"], hist["text"], strict=True))
    assert all((a, t) in own for a, t in zip(verbatim["author_id"], verbatim["text"], strict=True))  # kept in history
    strong = simulate_synthetic(hist, n_timelines=10, n_posts=205, rewrite_strength=1.0, seed=2)
    assert (strong["text"] != verbatim["text"]).mean() > 0.95
    with pytest.raises(ValueError):
        simulate_synthetic(path, rewrite_strength=1.5)


def test_rewrite_strengths_share_their_source_posts(tmp_path: Path) -> None:
    path = simulate_histories(60, 3_000, seed=1, out_path=tmp_path / "h.parquet", vocab_size=2_000)
    weak = simulate_synthetic(path, n_timelines=6, n_posts=60, rewrite_strength=0.1, seed=2)
    strong = simulate_synthetic(path, n_timelines=6, n_posts=60, rewrite_strength=0.9, seed=2)
    hist = pd.read_parquet(path).set_index("doc_id")
    assert list(weak["doc_id"]) == list(strong["doc_id"]) and set(weak["doc_id"]) <= set(hist.index)
    assert (weak["author_id"].to_numpy() == hist.loc[weak["doc_id"], "author_id"].to_numpy()).all()


def test_the_lexicon_draws_as_rng_choice_did() -> None:
    """The lexicon's draws are those of ``rng.choice`` over the syllable counts (the words of every simulated corpus
    and the generator's state after them stay what they were)."""
    from tasks.corpus.simulate import _SYLLABLES, _lexicon

    def by_choice(rng: np.random.Generator, size: int) -> list[str]:
        words: set[str] = set()
        while len(words) < size:
            k = int(rng.choice([1, 2, 2, 3, 3, 4]))
            words.add("".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), k)))
        out = sorted(words)
        rng.shuffle(out)
        return out

    for seed in (0, 5):
        ours, reference = np.random.default_rng(seed), np.random.default_rng(seed)
        assert _lexicon(ours, 3_000) == by_choice(reference, 3_000)
        assert ours.integers(0, 1 << 62, 4).tolist() == reference.integers(0, 1 << 62, 4).tolist()
