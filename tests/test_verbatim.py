"""The ``verbatim`` figure: outputs that still hold a run of 30+ characters of their own source (a pseudonymised
copy included), against a longest-common-substring reference; its Wilson interval; and the figure in the
metric suite's score table, a budget and the report's privacy table."""

from __future__ import annotations

import difflib
import random

import numpy as np
import pandas as pd
import pytest

from flows.config import parse_config
from flows.config_options import metric_options
from flows.config_sections import MetricsConfig
from tasks.budgets import parse_budget
from tasks.intervals import wilson
from tasks.metrics import catalogue
from tasks.metrics.suite import DEFAULT_METRICS, MetricOptions, score_synthetic
from tasks.metrics.verbatim import (
    normalise,
    verbatim_figure,
    verbatim_flags,
    verbatim_share,
    verbatim_signature,
)
from tasks.report.budgets import budget_table, check_budget
from tasks.report.build import ReportData
from tasks.report.render import render_markdown
from tasks.report.tables import privacy_table

SOURCES = [
    "We need to bring jobs back to this country, and we will do it quickly.",
    "My plan cuts taxes for the middle class and invests in infrastructure.",
    "I have been fighting for children and families my entire career.",
    "Thank you.",
]
# The same meaning in other words: no run of 30 characters is the source's.
PARAPHRASES = [
    "Work has to return here, and fast, which is exactly what we intend to do.",
    "Under my proposal the middle class pays less and roads and bridges get funded.",
    "Kids and households have been my cause for as long as I have worked.",
    "Thanks.",
]


def test_a_copy_is_verbatim_and_a_paraphrase_is_not() -> None:
    assert verbatim_flags(SOURCES, SOURCES).tolist() == [True] * 4  # "Thank you." too: it equals its source
    assert verbatim_flags(SOURCES, PARAPHRASES).tolist() == [False] * 4
    # one sentence of the source kept inside a rewrite of the rest is enough
    kept = "Honestly? " + SOURCES[1][:40] + " and the rest is different now."
    # whitespace runs and case do not hide a run (a search engine ignores both)
    rewrapped = SOURCES[2].replace(" ", "\n  ", 3).upper()
    assert verbatim_flags([SOURCES[1], SOURCES[2]], [kept, rewrapped]).tolist() == [True, True]
    assert normalise("  Bring\tJOBS \n back ") == "bring jobs back"
    # nor does punctuation: a comma after every word, a sentence split at a comma, a full stop left out
    punctuated = " ".join(w + "," for w in SOURCES[0].split())
    assert verbatim_flags([SOURCES[0]], [punctuated])[0]
    source = "For as long as I've known him, Joe has never given up, never failed to see the possibilities."
    split = "For as long as I have known him, someone has never given up. Never failed to find the chances."
    assert verbatim_flags([source, "Well, Mr. President, like who?"], [split, "Well Mr President -- like who"]).all()
    assert normalise("Well, Mr. President—like who?!") == "well mr president like who"


def test_short_texts_are_verbatim_only_when_they_equal_their_source() -> None:
    sources = ["Thank you.", SOURCES[0], "Thank you.", "", "Thank you."]
    outputs = ["thank  you.", "bring jobs back", "Thank you. It is an honour to be here tonight, friends.", "", ""]
    # equal (after normalising); a fragment of a long source; a short source kept inside a longer output;
    # empty texts; an empty output
    assert verbatim_flags(sources, outputs).tolist() == [True, False, False, False, False]


