"""The classifier re-identification attack: a discriminative linear model over the character and word
n-grams of the history posts, the standard strong authorship-attribution baseline (Stamatatos 2009, "A
survey of modern authorship attribution methods"; one-vs-rest linear SVMs over character n-grams are the
baseline that most shared tasks report against).

Features (as the stylometric attack's: :func:`tasks.privacy.stylometric.features.reference_vectorizer` of the
same n-gram settings): character ``ngram_min..ngram_max``-grams and word ``word_min..word_max``-grams of each
history post, sublinear TF ``1 + ln(count)`` times the smooth IDF of the history posts, L2-normalised.
Each history post is a training example labelled by its author (the held-out documents removed in the
``disjoint`` setting). A timeline is scored as its posts joined into one text (the sum of its posts' n-gram
counts, no n-gram across two posts; sublinear TF, IDF, L2): on the 2012 conventions speakers (disjoint,
seeded splits 0-2 of :func:`tasks.corpus.splits.author_timelines`) that read accuracy@1 0.383 against 0.357
for the mean of its posts' rows at C = 1, and 0.394 against 0.374 at C = 3 (``benchmarks/conventions.py
--seeds 0 1 2 --svc-forms 1 3``). A timeline's score for an author is the model's decision value for that
author.

Two ways to compute it, chosen by the size of the histories (``mode="auto"``):

- ``exact`` (history posts x authors at most ``exact_max_pairs``: the one-vs-rest problems' size, which is
  what a fit costs): scikit-learn's ``LinearSVC`` (L2 penalty, squared hinge, one-vs-rest, ``tol``,
  ``max_iter``, ``random_state=seed``) on the exact features (64-bit n-gram keys, sparse). C is tuned over
  ``c_grid`` on a validation split of the history posts (``validation_share`` of each author's posts,
  picked by a seeded hash of their text and position; authors with one post keep it): each author's
  validation posts are joined into one text like a timeline, C is the grid value with the most authors
  found (then the highest mean reciprocal rank, then the smallest C), and the model is refitted on every
  post with it. An empty ``c_grid`` fits with ``c``. Its predictions equal scikit-learn's own pipeline
  (``TfidfVectorizer`` + ``LinearSVC`` with the same C): ``tests/test_classifier_attack.py``.
- ``two_stage`` (the article's scale: 8.7M posts of 37.9k authors): stage 1 is the stylometric attack with
  its default parameters (:class:`tasks.privacy.stylometric.params.StyloParams`, the profiles the registry's
  ``stylometric`` attack keeps per process, so a run with both attacks profiles the histories once); each
  timeline's ``top_k`` authors by its cosine are its candidates. Stage 2 re-ranks them: one streaming pass
  reads the first ``posts_per_author`` posts (file order) of every candidate (and of the next ranks, up to
  ``READ_AHEAD`` x ``top_k``, so that a later attack on the same timelines rewritten, a protect round, reads
  nothing; candidates read before are not read again), and per timeline a
  one-vs-rest L2-loss linear SVM (the dual coordinate descent of liblinear, Hsieh et al. 2008, written in
  numba: :func:`_rerank_all`; the same optimisation problem as ``LinearSVC``, equal to it within its
  tolerance, tested) is trained among its candidates on their posts, over the n-grams hashed into
  ``2**hash_bits`` buckets (the stylometric kernels' 64-bit keys; the IDF stage 1's sketch estimated, or,
  where stage 1 did not profile in sketch mode over the same buckets, estimated from ``df_sample`` posts as
  the stylometric sketch does) with C = ``c`` and tolerance ``rerank_tol``. A timeline's candidates score
  their decision value minus the lowest candidate's (>= 0), every other author its stage-1 cosine minus 3
  (< 0): authors not re-ranked keep lower ranks, so a true author outside the top-K is a miss at rank 1
  and keeps its stage-1 order below the candidates for accuracy@10 and MRR.

At the article's scale (``benchmarks/reidentify.py --full``; its seconds and memory are ``reidentify`` in
docs/performance.md) two stages add a fraction of the stylometric profiles' time they share;
accuracy@1 against the stylometric attack's: ``full`` 0.982 / 0.946 (1.000 / 0.944) at rewrite 0.2 / 0.8,
``disjoint`` 0.846 / 0.686 (0.832 / 0.640). 50 posts per candidate read better and twice as fast as 100
(0.686 against 0.668, disjoint 0.8), and tolerance 0.3 reads as 0.1 in 25% less time. On the conventions
speakers (10 splits) exact mode reads 0.382, below the stylometric text profiles' 0.419: with ~44 one-sentence
posts per speaker the centroid of all of a speaker's text is the stronger model.

The package's modules (callers import each name from the one that holds it): :mod:`.params`
(:class:`ClassifierParams`), :mod:`.exact` (the exact mode's model, scores and evidence), :mod:`.exact_cache`
(fitted exact models kept in a cache folder), :mod:`.rerank` (the numba re-ranker), :mod:`.two_stage` (the
two-stage side and scores) and :mod:`.attack` (the side by mode and the attribution).
"""
