"""Multi-variant strategies and meta columns (base), the LLM strategy (parsing, requests, one real SmolLM2
run) and the paraphrase strategy's offline default (the instruct LLM)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pandas as pd
import pytest
from pydantic import BaseModel, ConfigDict

from tasks.corpus.schema import STATUS_FAILED, STATUS_OK, SYNTHETIC_COLUMNS
from tasks.errors import ConfigError
from tasks.generate import build_strategy, generate_synthetic
from tasks.generate.base import Generated, Strategy, register_strategy
from tasks.generate.llm import ARTICLE_INSTRUCTION, LLMParams, LLMStrategy, asks_n, parse_paraphrases
from tasks.generate.paraphrase import ParaphraseParams, ParaphraseStrategy
from tasks.models.llm import ChatRequest, ChatResult, LLMBackend, llm_backend_for

TEXTS = ["I've been down to a dealer and driven them.", "lol cant believe the bus was late AGAIN today",
         "The new cafe on Main St makes great coffee."]


def corpus(texts: Sequence[str]) -> pd.DataFrame:
    n = len(texts)
    return pd.DataFrame({
        "doc_id": [f"d{i}" for i in range(n)], "text": list(texts), "author_id": [f"a{i % 2}" for i in range(n)],
        "group_id": ["g"] * n, "position": pd.array(list(range(n)), dtype="Int64"), "split": ["train"] * n,
        "label": ["x"] * n, "attr_gender": ["f"] * n,
    })


# --- base: several variants per input, meta columns ----------------------------------------------------------


class TwoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@register_strategy("test-two-variants", params=TwoParams)
class TwoVariants(Strategy):
    """Deterministic test strategy: per text, a scripted list of outputs (one per variant)."""

    def __init__(self, params: BaseModel) -> None:
        super().__init__(params)
        self.script: dict[str, object] = {}

    @property
    def variants(self) -> list[str]:
        return ["first", "second"]

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[object]:
        return [self.script.get(t, [t.upper(), t.lower()]) for t in batch["text"]]


def test_one_row_per_input_and_variant_in_order():
    table = generate_synthetic(TwoVariants(TwoParams()), corpus(["Ab", "Cd"]), seed=0)
    assert list(table.columns) == [*SYNTHETIC_COLUMNS, "attr_gender"]
    assert table["doc_id"].tolist() == ["d0", "d0", "d1", "d1"]
    assert table["variant"].tolist() == ["first", "second"] * 2
    assert table["text"].tolist() == ["AB", "ab", "CD", "cd"]
    assert table["author_id"].tolist() == ["a0", "a0", "a1", "a1"]
    assert table["position"].tolist() == [0, 0, 1, 1]
    assert (table["status"] == STATUS_OK).all()
    assert table["attr_gender"].tolist() == ["f"] * 4


def test_missing_or_failed_variant_is_a_failed_row():
    strategy = TwoVariants(TwoParams())
    strategy.script = {"short": ["only one"], "bad": ValueError("model said no"), "single": "just a string",
                       "mixed": [RuntimeError("first broke"), "ok second"]}
    table = generate_synthetic(strategy, corpus(["short", "bad", "single", "mixed"]), seed=0)
    assert len(table) == 8
    rows = {(r.doc_id, r.variant): r for r in table.itertuples()}
    assert rows["d0", "first"].status == STATUS_OK
    assert rows["d0", "second"].status == STATUS_FAILED
    assert "no output for variant 'second'" in rows["d0", "second"].reason
    assert rows["d1", "first"].reason == rows["d1", "second"].reason == "ValueError: model said no"
    assert rows["d2", "first"].text == "just a string" and rows["d2", "second"].status == STATUS_FAILED
    assert rows["d3", "first"].reason == "RuntimeError: first broke" and rows["d3", "second"].text == "ok second"


def test_whole_batch_failure_fails_every_row():
    class Broken(TwoVariants):
        def generate(self, batch, *, seed):
            raise RuntimeError("boom")

    table = generate_synthetic(Broken(TwoParams()), corpus(["a", "b"]), seed=0)
    assert len(table) == 4 and (table["status"] == STATUS_FAILED).all()
    assert set(table["reason"]) == {"RuntimeError: boom"}


def test_meta_becomes_columns_and_truncated_flag():
    strategy = TwoVariants(TwoParams())
    strategy.script = {
        "a": [Generated("x", {"score": 1.5, "truncated": True, "note": "n"}), Generated("y", {"score": 2})],
        "b": ["plain", ValueError("no")],
        "c": [Generated("z", {"text": "clash"}), "fine"],
    }
    table = generate_synthetic(strategy, corpus(["a", "b", "c"]), seed=0)
    assert list(table.columns) == [*SYNTHETIC_COLUMNS, "attr_gender", "score", "truncated", "note"]
    assert str(table["score"].dtype) == "Float64" and str(table["truncated"].dtype) == "boolean"
    assert table["score"].tolist()[:2] == [1.5, 2.0] and table["score"].isna().tolist()[2:] == [True] * 4
    # truncated: True where set, False on other ok rows, null on failed rows
    assert table["truncated"].tolist()[:3] == [True, False, False]
    assert table["truncated"].isna().tolist()[3:5] == [True, True]
    assert table.loc[4, "status"] == STATUS_FAILED and "collide" in table.loc[4, "reason"]


def test_variant_cannot_rename_several_variants_but_renames_one():
    with pytest.raises(ValueError, match="cannot rename"):
        generate_synthetic(TwoVariants(TwoParams()), corpus(["a"]), seed=0, variant="x")
    empty = generate_synthetic(TwoVariants(TwoParams()), corpus([]), seed=0)
    assert len(empty) == 0 and list(empty.columns)[:len(SYNTHETIC_COLUMNS)] == list(SYNTHETIC_COLUMNS)


# --- llm: parsing canned answers --------------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "expected"), [
    ("Here are two stylistically diverse paraphrases of the text:\n\n1. I've been down to a dealer.\n"
     "2. I've driven them.\n\nIn both sentences, the text has been rephrased.",
     ["I've been down to a dealer.", "I've driven them."]),
    ("1) First one\n2) Second one\n3) Third one", ["First one", "Second one", "Third one"]),
    ("- \"Quoted first\"\n- Second,\n  continued here\n* third", ["Quoted first", "Second, continued here", "third"]),
    ("Paraphrase 1: Went to the dealer.\nParaphrase 2: Test drove some cars.",
     ["Went to the dealer.", "Test drove some cars."]),
    ("**1.** bold marker\n(2) **Casual:** second", ["bold marker", "second"]),
    ("1. **Formal**: I visited.\n2. I **really** went.", ["I visited.", "I really went."]),
    ("I went to the car lot.\n\nI visited a dealership and drove.", ["I went to the car lot.",
                                                                    "I visited a dealership and drove."]),
    ("  A single paraphrase.  ", ["A single paraphrase."]),
    ("", []),
    ("Sure:", []),
])
def test_parse_paraphrases(answer, expected):
    assert parse_paraphrases(answer) == expected


class CannedBackend(LLMBackend):
    """Answers every request with a scripted text; records the calls."""

    model = "canned"

    def __init__(self, answers: dict[str, str | None]) -> None:
        self.answers = answers
        self.calls: list[list[ChatRequest]] = []

    def _complete_uncached(self, requests):
        self.calls.append(list(requests))
        out = []
        for r in requests:
            text = next((a for k, a in self.answers.items() if k in r.messages[-1]["content"]), "1. x\n2. y")
            out.append(ChatResult(texts=[text]) if text is not None else ChatResult(texts=None, error="HTTP 500: down"))
        return out


def test_llm_strategy_rows_from_canned_answers():
    backend = CannedBackend({"dealer": "Here you go:\n1. A\n2. B\n3. C", "bus": "Just one paraphrase\nover lines",
                             "cafe": None})
    strategy = LLMStrategy(LLMParams(), backend=backend)
    table = generate_synthetic(strategy, corpus(TEXTS), seed=3)
    assert len(backend.calls) == 1 and len(backend.calls[0]) == 3  # the whole batch in one complete() call
    assert table["variant"].tolist() == ["first", "second"] * 3
    assert table["text"].tolist()[:2] == ["A", "B"]
    assert table.loc[2, "text"] == "Just one paraphrase over lines" and table.loc[3, "status"] == STATUS_FAILED
    reason = table.loc[3, "reason"]
    assert "answer has 1 paraphrase(s)" in reason and "Just one paraphrase over lines" in reason and "\n" not in reason
    assert (table["status"].tolist()[4:] == [STATUS_FAILED] * 2) and "HTTP 500" in table.loc[4, "reason"]
    prompt = backend.calls[0][0].messages[-1]["content"]
    # §4.1's prompt verbatim (seed 000: 'the prompt "Write stylistically diverse paraphrases."') and the text;
    # a served model is not asked for n: it writes several paraphrases on its own
    assert prompt == "Write stylistically diverse paraphrases.\n\n" + TEXTS[0]
    ok = table[table["status"] == STATUS_OK]
    assert ok["generation_signature"].str.contains(r"\|prompt:article\|", regex=True).all()
    assert not ok["generation_signature"].str.contains("|n:", regex=False).any()


def test_llm_asks_for_n_only_where_the_model_needs_it():
    backend = CannedBackend({})
    asked = LLMStrategy(LLMParams(ask_n=True), backend=backend)
    table = generate_synthetic(asked, corpus(TEXTS[:1]), seed=0)
    prompt = backend.calls[0][0].messages[-1]["content"]
    assert prompt.startswith(ARTICLE_INSTRUCTION + " Write 2 paraphrases") and prompt.endswith("Text: " + TEXTS[0])
    assert "|prompt:article+n|n:2|" in table.loc[0, "generation_signature"]
    assert table["text"].tolist() == ["x", "y"]
    # default: asked of the offline in-process model only (it answers the bare prompt with one paraphrase)
    assert asks_n(None, llm_backend_for("llm", {})) is True and asks_n(None, backend) is False
    custom = LLMStrategy(LLMParams(template="Paraphrase: {text}"), backend=CannedBackend({}))
    assert "|prompt:custom-" in custom.signature


def test_llm_seeds_keep_and_truncation():
    backend = CannedBackend({})
    strategy = LLMStrategy(LLMParams(n_outputs=3, keep=[1, "third"], max_input_words=3), backend=backend)
    assert strategy.variants == ["first", "third"]
    table = generate_synthetic(strategy, corpus(["one two three four five", "a b"]), seed=0)
    seeds = [r.seed for r in backend.calls[0]]
    assert seeds[0] != seeds[1]  # per_text seeds
    assert "one two three" in backend.calls[0][0].messages[-1]["content"]
    assert "four" not in backend.calls[0][0].messages[-1]["content"]
    assert table.loc[0, "truncated"] and not table.loc[2, "truncated"]
    assert table["truncated"].isna().tolist() == [False, True, False, True]
    assert table.loc[1, "status"] == STATUS_FAILED  # canned "1. x\n2. y" has no third
    per_batch = CannedBackend({})
    generate_synthetic(LLMStrategy(LLMParams(seed_mode="per_batch"), backend=per_batch), corpus(["a", "b"]), seed=7)
    assert [r.seed for r in per_batch.calls[0]] == [7, 7]


@pytest.mark.parametrize(("params", "key"), [
    ({"template": "no placeholder"}, "strategies.llm.template"),
    ({"template": "{text} {oops}"}, "strategies.llm.template"),
    ({"keep": ["third"]}, "strategies.llm"),
    ({"keep": ["zeroth"]}, "strategies.llm.keep"),
    ({"n_outputs": 0}, "strategies.llm.n_outputs"),
])
def test_llm_params_are_validated(params, key):
    with pytest.raises(ConfigError, match=rf"^{key}"):
        build_strategy("llm", params)


def test_paraphrase_llm_path_with_canned_backend():
    backend = CannedBackend({"dealer": "Here is a paraphrase:\n\"I drove cars at a dealer.\"", "bus": ""})
    strategy = ParaphraseStrategy(ParaphraseParams(), backend=backend)
    table = generate_synthetic(strategy, corpus(TEXTS[:2]), seed=0)
    assert table["text"].tolist()[0] == "I drove cars at a dealer."
    assert table.loc[1, "status"] == STATUS_FAILED and "no paraphrase" in table.loc[1, "reason"]
    assert backend.calls[0][0].top_p == 0.9


# --- real SmolLM2 (slow) ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_llm_strategy_with_smollm2():
    strategy = build_strategy("llm", {"max_tokens": 16, "backend": {"num_threads": 1}})
    t0 = time.perf_counter()
    table = generate_synthetic(strategy, corpus(TEXTS[:2]), seed=0)
    print(f"llm: {2 / (time.perf_counter() - t0):.3f} texts/s")
    assert len(table) == 4 and table["variant"].tolist() == ["first", "second"] * 2
    assert set(table["status"]) <= {STATUS_OK, STATUS_FAILED}
    assert table["text"].notna().eq(table["status"] == STATUS_OK).all()
    assert table["reason"].isna().eq(table["status"] == STATUS_OK).all()


@pytest.mark.slow
def test_paraphrase_offline_default_with_smollm2():
    strategy = build_strategy("paraphrase", {"max_tokens": 16, "backend": {"num_threads": 1}})
    t0 = time.perf_counter()
    table = generate_synthetic(strategy, corpus(TEXTS[:2]), seed=0)
    print(f"paraphrase: {2 / (time.perf_counter() - t0):.3f} texts/s")
    assert len(table) == 2 and set(table["variant"]) == {"first"}
    assert set(table["status"]) <= {STATUS_OK, STATUS_FAILED}
    assert (table["status"] == STATUS_OK).any()
