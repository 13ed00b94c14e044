"""Nothing lost: every registered strategy, run for real on awkward inputs, gives exactly one row per (input,
variant), each ok (with text) or failed (with a one-line reason); over-long inputs to a model are cut and flagged.

The strategies come from ``available_strategies()`` at collection time, so a new strategy is covered without
editing this file; give it params here only when its defaults do not validate (as ``dp`` needs ``epsilon``).
The LLM-based ones run SmolLM2 in process with a tiny ``max_tokens`` and are marked slow."""

from __future__ import annotations

import pandas as pd
import pytest

from tasks.corpus.schema import STATUS_FAILED, STATUS_OK
from tasks.generate import available_strategies, build_strategy, generate_synthetic
from tasks.generate import base as generate_base

LONG = ("The council met again on Tuesday to argue about the bus lanes, the parking fees and the new "
        "library, and nobody agreed on anything at all. ") * 160
INPUTS: dict[str, str] = {
    "empty": "",
    "whitespace": "  \n\t  \n ",
    "long": LONG[:20_000],
    "spanish": "El autobús llegó tarde otra vez y nadie nos dijo por qué.",
    "chinese": "我今天很高兴，因为天气很好。",
    "arabic": "أنا أحب القراءة كثيرا في المساء.",
    "emoji": "😀🎉🔥👍",
    "newlines": "First line here.\nSecond line, a bit longer.\n\nThird line after a blank one.",
    "normal": "The committee approved the new budget yesterday.",
}
#: Strategies that run an LLM (slow on CPU) and cut over-long inputs to their model's context (meta truncated).
LLM_BASED = {"llm", "paraphrase", "dp"}
TINY = {"max_tokens": 8, "backend": {"num_threads": 1}}
PARAMS: dict[str, dict[str, object]] = {
    "llm": TINY,
    "paraphrase": TINY,
    "dp": {"epsilon": 20.0, "max_tokens": 8, "backend": {"num_threads": 1}},
}


def registered() -> list[str]:
    """The project's strategies (test modules register throwaway ones in the same registry)."""
    return [n for n in available_strategies() if generate_base._REGISTRY[n].__module__.startswith("tasks.")]


def strategy_params() -> list[object]:
    return [pytest.param(n, marks=pytest.mark.slow) if n in LLM_BASED else n for n in registered()]


def batch() -> pd.DataFrame:
    n = len(INPUTS)
    return pd.DataFrame({"doc_id": list(INPUTS), "text": list(INPUTS.values()),
                         "author_id": [f"a{i % 3}" for i in range(n)], "group_id": ["g"] * n,
                         "position": pd.array(range(n), dtype="Int64")})


_TABLES: dict[str, tuple[list[str], pd.DataFrame]] = {}


def run(name: str) -> tuple[list[str], pd.DataFrame]:
    """(the strategy's variants, its synthetic table on INPUTS), computed once per strategy."""
    if name not in _TABLES:
        strategy = build_strategy(name, PARAMS.get(name, {}))
        _TABLES[name] = (list(strategy.variants), generate_synthetic(strategy, batch(), seed=0))
    return _TABLES[name]


def test_the_registry_is_covered() -> None:
    offline = {"backtranslate", "stymask", "synsim", "syndiff", "synorig", "syntr"}
    assert set(registered()) >= offline | LLM_BASED


@pytest.mark.parametrize("name", strategy_params())
def test_one_row_per_input_and_variant(name: str) -> None:
    variants, table = run(name)
    k = len(variants)
    assert len(table) == len(INPUTS) * k
    assert table["doc_id"].tolist() == [d for d in INPUTS for _ in range(k)]
    assert table["variant"].tolist() == variants * len(INPUTS)
    assert (table["strategy"] == name).all()


@pytest.mark.parametrize("name", strategy_params())
def test_every_row_is_ok_with_text_or_failed_with_one_line_reason(name: str) -> None:
    _, table = run(name)
    assert set(table["status"]) <= {STATUS_OK, STATUS_FAILED}
    for row in table.itertuples():
        where = f"{name}/{row.doc_id}/{row.variant}"
        if row.status == STATUS_OK:
            assert isinstance(row.text, str) and row.text.strip(), where
            assert pd.isna(row.reason), where
        else:
            assert pd.isna(row.text), where
            assert isinstance(row.reason, str) and row.reason.strip() and "\n" not in row.reason, where
    # a long or multilingual text is something to rewrite, not a reason to fail every variant
    for doc in ("long", "normal", "newlines", "spanish"):
        assert (table.loc[table["doc_id"] == doc, "status"] == STATUS_OK).any(), (name, doc, table.loc[
            table["doc_id"] == doc, "reason"].tolist())


@pytest.mark.parametrize("name", strategy_params())
def test_long_input_is_truncated_and_flagged_where_there_is_a_model_context(name: str) -> None:
    _, table = run(name)
    if name not in LLM_BASED:
        if "truncated" in table.columns:  # a strategy without a model context has nothing to cut
            assert not table["truncated"].fillna(False).any()
        return
    assert "truncated" in table.columns
    long_ok = table[(table["doc_id"] == "long") & (table["status"] == STATUS_OK)]
    assert len(long_ok) and long_ok["truncated"].all()
    short_ok = table[(table["doc_id"] != "long") & (table["status"] == STATUS_OK)]
    assert not short_ok["truncated"].fillna(False).any()


@pytest.mark.parametrize("name", strategy_params())
def test_a_text_returned_as_is_is_flagged_unchanged(name: str) -> None:
    """A rewrite that returns its input (no rule applies, a script the strategy cannot handle) is visible:
    ``unchanged`` is true exactly on the ok rows whose text is the source up to whitespace or copies the whole
    source, null on failed rows."""
    _, table = run(name)
    for row in table.itertuples():
        where = f"{name}/{row.doc_id}/{row.variant}"
        if row.status == STATUS_OK:
            source = INPUTS[row.doc_id]
            spaced, text = " ".join(source.split()), " ".join(row.text.split())
            same = spaced == text or (len(spaced) > 20 and spaced in text)
            assert bool(row.unchanged) == same, (where, row.text)
        else:
            assert pd.isna(row.unchanged), where
