"""Stylometric re-identification: character and word n-gram author profiles, compared by cosine with
each synthetic timeline's profile.

Follows authorship attribution with character n-grams (Keselj et al. 2003, "N-gram-based author
profiles for authorship attribution"; Stamatatos 2009, "A survey of modern authorship attribution
methods"; the stylometric linkage attacks of seed 000 §5.3.2): an author's habits (spelling, casing,
punctuation, favourite words) survive a rewrite that changes the words, and they are in the users'
other posts, which is what a realistic adversary holds (the ``disjoint`` setting).

Definition (the scikit-learn reference :func:`reference_vectorizer`): every history post is a document; its
features are the character n-grams of ``ngram_min..ngram_max`` of its text (lowercased when ``lowercase``;
runs of two or more whitespace characters replaced by one space; no padding) and its word n-grams of
``word_min..word_max`` (scikit-learn's tokens: runs of two or more ``\\w`` characters of any script, joined
by one space; none when ``word_max`` is 0), weighted by sublinear TF ``1 + ln(count)`` times the smooth IDF
of the history posts ``ln((1 + n) / (1 + df)) + 1`` and L2-normalised
(``TfidfVectorizer(analyzer="char", ngram_range, sublinear_tf=True, lowercase)``). n-grams unseen in the
histories are dropped from timelines. The score of (timeline, author) is the cosine of the two profiles;
attribution follows :mod:`tasks.privacy.attribution`. What a profile is depends on the mode:

- ``text`` (sparse, exact): an author's profile is the TF-IDF vector of all its posts as one text (the sum
  of its posts' n-gram counts, no n-gram across two posts, then sublinear TF, IDF and L2); a timeline's
  profile is its posts as one text likewise. One numba pass in author order (:func:`_text_kernel`);
  memory is the vocabulary plus one (author, n-gram, count) triple per distinct n-gram of each author:
  36 MB of simulated history text (200k posts of 2,000 users) took 14.2 s and 1.6 GB peak
  (``benchmarks/reidentify.py``; the sketch: 3.5 s, 0.6 GB), so it is for corpora that fit in memory. This is the profile-based attribution of Keselj et al. (an author's texts concatenated).
- ``exact`` and ``sketch``: an author's profile is the mean of its posts' L2-normalised vectors, a
  timeline's the mean of its posts' vectors.
- ``auto`` (the default): ``text`` when the histories hold at most ``text_max_mb`` MB of text (the text
  column's uncompressed size in the parquet metadata), ``sketch`` above (the article's scale: 1.5 GB).

Why ``text`` below the size: on the 2012 conventions corpus (181 speakers; a run of 5 consecutive
sentences of each speaker as its timeline, the speaker's other sentences as history, disjoint adversary;
10 seeded splits, :func:`tasks.corpus.splits.author_timelines`; ``benchmarks/conventions.py --seeds 0 1 2 3
4 5 6 7 8 9``) the mean of post vectors read accuracy@1 0.187 (``sketch``, the old default: 0.174) and the
``text`` profile 0.419 (scikit-learn word 1-2-gram centroids: 0.219 as means of posts, 0.417 as texts). The
sketch was not the cause (``exact`` and ``sketch`` both read 0.171 on seed 0): averaging unit
vectors of one-sentence posts, whose TF is almost always 1, weighs an n-gram by the share of the author's
posts that hold it, so the frequent n-grams every speaker uses drown the rare ones that tell speakers
apart; sublinear TF of the author's total counts damps them. On simulated posts both read about the same
(200k posts of 2,000 users, 50 timelines, rewrite 0.2 / 0.8: ``full`` 1.00 / 0.98 as text against 1.00 /
1.00 as sketch, ``disjoint`` 0.80 / 0.70 against 0.76 / 0.66).

Computing the mean-of-posts profile:

- ``exact``: n-grams keyed by a 64-bit hash of their code points (the chance of any collision among
  V distinct n-grams is about V^2 / 2^65: ~3e-8 for a million), sparse matrices; for corpora that fit
  in memory. Equal to the scikit-learn reference to float rounding (tested on the debates corpus).
- ``sketch`` (the article's scale, 8.7M posts of 37.9k users): two streaming passes over the histories.
  Pass 1 counts document frequencies in ``2**hash_bits`` buckets (feature hashing of the n-grams);
  pass 2 weights each post exactly as above over those buckets and adds it to its author's count sketch
  of ``width`` signed buckets (Weinberger et al. 2009; Charikar et al. 2002). Inner products of count
  sketches are unbiased with standard deviation about sqrt((1 + cos^2) / width) for unit vectors, so
  cosines move by ~0.02 at width 4096; ranks are kept where the top authors are further apart. Memory:
  4 B x width per author (37.9k authors x 4096: 0.62 GB). The measured error against ``exact`` is
  tested (``tests/test_stylometric.py``) and printed by ``benchmarks/reidentify.py``.

Above ``df_sample`` posts pass 1 counts document frequencies on the posts whose raw text hash is 0 modulo
``ceil(posts / df_sample)`` only (the same posts whichever shard holds them) and scales them up
(:func:`estimated_idf`), so pass 1 costs a fraction of pass 2 at the article's scale. At that sampling
rate (11.5%) the cosines moved by 0.0019 on average and the top-1 author stayed the same for 0.98 of the
timelines (on a 100k-post subsample, printed by ``benchmarks/reidentify.py --full``; tested on a tenth).

Histories are profiled once (:func:`profile_histories`, or :func:`profile_histories_dask` over shards,
which sums per-shard document frequencies and per-shard author sketches) and the profiles are reused by
every strategy's :func:`stylometric_attack`.

The package's modules (callers import each name from the one that holds it): :mod:`.params`
(:class:`StyloParams`), :mod:`.kernels` (the numba n-gram and sketch kernels), :mod:`.features` (normalising,
TF-IDF, the exact and text modes' counts), :mod:`.profiles` (:class:`HistoryProfiles` and the profiling),
:mod:`.scoring` (timeline profiles, cosine, the attack) and :mod:`.evidence` (what protect's moves mask).
"""