def test_the_threshold_is_configurable() -> None:
    shared = "the middle class and invests"  # 28 characters of SOURCES[1]
    output = f"Nothing{shared}else"  # neither neighbour is the source's (a letter where it has a space)
    assert len(shared) == 28 and shared in SOURCES[1]
    assert verbatim_flags([SOURCES[1]], [output], min_chars=28)[0]
    assert not verbatim_flags([SOURCES[1]], [output], min_chars=29)[0]
    assert not verbatim_flags([SOURCES[1]], [output])[0]  # the default: 30
    assert verbatim_signature(28) == "metric:verbatim|min_chars:28|match:casefold+words|version:synthugc-0.1"
    for bad in (0, -3, 2.5, True, None):
        with pytest.raises(ValueError, match="min_chars must be a positive integer"):
            verbatim_flags(SOURCES, SOURCES, min_chars=bad)
    with pytest.raises(ValueError, match="4 sources for 3 outputs"):
        verbatim_flags(SOURCES, SOURCES[:3])
    # the config's metrics.verbatim.min_chars reaches the suite's options
    assert MetricsConfig().verbatim.min_chars == 30
    cfg = parse_config({"experiment": "x", "data": {"dataset": "debates"}, "generate": {"strategies": [
        {"name": "stymask"}]}, "metrics": {"names": ["verbatim"], "verbatim": {"min_chars": 28}}})
    assert metric_options(cfg).verbatim_min_chars == 28


def test_a_pseudonymised_copy_is_verbatim() -> None:
    """The project's pseudonymiser swaps the names; every other word is the source's, so the copy is verbatim."""
    from tasks.generate.pseudonymize import REPLACED_COLUMN, pseudonymize_corpus

    texts = ["Yesterday I had lunch with Barack Obama and we talked about the election for hours.",
             "Jennifer Lopez told me that the concert was cancelled because of the storm last night.",
             "Write to jane.doe@gmail.com before Friday, or the room will be given to another team."]
    corpus = pd.DataFrame({"doc_id": ["d0", "d1", "d2"], "text": texts})
    pseudonymised, _ = pseudonymize_corpus(corpus, scope="document", seed=0)
    assert (pseudonymised[REPLACED_COLUMN] > 0).all()
    outputs = pseudonymised["text"].tolist()
    assert all(o != t for o, t in zip(outputs, texts, strict=True))
    assert "Barack Obama" not in outputs[0] and "jane.doe@gmail.com" not in outputs[2]
    assert verbatim_flags(texts, outputs).tolist() == [True, True, True]
    figure = verbatim_share(texts, outputs)
    assert (figure.value, figure.n, figure.verbatim) == (1.0, 3, 3)


def _longest_common(a: str, b: str) -> int:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match().size


def test_flags_equal_a_longest_common_substring_reference() -> None:
    rng = random.Random(0)
    alphabets = ["ab", "abc ", "aAbB  \n", "abcdefghij "]
    checked = {True: 0, False: 0}
    for _ in range(1500):
        alphabet = rng.choice(alphabets)
        source = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 70)))
        if rng.random() < 0.5:  # an output that copies a slice of its source inside random text
            start = rng.randrange(0, len(source) + 1)
            piece = source[start:start + rng.randrange(0, 40)]
            output = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 20))) + piece + \
                "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 20)))
        else:
            output = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 70)))
        k = rng.choice([1, 2, 3, 5, 8, 13, 30])
        a, b = normalise(source), normalise(output)
        expected = (a == b and bool(a)) or _longest_common(a, b) >= k
        got = bool(verbatim_flags([source], [output], min_chars=k)[0])
        assert got == expected, (source, output, k)
        checked[expected] += 1
    assert min(checked.values()) > 300  # both outcomes exercised


def test_the_figure_is_the_share_with_its_wilson_interval() -> None:
    figure = verbatim_figure([True, False, False, True, False])
    assert (figure.value, figure.n, figure.verbatim) == (0.4, 5, 2)
    assert (figure.ci_low, figure.ci_high) == pytest.approx(wilson(2, 5))
    empty = verbatim_figure([])
    assert np.isnan(empty.value) and np.isnan(empty.ci_low) and empty.n == 0


def _synthetic(strategy: str, texts: list[str | None], status: list[str] | None = None) -> pd.DataFrame:
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(texts))], "strategy": strategy, "variant": "first",
                         "text": texts, "status": status or ["ok"] * len(texts)})


