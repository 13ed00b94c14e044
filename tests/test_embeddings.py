"""The shared embedding cache with the real MiniLM encoder."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.models.embeddings import (
    ACCELERATOR_TOKEN_BUDGET,
    CPU_TOKEN_BUDGET,
    EmbeddingCache,
    embed_once,
    inference_batches,
    sentence_embeddings,
    sentence_key,
    text_sha,
    token_budget,
    token_embeddings,
    token_key,
)
from tasks.models.registry import resolve_model

TEXTS = ["hello world", "the cat sat on the mat", "hello world", "  a much longer sentence, with punctuation!  "]


@pytest.fixture(scope="module")
def spec():
    return resolve_model("token_encoder")


def test_sentence_embeddings_reuse_cache(tmp_path) -> None:
    st_spec = resolve_model("sentence_encoder")
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    first = sentence_embeddings(TEXTS, st_spec, cache=cache)
    assert first.shape == (4, 384) and first.dtype == np.float32
    assert np.allclose(first[0], first[2])
    assert (cache.hits, cache.misses) == (0, 3)  # the duplicate is computed once
    second = sentence_embeddings(TEXTS, st_spec, cache=cache)
    assert (cache.hits, cache.misses) == (3, 3)
    np.testing.assert_array_equal(first, second)


def test_sentence_embeddings_are_sentence_transformers_own(spec) -> None:
    """Our token-budget batches over the SentenceTransformer's own ids and modules give its ``encode``'s vectors,
    for a text past its length limit and the empty text too."""
    from sentence_transformers import SentenceTransformer

    st_spec = resolve_model("sentence_encoder")
    texts = [*TEXTS, LONG, "", *[f"sentence number {i} of a batch that spans several forward passes" for i in range(70)]]
    reference = SentenceTransformer(st_spec.path, device="cpu").encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(sentence_embeddings(texts, st_spec), reference, atol=1e-5)


def test_token_embeddings_cache_survives_reopen(tmp_path, spec) -> None:
    path = tmp_path / "emb.sqlite"
    cache = EmbeddingCache(path)
    first = token_embeddings(TEXTS, spec, layer=6, cache=cache)
    assert [m.shape for m in first][:2] == [(4, 384), (8, 384)]  # [CLS] ... [SEP]
    assert cache.misses == 3 and len(cache) == 3
    cache.close()
    reopened = EmbeddingCache(path)
    again = token_embeddings(TEXTS, spec, layer=6, cache=reopened)
    assert (reopened.hits, reopened.misses) == (3, 0)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_layer_is_part_of_the_key(tmp_path, spec) -> None:
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    six = token_embeddings(TEXTS[:2], spec, layer=6, cache=cache)
    three = token_embeddings(TEXTS[:2], spec, layer=3, cache=cache)
    assert cache.hits == 0 and cache.misses == 4 and len(cache) == 4
    assert not np.allclose(six[0], three[0])


def test_token_embeddings_match_hidden_states_unbatched(spec) -> None:
    import torch

    from tasks.models.loaders import load_token_encoder

    tokenizer, model = load_token_encoder(spec)
    text = TEXTS[3]
    ids = tokenizer.encode(text.strip(), add_special_tokens=True, max_length=tokenizer.model_max_length,
                           truncation=True)
    with torch.no_grad():
        want = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[4][0].numpy()
    got = token_embeddings(TEXTS, spec, layer=4, batch_size=2)[3]
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_batch_budget_does_not_change_the_matrices(spec) -> None:
    """The device's small CPU budget (many small batches) gives the matrices of one big batch and of one
    text per batch."""
    texts = [*TEXTS, LONG, "short", "a sentence of middling length for the batcher"]
    one_batch = token_embeddings(texts, spec, layer=6, budget=10**6)
    small = token_embeddings(texts, spec, layer=6, budget=CPU_TOKEN_BUDGET)
    alone = token_embeddings(texts, spec, layer=6, budget=1)
    for a, b, c in zip(one_batch, small, alone, strict=True):
        assert a.shape == b.shape == c.shape
        np.testing.assert_allclose(b, a, atol=1e-5)
        np.testing.assert_allclose(c, a, atol=1e-5)


def test_token_budget_follows_the_model_device() -> None:
    import torch

    assert token_budget(torch.nn.Linear(2, 2)) == CPU_TOKEN_BUDGET
    assert token_budget(torch.nn.Linear(2, 2, device="meta")) == ACCELERATOR_TOKEN_BUDGET


def test_cache_is_picklable(tmp_path) -> None:
    import pickle

    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    cache.put_many("m", [("sha", np.ones((2, 3), dtype=np.float32))])
    clone = pickle.loads(pickle.dumps(cache))
    np.testing.assert_array_equal(clone.get_many("m", ["sha"])["sha"], np.ones((2, 3)))


# A text past the SentenceTransformer's 256-token limit (BERTScore keeps up to 512 tokens of it).
LONG = " ".join(f"word{i % 50} and" for i in range(200))


def test_inference_batches_cover_every_text_longest_first_within_the_budget() -> None:
    lengths = [5, 40, 3, 300, 40, 12, 7, 7, 90]
    batches = inference_batches(lengths, budget=100, max_rows=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)
    for batch in batches:
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * lengths[batch[0]] <= 100  # 300 alone: over budget by itself
    assert [len(b) for b in batches][:2] == [1, 1]  # 300 alone, then 90 alone (2 x 90 > 100)


def test_one_forward_pass_serves_token_and_sentence_roles(tmp_path, spec) -> None:
    """embed_once runs each distinct text through the model once (plus the long text's truncated sentence
    pass) and gives what the separate passes give: sentence-transformers' vectors within 1e-5 and the
    token matrices of every layer within 1e-5."""
    from sentence_transformers import SentenceTransformer

    from tasks.models.loaders import load_token_encoder

    st_spec = resolve_model("sentence_encoder")
    texts = [*TEXTS, LONG, ""]
    _, model = load_token_encoder(spec)
    rows: list[int] = []  # texts per forward call of the token model

    def count(_module: object, args: tuple, kwargs: dict, _out: object) -> None:
        rows.append(int((args[0] if args else kwargs["input_ids"]).shape[0]))

    hook = model.register_forward_hook(count, with_kwargs=True)
    try:
        cache = EmbeddingCache(tmp_path / "emb.sqlite")
        shared = embed_once(texts, token_spec=spec, layers=[6, 3], sentence_spec=st_spec, cache=cache)
    finally:
        hook.remove()
    distinct = len(set(texts))
    assert shared == distinct and sum(rows) == distinct  # one row per distinct text through the token model
    assert embed_once(texts, token_spec=spec, layers=[6, 3], sentence_spec=st_spec, cache=cache) == 0

    reference = SentenceTransformer(st_spec.path, device="cpu").encode(texts, convert_to_numpy=True)
    got = sentence_embeddings(texts, st_spec, cache=cache)
    np.testing.assert_allclose(got, reference, atol=1e-5)
    for layer in (6, 3):
        separate = token_embeddings(texts, spec, layer)  # no cache: its own pass
        for a, b in zip(token_embeddings(texts, spec, layer, cache=cache), separate, strict=True):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, atol=1e-5)
    shas = [text_sha(t) for t in set(texts)]
    assert cache.present(sentence_key(st_spec), shas) == set(shas)
    assert cache.present(token_key(spec, 3), shas) == set(shas)


@pytest.fixture
def two_torch_threads():
    """Two torch threads (the suite runs with one: OMP_NUM_THREADS=1 in conftest), so yielding one shows."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_shared_pass_yields_a_core_while_asked_and_restores_torch_threads(tmp_path, spec, two_torch_threads) -> None:
    """While yield_core() is true the shared pass runs on one torch thread fewer (a thread starting meanwhile
    gets them all); afterwards torch has its threads back, and the vectors are those of a pass that did not
    yield."""
    import threading

    import torch

    st_spec = resolve_model("sentence_encoder")
    texts = [*TEXTS, LONG, "short", "a sentence of middling length for the batcher"]
    threads = torch.get_num_threads()
    assert threads == 2
    seen: list[int] = []  # torch's thread count each time the pass asks, i.e. before each batch

    started: list[int] = []  # what a thread that starts using torch while the pass yields gets

    def yield_core() -> bool:
        seen.append(torch.get_num_threads())
        if len(seen) == 2:
            other = threading.Thread(target=lambda: started.append(torch.get_num_threads()))
            other.start()
            other.join()
        return len(seen) < 3  # yields for the first two batches, then takes every core back

    yielded = EmbeddingCache(tmp_path / "yielded.sqlite")
    embed_once(texts, token_spec=spec, layers=[6], sentence_spec=st_spec, cache=yielded, budget=1,
               yield_core=yield_core)
    assert len(seen) == len(set(texts)) + 1  # budget 1: one text per batch; + LONG's truncated sentence pass
    assert seen[1:3] == [max(1, threads - 1)] * 2 and seen[3] == threads
    assert torch.get_num_threads() == threads and started == [threads]
    plain = EmbeddingCache(tmp_path / "plain.sqlite")
    embed_once(texts, token_spec=spec, layers=[6], sentence_spec=st_spec, cache=plain)
    np.testing.assert_allclose(sentence_embeddings(texts, st_spec, cache=yielded),
                               sentence_embeddings(texts, st_spec, cache=plain), atol=1e-5)
    for a, b in zip(token_embeddings(texts, spec, 6, cache=yielded), token_embeddings(texts, spec, 6, cache=plain),
                    strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_different_models_fall_back_to_one_pass_per_role(tmp_path, spec, two_torch_threads) -> None:
    from dataclasses import replace

    import torch

    other = replace(resolve_model("sentence_encoder"), path=spec.path + "/")  # another folder string: not shared
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    threads, seen = torch.get_num_threads(), []

    def yield_core() -> bool:  # each pass of its own also leaves the core while asked
        seen.append(torch.get_num_threads())
        return True

    assert embed_once(TEXTS, token_spec=spec, layers=[6], sentence_spec=other, cache=cache, budget=1,
                      yield_core=yield_core) == 0
    assert len(cache) == 2 * len(set(TEXTS))
    # token pass: one check per text (budget 1), then the sentence pass: one per chunk; each pass starts
    # with all threads and yields from its second check on
    assert seen == [threads, *[max(1, threads - 1)] * (len(set(TEXTS)) - 1), threads]
    assert torch.get_num_threads() == threads


def _count_minilm_rows(spec) -> tuple[list[int], list]:
    """Rows through MiniLM's weights, and the hooks to remove: counted on the token model, on the
    SentenceTransformer's model (which our batches call) and on its Transformer module (whose ``encode`` calls the
    model's ``forward`` directly, past any hook on the model)."""
    from tasks.models.loaders import load_sentence_encoder, load_token_encoder

    rows: list[int] = []

    def count(_module: object, args: tuple, kwargs: dict, _out: object) -> None:
        given = args[0] if args else kwargs.get("features", kwargs)
        rows.append(int(given.shape[0] if hasattr(given, "shape") else given["input_ids"].shape[0]))

    transformer = load_sentence_encoder(resolve_model("sentence_encoder"))[0]
    modules = [load_token_encoder(spec)[1], transformer.auto_model, transformer]
    return rows, [m.register_forward_hook(count, with_kwargs=True) for m in modules]


def test_metric_suite_runs_each_text_through_minilm_once(tmp_path, spec) -> None:
    """BERTScore, FBD, CPS, FBD-SBERT, FCSD and Pair-SBERT in one suite call: every distinct text goes through
    the MiniLM weights once (the token encoder's model and the SentenceTransformer's copy together)."""
    import pandas as pd

    from tasks.metrics.suite import MetricOptions, score_strategy

    sources = ["We will bring jobs back.", "Taxes go down for the middle class.", "Thank you all.",
               "The record shows it is not true."]
    outputs = ["We will bring work back.", sources[1], "Thanks, all.", "The record shows it is false."]
    corpus = pd.DataFrame({"doc_id": ["a", "b", "c", "d"], "text": sources, "group_id": ["g", "g", "h", "h"]})
    synthetic = pd.DataFrame({"doc_id": corpus["doc_id"], "strategy": "toy", "variant": "v", "text": outputs,
                              "group_id": corpus["group_id"], "status": "ok"})
    st_spec = resolve_model("sentence_encoder")
    rows, hooks = _count_minilm_rows(spec)
    try:
        result = score_strategy(corpus, synthetic, ["bertscore_f1", "fbd", "cps", "fbd_sbert", "fcsd", "pair_sbert"],
                                MetricOptions(token_encoder=spec, sentence_encoder=st_spec), tmp_path / "emb.sqlite")
    finally:
        for hook in hooks:
            hook.remove()
    assert sum(rows) == len(set(sources + outputs))
    scores = result.sample_scores.set_index("doc_id")
    assert scores.loc["b", "bertscore_f1"] == pytest.approx(1.0, abs=1e-5)  # unchanged text
    assert scores.loc["b", "cps"] == pytest.approx(1.0, abs=1e-5)


def _sentences_beside_a_shared_pass(tmp_path, spec, sentence_texts, shared_texts, fail: bool):
    """Start ``sentence_embeddings(sentence_texts)`` in another thread once ``embed_once(shared_texts)`` holds its
    texts (at its first batch); the shared pass raises there when ``fail``. (vectors, rows through MiniLM)."""
    import threading

    st_spec = resolve_model("sentence_encoder")
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    got: dict[str, np.ndarray] = {}
    other = threading.Thread(target=lambda: got.update(vectors=sentence_embeddings(sentence_texts, st_spec,
                                                                                   cache=cache)))

    def first_batch() -> bool:
        if not other.is_alive() and not got:
            other.start()
            if fail:
                raise RuntimeError("the shared pass fails")
        return False

    rows, hooks = _count_minilm_rows(spec)
    try:
        try:
            embed_once(shared_texts, token_spec=spec, layers=[6], sentence_spec=st_spec, cache=cache, budget=64,
                       yield_core=first_batch)
        except RuntimeError:
            assert fail
        other.join(timeout=120)
    finally:
        for hook in hooks:
            hook.remove()
    assert not other.is_alive()
    return got["vectors"], rows


def test_a_sentence_encoder_beside_the_shared_pass_waits_for_its_texts(tmp_path, spec) -> None:
    """The embedding attack's sentence vectors and a metric stage's shared pass run side by side on overlapping
    texts: each distinct text goes through MiniLM once, and the waiting encoder gets sentence-transformers' own
    vectors for every text, its own and those the shared pass computed."""
    from sentence_transformers import SentenceTransformer

    shared = [*TEXTS, "a second sentence for the pass", "and a third one, a little longer than that"]
    own = ["only the attack reads this post", "nor this one"]
    sentence_texts = [shared[1], own[0], shared[4], own[1], shared[0]]
    vectors, rows = _sentences_beside_a_shared_pass(tmp_path, spec, sentence_texts, shared, fail=False)
    assert sum(rows) == len(set(shared)) + len(own)
    reference = SentenceTransformer(resolve_model("sentence_encoder").path, device="cpu").encode(sentence_texts)
    np.testing.assert_allclose(vectors, reference, atol=1e-5)


def test_a_waiting_sentence_encoder_computes_what_a_failed_shared_pass_left(tmp_path, spec) -> None:
    from sentence_transformers import SentenceTransformer

    shared = [*TEXTS, "a second sentence for the pass"]
    sentence_texts = [shared[1], "only the attack reads this post", shared[4]]
    vectors, rows = _sentences_beside_a_shared_pass(tmp_path, spec, sentence_texts, shared, fail=True)
    assert sum(rows) == len(set(sentence_texts))  # the shared pass failed before its first forward
    reference = SentenceTransformer(resolve_model("sentence_encoder").path, device="cpu").encode(sentence_texts)
    np.testing.assert_allclose(vectors, reference, atol=1e-5)
