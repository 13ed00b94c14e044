"""The shared embedding cache with the real MiniLM encoder."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.models.embeddings import EmbeddingCache, sentence_embeddings, token_embeddings
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


def test_cache_is_picklable(tmp_path) -> None:
    import pickle

    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    cache.put_many("m", [("sha", np.ones((2, 3), dtype=np.float32))])
    clone = pickle.loads(pickle.dumps(cache))
    np.testing.assert_array_equal(clone.get_many("m", ["sha"])["sha"], np.ones((2, 3)))