def test_the_suite_scores_it_by_default_and_the_report_and_a_budget_read_it(tmp_path) -> None:
    assert "verbatim" in DEFAULT_METRICS and "verbatim" in MetricsConfig().names
    metric = catalogue.CATALOGUE["verbatim"]
    assert (metric.level, metric.aspect, metric.direction) == ("pair", "privacy", -1)
    corpus = pd.DataFrame({"doc_id": [f"d{i}" for i in range(4)], "text": SOURCES})
    synthetic = pd.concat([
        _synthetic("copy", [*SOURCES[:3], None], ["ok", "ok", "ok", "failed"]),  # a failure is not scored
        _synthetic("rewrite", PARAPHRASES),
        _synthetic("half", [SOURCES[0], PARAPHRASES[1], SOURCES[2], PARAPHRASES[3]])], ignore_index=True)
    result = score_synthetic(corpus, synthetic, ["verbatim"], MetricOptions(), tmp_path / "emb.sqlite")

    per_pair = result.sample_scores.set_index(["strategy", "doc_id"])
    assert per_pair.loc[("copy", "d0"), "verbatim"] == 1.0 and per_pair.loc[("rewrite", "d0"), "verbatim"] == 0.0
    assert np.isnan(per_pair.loc[("copy", "d3"), "verbatim"])
    assert per_pair.loc[("copy", "d3"), "verbatim_reason"] == "generation failed"
    rows = result.distribution_scores.set_index("strategy")
    assert set(rows["level"]) == {"privacy"} and set(rows["metric"]) == {"verbatim"}
    assert rows.loc["copy", ["value", "n", "n_failed"]].tolist() == [1.0, 3, 1]
    assert rows.loc["half", "value"] == 0.5
    assert (rows.loc["half", "ci_low"], rows.loc["half", "ci_high"]) == pytest.approx(wilson(2, 4))
    assert rows.loc["rewrite", "value"] == 0.0 and rows.loc["rewrite", "ci_high"] > 0.4  # 0 of 4 decides little
    assert result.signatures["verbatim"] == verbatim_signature(30)

    summary = result.distribution_scores
    budget = budget_table(summary)  # strategies labelled with their variant: "copy (first)"
    assert budget.set_index("strategy").loc["half (first)", ["verbatim", "verbatim_n"]].tolist() == [0.5, 4]
    verdicts = check_budget(budget, parse_budget("verbatim<=0.3")).set_index("strategy")
    copy, rewrite = verdicts.loc["copy (first)"], verdicts.loc["rewrite (first)"]
    assert not copy["meets"] and "the whole 95% interval misses it" in copy["verdict"]
    assert rewrite["undecided"]  # 0 of 4: its upper bound is above 0.3
    assert "documents at the observed rate would decide it" in rewrite["verdict"]
    assert check_budget(budget, parse_budget("verbatim<=0.3"), decide_on="point").set_index(
        "strategy").loc["rewrite (first)", "meets"]

    table = privacy_table(summary)
    column = next(c for c in table.columns if c.metric == "verbatim")
    assert column.header == "Verbatim ↓"
    best = {table.rows[r][0] for (r, key), marks in table.marks.items() if key == column.key and "best" in marks}
    assert best == {"rewrite"}
    page = render_markdown(ReportData(title="t", facts={}, summary=summary, budget="verbatim<=0.3"))
    assert "Verbatim ↓" in page and "0.500 [" in page and "## Budget: `verbatim<=0.3`" in page


@pytest.mark.parametrize("text", ["  The  PRESIDENT\tsaid:\n\nno ", "Straße İstanbul ﬁne", "", "   ", "ok", "a \u00a0 b",
                                  "Well, Mr. President—like who?!", "x_y -- z", "—"])
def test_normalise_with_offsets_reads_text_as_normalise_does_and_points_back_into_it(text):
    """Reword finds the runs to break with it: its text must be the comparison's, character for character, and each
    character must come from the offset it names (folded case: "ß" -> "ss" both from one)."""
    from tasks.metrics.verbatim import normalise, normalise_with_offsets

    low, where = normalise_with_offsets(text)
    assert low == normalise(text) and len(where) == len(low)
    assert all((c == " " and not text[k].isalnum()) or c in text[k].casefold()
               for c, k in zip(low, where, strict=True))
    assert list(where) == sorted(where)
