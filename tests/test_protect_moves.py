"""The protect loop's pieces without models: evidence masking, the ladder and budget parsing, and the
stylometric attack's evidence against scikit-learn (its contributions add up to the profiles' cosine)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from flows.config_options import protect_settings
from tasks.budgets import parse_budget
from tasks.errors import ConfigError
from tasks.privacy.stylometric.evidence import EvidenceProfiles, stylometric_evidence
from tasks.privacy.stylometric.features import reference_vectorizer
from tasks.privacy.stylometric.params import StyloParams
from tasks.protect.moves import DEFAULT_LADDER, Move, mask_evidence, parse_ladder


@pytest.mark.parametrize(("text", "features", "expected"), [
    ("Great news!!! We won lol", [("!!", "char"), ("lol", "word")], "Great news! We won"),
    ("We Will Win, Again :)", [("We W", "char"), (" :)", "char")], "we will Win, Again"),
    ("the zorbly plan is zorbly good", [("orbl", "char")], "the plan is good"),
    ("no evidence here", [("xyz", "char"), ("a", "char")], "no evidence here"),
    ("tax cuts and tax cuts", [("tax cuts", "word")], "and"),
])
def test_mask_evidence_removes_or_normalises_what_the_attack_named(text, features, expected):
    assert mask_evidence(text, features) == expected


def test_ladder_and_budget_errors_name_the_problem():
    assert parse_ladder(["mask-evidence", {"name": "dp", "params": {"epsilon": 8.0}}], "protect.ladder") == (
        Move("mask-evidence"), Move("dp", {"epsilon": 8.0}))
    assert Move("stymask").label == "strategy:stymask" and Move("mask-evidence").label == "mask-evidence"
    with pytest.raises(ConfigError, match=r"protect.ladder\[1\]: unknown move 'paint' \(known: pseudonymize, "
                                          r"reword, mask-evidence, generalize, llm-anonymize, backtranslate"):
        parse_ladder(["stymask", "paint"], "protect.ladder")
    with pytest.raises(ConfigError, match=r"protect.ladder\[0\].params"):
        parse_ladder([{"name": "dp", "params": {"epsilon": "lots"}}], "protect.ladder")
    with pytest.raises(ConfigError, match="takes no params"):
        parse_ladder([{"name": "mask-evidence", "params": {"k": 1}}], "protect.ladder")
    assert [str(b) for b in parse_budget("reidentification<=0.1, pii_leakage<=0", "--budget", protect=True)] == [
        "reidentification<=0.1", "pii_leakage<=0"]
    with pytest.raises(ConfigError, match="unknown budget figure 'utility'; known: reidentification, reidentification_risk, pii_leakage"):
        parse_budget("utility>=0.9", "--budget", protect=True)
    settings = protect_settings(None, ladder=["stymask"], judge=["delta"], max_rounds=2)
    assert settings.ladder == (Move("stymask"),) and settings.judge == (("delta", {}),) and settings.max_rounds == 2
    assert protect_settings(None).ladder == DEFAULT_LADDER


def test_the_llm_rungs_join_the_default_ladder_only_where_an_llm_is_served(monkeypatch):
    """On CPU the small offline LLM costs minutes a round: the default ladder names no move that needs it; with an
    endpoint set, the LLM paraphrase, the anonymiser and DP rewriting follow the CPU rungs. Named, they run anyway."""
    monkeypatch.delenv("SYNTHUGC_LLM_ENDPOINT_LLM", raising=False)
    needs_llm = {"llm", "llm-anonymize", "dp"}
    assert not {m.name for m in protect_settings(None).ladder} & needs_llm
    monkeypatch.setenv("SYNTHUGC_LLM_ENDPOINT_LLM", "http://127.0.0.1:9/v1")
    served = protect_settings(None).ladder
    assert served[:len(DEFAULT_LADDER)] == DEFAULT_LADDER and {m.name for m in served[len(DEFAULT_LADDER):]} == needs_llm
    assert protect_settings(None, ladder=["llm"]).ladder == (Move("llm"),)
    with pytest.raises(ConfigError, match="start: unknown move 'nothing'"):
        protect_settings(None, start="nothing")


def test_stylometric_evidence_is_the_cosine_split_by_feature():
    histories = pd.DataFrame({
        "author_id": ["a", "a", "a", "b", "b", "c"],
        "doc_id": ["h1", "h2", "h3", "h4", "h5", "h6"],
        "text": ["Totally GREAT day!!", "GREAT stuff, totally!!", "we won!!", "a calm remark.", "another remark.",
                 "hello there"]})
    timelines = pd.DataFrame({"group_id": ["t1", "t1"], "author_id": ["a", "a"], "doc_id": ["s1", "s2"],
                              "text": ["Totally GREAT!!", "great game!!"]})
    params = StyloParams(mode="exact")
    evidence = stylometric_evidence(histories, timelines, params, held_out=None, top=100_000)
    vectorizer = reference_vectorizer(params).fit(histories["text"])  # every post enters the IDF here (< sample)
    profile = np.asarray(vectorizer.transform(histories["text"][:3]).mean(axis=0)).ravel()
    timeline = np.asarray(vectorizer.transform(timelines["text"]).mean(axis=0)).ravel()
    cosine = profile @ timeline / np.linalg.norm(profile) / np.linalg.norm(timeline)
    assert evidence["contribution"].sum() == pytest.approx(cosine, rel=1e-9)
    top = evidence.sort_values("contribution", ascending=False).iloc[0]
    assert top["group_id"] == "t1" and top["author_id"] == "a" and "!!" in top["feature"] + "GREAT!!"
    assert set(evidence["kind"]) == {"char", "word"}
    assert (evidence.loc[evidence["kind"] == "word", "feature"].str.contains("totally|great", case=False)).any()


@pytest.mark.parametrize(("source", "output", "unchanged"), [
    ("We will win, believe me", "We  will win, believe me ", True),          # whitespace only
    ("We will win, believe me", "We will win, believe me. Truly.", True),   # the whole source copied in
    ("We will win, believe me", "we will win, believe me.", False),          # a style change (casing)
    ("short one", "short one, yes", False),                                  # 20 characters or fewer
])
def test_a_text_that_keeps_the_source_words_counts_as_unchanged(source, output, unchanged):
    from tasks.generate.base import is_unchanged

    assert is_unchanged(source, output) is unchanged


@pytest.mark.slow
def test_llm_anonymize_asks_the_offline_model_with_the_evidence_and_answers_each_text():
    from tasks.models.llm import llm_backend_for
    from tasks.protect.moves import anonymize_prompt, llm_anonymize

    features = [("!!!", "char"), ("believe me", "word")]
    prompt = anonymize_prompt("We will win, believe me!!!", features)
    assert "'!!!', 'believe me'" in prompt and prompt.endswith("Text: We will win, believe me!!!\n\nRewritten text:")
    backend = llm_backend_for("llm", {})
    first = llm_anonymize(["We will win, believe me!!!"], [features], backend, seed=3, max_tokens=32)
    again = llm_anonymize(["We will win, believe me!!!"], [features], backend, seed=3, max_tokens=32)
    assert len(first) == 1 and first == again  # seeded: the same rewrite for the same request
    assert first[0] is None or (first[0].strip() and not first[0].startswith("Rewritten text"))


def test_bertscore_keeps_only_the_references_when_candidates_are_scored_once(tmp_path):
    from tasks.metrics.meaning import bertscore
    from tasks.models.embeddings import EmbeddingCache

    candidates, references = ["the cat sat on a mat", "we shall win"], ["a cat sat on the mat", "we will win, believe me"]
    plain = bertscore(candidates, references).scores
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    once = bertscore(candidates, references, cache=cache, cache_candidates=False).scores
    assert once.to_numpy() == pytest.approx(plain.to_numpy(), abs=1e-6)
    assert cache.misses == len(references)  # the candidates were not stored
    again = bertscore(candidates, references, cache=cache, cache_candidates=False).scores
    assert cache.hits == len(references) and again.to_numpy() == pytest.approx(plain.to_numpy(), abs=1e-6)


def test_the_judge_risk_figure_is_the_residual_over_chance_and_the_curve_draws_it() -> None:
    """``reidentification_risk``: the judge's worst residual risk over chance (an attack not above chance has
    risk 0, its interval kept); the report's curve draws the figure the budget bounds."""
    from tasks.intervals import residual_risk
    from tasks.privacy.attribution import attribution_summary
    from tasks.protect.attackers import worst as _worst
    from tasks.report.build import curve_budget

    def summary(attack: str, correct: int, n: int) -> dict:
        per = pd.DataFrame({"correct": [True] * correct + [False] * (n - correct), "in_top10": [True] * n,
                            "reciprocal_rank": [1.0] * correct + [0.5] * (n - correct), "in_history": [True] * n})
        return {"role": "judge", "attack": attack, "adversary": "disjoint",
                **attribution_summary(per, 5, n_resamples=10)}

    strong, weak = summary("delta", 40, 100), summary("minhash", 10, 100)  # chance 0.2: 0.4 and 0.1
    worst = _worst([weak, strong], "judge", "bound", figure="risk")
    expected = residual_risk(40, 100, control_rate=0.2)
    assert worst["attack"] == "delta"
    assert (worst["value"], worst["ci_high"]) == pytest.approx((expected.value, expected.ci_high))
    alone = _worst([weak], "judge", "bound", figure="risk")
    assert alone["value"] == 0.0 and alone["ci_high"] == pytest.approx(residual_risk(10, 100, control_rate=0.2).ci_high)
    assert _worst([weak, strong], "judge", "point")["value"] == pytest.approx(0.4)  # accuracy@1 by default
    assert curve_budget(parse_budget("reidentification_risk<=0.1", "--budget", protect=True)) == ("reidentification_risk", 0.1)
    assert curve_budget(parse_budget("reidentification<=0.3,reidentification_risk<=0.1", "--budget", protect=True)) == (
        "reidentification", 0.3)
    assert curve_budget(parse_budget("pii_leakage<=0", "--budget", protect=True)) == ("reidentification", None)


def test_a_judge_reliably_wrong_on_the_kept_timelines_still_counts_as_informed() -> None:
    """Leaving out the timelines a feedback classifier got right can leave a correlated judge wrong on almost
    every kept one; flipped, its answers are right: the profiling figure reads them as such."""
    from tasks.intervals import residual_risk
    from tasks.privacy.profiling import relabelled
    from tasks.protect.attackers import _profiling_summary

    y = np.array(["a"] * 12 + ["b"] * 8, dtype=object)
    flipped = np.where(y == "a", "b", "a")
    flipped[0] = "a"  # one right guess
    assert list(relabelled(y, flipped)) == list(np.where(flipped == "a", "b", "a"))  # both values swap back
    summary = _profiling_summary(pd.DataFrame({"y_true": y, "y_pred": flipped}))
    assert summary["accuracy_at_1"] == pytest.approx(1 / 20)  # as predicted: far below the majority (0.6)
    assert summary["risk"] == pytest.approx(residual_risk(19, 20, 12, 20).value) and summary["risk"] > 0.8
    blind = np.array(["a"] * 20, dtype=object)  # a constant guess stays at the majority: no advantage
    assert list(relabelled(y, blind)) == list(blind)
    assert _profiling_summary(pd.DataFrame({"y_true": y, "y_pred": blind}))["risk"] == pytest.approx(0.0)


def _reference_evidence(histories: pd.DataFrame, timelines: pd.DataFrame, params: StyloParams, stride: int,
                        top: int, authors: set[str]) -> dict[tuple[str, str, str], float]:
    """The evidence as one scikit-learn fit computes it: IDF on the fitted authors' posts plus every
    ``stride``-th other post, each timeline's mean TF-IDF row times its author's."""
    mine = histories["author_id"].isin(authors).to_numpy()
    picked = (np.arange(len(histories)) % stride == 0) & ~mine
    vectorizer = reference_vectorizer(params).fit(list(histories["text"][mine]) + list(histories["text"][picked]))
    names = vectorizer.get_feature_names_out()
    out = {}
    for group, rows in timelines.groupby("group_id", sort=False):
        author = rows["author_id"].iloc[0]
        own = vectorizer.transform(histories["text"][histories["author_id"] == author])
        a = np.asarray(own.mean(axis=0)).ravel()
        t = np.asarray(vectorizer.transform(rows["text"]).mean(axis=0)).ravel()
        contribution = t / np.linalg.norm(t) * a / np.linalg.norm(a)
        for j in [j for j in np.argsort(-contribution, kind="stable")[:top] if contribution[j] > 0]:
            out[(group, names[j].lstrip("\x00"), "word" if names[j].startswith("\x00") else "char")] = contribution[j]
    return out


def test_stylometric_evidence_fitted_once_is_reused_and_equals_scikit_learn(tmp_path, monkeypatch):
    """A protect loop fits the evidence once, in round 0, for the authors it left caught, and asks, round after
    round, for the timelines still caught: those calls read nothing from the histories and give exactly the
    evidence of one scikit-learn fit on those authors."""
    rng = np.random.default_rng(3)
    words = ["great", "Totally", "calm", "remark", "zorbly", "we", "won", "tax", "cuts", "hello", "there", "!!", ":)"]
    authors = [f"u{i}" for i in range(8)]
    histories = pd.DataFrame({"author_id": [authors[i % 8] for i in range(120)],
                              "doc_id": [f"h{i}" for i in range(120)],
                              "text": [" ".join(rng.choice(words[(i % 8):] + words[:2], 6)) for i in range(120)]})
    path = tmp_path / "histories.parquet"
    histories.to_parquet(path)
    timelines = pd.DataFrame({"group_id": [f"t{i // 3}" for i in range(15)],
                              "author_id": [authors[i // 3] for i in range(15)],
                              "doc_id": [f"s{i}" for i in range(15)],
                              "text": [" ".join(rng.choice(words, 5)) for _ in range(15)]})
    params = StyloParams(mode="exact")
    fitted = set(authors[:5])
    kwargs = {"held_out": None, "top": 15, "idf_sample": 40, "authors": fitted}  # every 3rd other post in the IDF
    ahead = stylometric_evidence(path, timelines.head(0), params, **kwargs)  # round 0: fitted ahead
    assert ahead.empty
    later = timelines[timelines["group_id"].isin(["t1", "t3"])]  # a later round: a subset still caught
    fits = []
    real_fit = EvidenceProfiles.fit.__func__
    monkeypatch.setattr(EvidenceProfiles, "fit", classmethod(lambda cls, *a: fits.append(a) or real_fit(cls, *a)))
    reused = stylometric_evidence(path, later, params, **kwargs)
    assert not fits  # the fit of round 0 was reused: the histories were not read again
    fresh = stylometric_evidence(histories, later, params, **kwargs)  # a DataFrame: fitted anew, nothing kept
    assert len(fits) == 1 and len(reused) and set(reused["group_id"]) == {"t1", "t3"}
    pd.testing.assert_frame_equal(reused, fresh)
    reference = _reference_evidence(histories, later, params, stride=3, top=15, authors=fitted)
    got = {(g, f, k): c for g, f, k, c in zip(reused["group_id"], reused["feature"], reused["kind"],
                                              reused["contribution"], strict=True)}
    assert got.keys() == reference.keys()
    np.testing.assert_allclose([got[k] for k in reference], list(reference.values()), rtol=0, atol=1e-12)


def test_carried_by_scans_a_timeline_once_and_decides_each_text_as_the_rule_does():
    """The joined scan gives, per text, what the matching rule gives on that text alone: no match across two
    texts, the first occurrence of each text found after a repeat in an earlier one."""
    import re

    from tasks.privacy.evidence import carried_by

    def by_hand(text: str, feature: str, kind: str) -> bool:
        core = feature.strip()
        if len(core) < 2:
            return False
        if kind == "word":
            return re.search(r"(?<!\w)" + r"\s+".join(map(re.escape, core.split())) + r"(?!\w)", text) is not None
        return core[0] * 2 in text if set(core) in ({"."}, {"!"}, {"?"}) else core in text

    texts = ["tax cuts and tax cuts", "tax", "cuts now!!", "", "taxcuts", "big tax\ncuts...", "...!", "ta", "x cuts"]
    nul = ["a tax", "\x00b", "c tax\x00d"]  # texts holding the scan's separator: scanned one by one
    features = [("tax cuts", "word"), ("tax", "word"), ("ax", "char"), ("!!!", "char"), ("...", "char"),
                ("x c", "char"), ("s n", "char"), ("a", "char"), ("cuts", "word"), ("tax\x00", "char")]
    for feature, kind in features:
        expected = [by_hand(t, feature, kind) for t in texts]
        assert list(carried_by(texts, feature, kind)) == expected, (feature, kind)
    for feature, kind in [("tax\x00", "char"), ("x\x00b", "char"), ("tax", "word")]:
        assert list(carried_by(nul, feature, kind)) == [by_hand(t, feature, kind) for t in nul], (feature, kind)
    assert carried_by(texts, "tax cuts", "word").sum() == 2 and not carried_by(["ta", "x cuts"], "tax", "char").any()


def test_the_judge_strength_check_names_both_attacks_when_the_intervals_do_not_overlap() -> None:
    """Round 0's check: a narrowed judge whose worst case (upper bound) reads below the strongest registered attack
    it leaves out (lower bound) is said, naming both; overlapping intervals or the strongest inside the judge
    are not."""
    from tasks.privacy.attribution import attribution_summary
    from tasks.protect.loop import judge_strength

    def summary(role: str, attack: str, correct: int, n: int = 100) -> dict:
        per = pd.DataFrame({"correct": [True] * correct + [False] * (n - correct), "in_top10": [True] * n,
                            "reciprocal_rank": [1.0] * correct + [0.5] * (n - correct), "in_history": [True] * n})
        return {"role": role, "attack": attack, "adversary": "disjoint", **attribution_summary(per, 50, n_resamples=10)}

    weak, strong = summary("judge", "delta", 5), summary("check", "stylometric", 70)
    said = judge_strength([weak, strong, summary("feedback", "stylometric", 90)], "bound")
    assert said is not None and said.startswith("the judge is weaker than the strongest registered attack at round 0: "
                                                "stylometric (disjoint) re-identifies 0.7 [")
    assert "the judge's worst delta (disjoint) 0.05 [" in said and "add stylometric to --judge" in said
    assert judge_strength([weak, summary("check", "minhash", 9)], "bound") is None  # within the intervals
    assert judge_strength([weak, summary("judge", "stylometric", 70)], "bound") is None  # the judge has it


def test_mask_evidence_leaves_no_word_doubled_that_was_not():
    from tasks.metrics.fluency import adds_doubled_words

    source = "Now, everyone knows that this is a that and ridiculous charge."
    masked = mask_evidence(source, [("is a that", "word")])
    assert masked == "Now, everyone knows that this and ridiculous charge."
    masked = mask_evidence("They said that that and so and so on.", [("so", "word")])
    assert masked == "They said that that and on."  # the source's own "that that" stays; "and and" does not
    assert not adds_doubled_words("They said that that and so and so on.", masked)
    assert adds_doubled_words("We went to the shop.", "We went to the the shop.")


@pytest.mark.parametrize(("source", "text", "short"), [
    ("Through Medicare contributions, he paid it forward.", "Through Medicare and donations, he paid it", True),
    ("People say, I am just too busy to think about politics.", "I am just too busy to.", True),
    ("x x x decline.", "x x x", True),
    ("Where are you from?", "Where are you from?", False),  # the source ends so too
    ("You should be able —", "You should be capable —", False),  # the source ends no sentence
    ("He said \"go.\"", "He said \"leave.\"", False),
    ("Thank you.", "Thanks!", False),
])
def test_a_text_cut_short_is_told_from_one_that_ends_as_its_source_does(source, text, short):
    """mask-evidence removing a text's last words leaves fragments the fluency LM reads as plausible ("he paid it"
    scored -0.92 against its source, within the -1.0 floor): they are rejected by form."""
    from tasks.metrics.fluency import cut_short

    assert cut_short(source, text) is short


def test_reword_breaks_the_runs_of_its_source_with_few_edits():
    from difflib import SequenceMatcher

    from tasks.metrics.verbatim import verbatim_flags
    from tasks.protect.reword import reword

    sources = ["In this way, we are in a similar place as our Founding Fathers.",
               "You see, for me, college was not an option; it was mandatory.",
               "When the jobs of auto workers were threatened in 2009, some said: Let Detroit fail.",
               "The president sent this plan to the Congress last week."]
    out = reword(sources, min_chars=30)
    assert not verbatim_flags(sources, out, min_chars=30).any(), out
    for source, text in zip(sources, out, strict=True):
        matched = SequenceMatcher(None, source.split(), text.split()).get_matching_blocks()
        changed = len(source.split()) - sum(block.size for block in matched)
        assert 1 <= changed <= 4, (source, text)  # a few words, not a rewrite
    assert "Founding Fathers" in out[0] and "Detroit" in out[2] and "2009" in out[2]  # names and numbers stay
    assert "wasn't" in out[1]  # a contraction breaks a stretch of function words
    assert reword(["Gracias."], min_chars=30) == ["Gracias."]  # nothing to break in a short text
    symbols = reword(["The other guys write $10 million checks and take 10% of it."], min_chars=30)[0]
    assert "$10 " in symbols and "10%" in symbols, symbols  # a number with a symbol on it stays in digits


def test_verbatim_is_always_in_the_loop_unless_lifted_by_name():
    from tasks.protect.settings import ProtectSettings

    named_none = ProtectSettings(budget="reidentification<=0.10")
    assert named_none.budget == "reidentification<=0.10,verbatim<=0.05" and named_none.bounds_figure("verbatim")
    assert ProtectSettings().bounds_figure("verbatim")  # the default budget
    assert ProtectSettings(budget="reidentification<=0.10,verbatim<=0").budget == "reidentification<=0.10,verbatim<=0"
    lifted = ProtectSettings(budget="reidentification<=0.10,verbatim<=1")
    assert not lifted.bounds_figure("verbatim") and lifted.bounds_figure("reidentification")


def test_reword_judged_by_the_lm_keeps_only_swaps_that_fit_their_context():
    """Judged by the fluency LM in context, reword takes no wrong-sense synonym a most-frequent choice takes ("college
    and rent" -> "college and tear", "no one" -> "no single"), the judged rewordings read better than the unjudged
    ones, and a text shorter than the verbatim run still gets the one edit that makes it other than a copy."""
    from tasks.metrics.fluency import FLUENCY, fluency, slor_totals
    from tasks.metrics.verbatim import verbatim_flags
    from tasks.protect.reword import reword

    sources = ["She works hard to pay for college and rent.", "Now, let me be clear so no one misunderstands.",
               "We all know that education leads to opportunity and that education begins with a great teacher.",
               "Maria is a custodian from California, and thanks to health care reform, her daughter is covered.",
               "He's wrong."]
    plain = reword(sources, min_chars=30, senses=3)
    judged = reword(sources, min_chars=30, senses=3, judge=slor_totals)
    assert " tear." in plain[0] and "no single" in plain[1]  # what the most frequent synonym gives
    assert " tear" not in judged[0] and "no single" not in judged[1], judged
    assert judged[4] != sources[4] and not verbatim_flags(sources[4:], judged[4:], min_chars=30).any()
    plain_fluency = fluency(sources, plain).scores[FLUENCY].to_numpy()
    judged_fluency = fluency(sources, judged).scores[FLUENCY].to_numpy()
    assert judged_fluency.mean() > plain_fluency.mean() + 0.3, (plain_fluency, judged_fluency)
    assert (judged_fluency >= -1.0).all(), list(zip(judged, judged_fluency, strict=True))


def test_reword_edits_only_where_the_text_still_holds_a_run_of_its_source():
    """Given its source, reword breaks the runs the text still shares with it and leaves the rest as it is: a
    rewrite that already changed most of a sentence is not reworded again, and a text sharing no run is returned
    unchanged."""
    from tasks.metrics.verbatim import verbatim_flags
    from tasks.protect.reword import reword, runs_of_source

    source = "The president submitted this plan to the Congress, and the members examined it for many long weeks."
    text = "Our leader handed a proposal to lawmakers, and the members examined it for many long weeks."
    runs = runs_of_source(text, source, 30)
    assert len(runs) == 1 and text[runs[0][0]:runs[0][1]] == "s, and the members examined it for many long weeks"
    out = reword([text], min_chars=30, senses=3, sources=[source])[0]
    assert not verbatim_flags([source], [out], min_chars=30).any(), out
    assert out.startswith("Our leader handed a proposal to lawmakers,"), out  # the part already rewritten stays
    unrelated = "Lawmakers argued over the proposal for weeks."
    assert runs_of_source(unrelated, source, 30) == [] and reword([unrelated], min_chars=30, sources=[source]) == [unrelated]
    assert runs_of_source("Thanks.", "Thanks.", 30) == [(0, 7)]  # a short copy must change somewhere
    spaced = "Our leader said: THE president  submitted this plan\nto the Congress."  # as the verbatim check reads it
    assert runs_of_source(spaced, source, 30) == [(spaced.index("THE"), len(spaced) - 1)]
    assert runs_of_source("thanks. ", "Thanks.", 30) == [(0, 8)]


def test_span_similarity_tells_swaps_that_keep_the_sense_from_those_that_lose_it():
    """On 125 single-word swaps from the conventions demo's releases, labelled by hand (does the new word keep the
    sense of the old one in its sentence?), the contextual similarity of the two words ranks them as the labels do,
    and the reword gate at ``SENSE_FLOOR`` keeps mostly good swaps and most of them (scikit-learn's AUC)."""
    import json
    from pathlib import Path

    from sklearn.metrics import roc_auc_score

    from tasks.metrics.meaning import span_similarity
    from tasks.protect.reword import SENSE_FLOOR

    rows = [json.loads(line) for line in (Path(__file__).parent / "data" / "reword_swaps.jsonl").open()]
    pairs = [(r["text"], (r["start"], r["end"]), r["text"][:r["start"]] + r["replacement"] + r["text"][r["end"]:],
              (r["start"], r["start"] + len(r["replacement"]))) for r in rows]
    keeps = np.array([r["keeps_sense"] for r in rows])
    similarity = span_similarity(pairs)
    assert len(rows) >= 100 and not np.isnan(similarity).any()
    assert roc_auc_score(keeps, similarity) >= 0.72
    kept = similarity >= SENSE_FLOOR
    assert keeps[kept].mean() >= keeps.mean() + 0.12, (keeps[kept].mean(), keeps.mean())  # 0.72 against 0.54
    assert keeps[kept].sum() >= 0.6 * keeps.sum()
    same = span_similarity([("He ran home.", (3, 6), "He ran home.", (3, 6))])
    assert same[0] == pytest.approx(1.0, abs=1e-5)


def test_the_light_verbs_kept_their_sense_less_often_than_the_other_labelled_swaps():
    """Why reword leaves the commonest verbs alone: of the hand-labelled swaps, 3 of the 7 of those verbs kept the
    sense, against 65 of the other 118."""
    import json
    from pathlib import Path

    from tasks.protect.lexicon import load_pipeline
    from tasks.protect.reword import _LIGHT_VERBS

    nlp = load_pipeline()
    rows = [json.loads(line) for line in (Path(__file__).parent / "data" / "reword_swaps.jsonl").open()]
    light = []
    for r in rows:
        span = nlp(r["text"]).char_span(r["start"], r["end"])
        light.append(span is not None and span.root.pos_ == "VERB" and span.root.lemma_.lower() in _LIGHT_VERBS)
    keeps, light = np.array([r["keeps_sense"] for r in rows]), np.array(light)
    assert (keeps[light].sum(), light.sum()) == (3, 7) and (keeps[~light].sum(), (~light).sum()) == (65, 118)


def test_a_replacement_is_offered_only_in_a_sense_a_reader_takes_it_in():
    """Why a synonym must name the shared sense among its own two commonest ("sleeve" -> "arm" reads as the body
    part): of the hand-labelled swaps that pass the sense check, 36 of the 46 it keeps kept the sense, against 47 of
    65 without it."""
    import json
    from pathlib import Path

    from tasks.metrics.meaning import span_similarity
    from tasks.protect.lexicon import load_pipeline, load_wordnet
    from tasks.protect.reword import _POS, SENSE_FLOOR, read_in, synonyms

    assert "arm" not in synonyms("sleeve", "n", 3) and "alter" in synonyms("change", "v", 3)
    nlp, wordnet = load_pipeline(), load_wordnet()
    rows = [json.loads(line) for line in (Path(__file__).parent / "data" / "reword_swaps.jsonl").open()]
    offered = []
    for r in rows:
        span = nlp(r["text"]).char_span(r["start"], r["end"])
        pos = _POS.get(span.root.pos_) if span is not None else None
        if pos is None or not r["replacement"]:
            offered.append(True)
            continue
        word = nlp(r["replacement"])[0].lemma_.lower()
        shared = set(wordnet.synsets(span.root.lemma_.lower(), pos)[:3]) & set(wordnet.synsets(word, pos))
        offered.append(not shared or any(read_in(word, sense) for sense in shared))
    keeps, offered = np.array([r["keeps_sense"] for r in rows]), np.array(offered)
    pairs = [(r["text"], (r["start"], r["end"]), r["text"][:r["start"]] + r["replacement"] + r["text"][r["end"]:],
              (r["start"], r["start"] + len(r["replacement"]))) for r in rows]
    close = np.asarray(span_similarity(pairs)) >= SENSE_FLOOR
    assert (keeps[close & offered].sum(), (close & offered).sum()) == (36, 46)
    assert (keeps[close].sum(), close.sum()) == (47, 65)


def test_reword_keeps_only_swaps_that_keep_the_sense_in_their_sentence():
    """The LM judges how a swap reads, not what it means: it takes "guy" -> "cat" and "learned" -> "heard". With
    the sense check (the swapped word's contextual vector against the old one's), those swaps are not made;
    the edits that keep the sense still are (a run no such edit breaks stays, for the loop's next move)."""
    from tasks.metrics.fluency import slor_totals
    from tasks.metrics.meaning import span_similarity
    from tasks.protect.reword import reword

    sources = ["They even opposed our right to vote.", "— now, maybe just maybe that's OK for a guy who hunts varmints.",
               "So what has he learned from them?"]
    fluent = reword(sources, min_chars=30, senses=3, judge=slor_totals)
    assert " cat " in fluent[1] and "heard" in fluent[2], fluent
    kept = reword(sources, min_chars=30, senses=3, judge=slor_totals, sense=span_similarity)
    assert "opposed" in kept[0] and " guy " in kept[1] and "learned" in kept[2], kept
    assert kept[1] != sources[1]  # the edits that keep the sense are still made ("that's" -> "that is")


def test_a_contraction_is_spelt_out_only_where_its_word_is_known():
    """"'s" before a participle may be "is" or "has" ("it's done", "he's lived"): it is left as it is; before
    "been" it is "has"; before anything else "is"."""
    from tasks.protect.lexicon import load_pipeline
    from tasks.protect.reword import edit_options

    nlp = load_pipeline()
    assert 1 not in edit_options(nlp("Because he's lived it."))
    assert edit_options(nlp("It's been a year."))[0].options == ("It has",)
    assert edit_options(nlp("He's going home."))[0].options == ("He is",)


def test_a_verb_is_contracted_only_before_what_it_governs_and_a_count_noun_takes_no_gerund():
    """A subject and its verb are contracted where the verb's complement or main verb follows ("we are proud",
    "I have graduated"), not where the verb ends its clause ("not because we say we are, but ..." cannot read "we're")
    nor for main-verb "have" ("I've a job"); a noun is not replaced by a gerund ("a dream" -> not "a dreaming"),
    nor one that makes a term with the noun after it ("a job crisis" -> not "an occupation crisis")."""
    from tasks.protect.lexicon import load_pipeline
    from tasks.protect.reword import edit_options

    nlp = load_pipeline()
    stranded = nlp("We are exceptional not because we say we are but because we do exceptional things.")
    assert [stranded[i].text for i, e in edit_options(stranded, 3).items() if "'re" in e.options[0]] == ["We"]
    job = nlp("Now that I have graduated, I have a job.")
    assert [(i, e.options) for i, e in edit_options(job, 3).items() if "'ve" in e.options[0]] == [(2, ("I've",))]
    dream = nlp("I came here with a dream in my heart.")
    assert not any(o.endswith("ing") for e in edit_options(dream, 3, broader=True).values() for o in e.options)
    assert "dream" in [dream[i].text for i in edit_options(dream, 3, broader=True)]  # its other synonyms stay
    compound = nlp("It ends with a job crisis.")  # a noun that makes a term with the next: not "occupation crisis"
    assert "job" not in {compound[i].text for i in edit_options(compound, 3, broader=True)}


def test_reword_offers_only_forms_english_uses_and_that_only_before_a_finite_clause():
    """A synonym's inflected form must be in use ("schools" -> not "schoolings"); a phrasal verb keeps both its
    words ("take away" -> not "take off"; the particle may move: "take our rights away"); "that" opens a tensed
    clause ("we know (that) he cares"), not a bare infinitive ("help others achieve it" -> not "help that others");
    a bare noun before "of" makes an idiom ("be part of" -> not "be piece of"), a noun before "of" and a name
    is how the name is said ("the great state of Michigan" -> not "province"), and a light verb's object picks its
    verb ("make a choice" -> not "make an option"), and a part of a hyphenated word stays ("middle-class" -> not
    "middle-grade"); the commonest verbs and "always" stay."""
    from tasks.protect.lexicon import load_pipeline
    from tasks.protect.reword import edit_options

    nlp = load_pipeline()
    schools = nlp("Our schools are where our children grow.")
    assert all("schoolings" not in e.options for e in edit_options(schools, 3, broader=True).values())
    helping = nlp("And he is fighting to help others achieve it.")
    assert not any(o.startswith("that ") for e in edit_options(helping, 3, broader=True).values() for o in e.options)
    phrasal = nlp("They will take away our rights, and we gave up on them.")
    options = edit_options(phrasal, 3, broader=True)
    assert not {"take", "gave", "up"} & {phrasal[i].text for i in options}
    assert options[3].options == ("our rights away",)  # the particle may move past its object, not change
    part = nlp("We deserve to be part of the dream, and a part of the plan failed.")  # "be part of" is an idiom
    assert [part[i].text for i, e in edit_options(part, 3, broader=True).items() if "portion" in e.options] == ["part"]
    assert 4 not in edit_options(part, 3, broader=True)
    light = nlp("It was something I had to do, something I always wanted to do.")  # "got to", "ever needed"
    assert not {"had", "always", "wanted"} & {light[i].text for i in edit_options(light, 3, broader=True)}
    knowing = nlp("We know that he cares.")
    assert edit_options(knowing, 3, broader=True)[2].options[-1] == "he"  # "that" dropped where it opens one
    support = nlp("It is our job to make a new choice, and we have work to do.")  # a light verb's noun stays
    assert not {"choice", "work"} & {support[i].text for i in edit_options(support, 3, broader=True)}
    hyphen = nlp("Middle-class families need a well-known plan.")  # a part of a hyphenated word stays
    assert not {"Middle", "class", "well", "known"} & {hyphen[i].text for i in edit_options(hyphen, 3, broader=True)}
    choice = nlp("We need a new choice.")  # the noun of another verb may change
    assert "choice" in {choice[i].text for i in edit_options(choice, 3, broader=True)}
    speech = nlp("We said no, we come in peace.")  # the clause opens on "no": speech, which takes no "that"
    assert not any(o.startswith("that ") for e in edit_options(speech, 3, broader=True).values() for o in e.options)
    named = nlp("I'm from the great state of Michigan, and the state pays.")  # how the name is said
    assert [i for i in edit_options(named, 3, broader=True) if named[i].lower_ == "state"] == [11]  # not 5


@pytest.mark.parametrize(("text", "alternative"), [
    ("Romney and his partners shut our plant down and left.", "Romney and his partners shut down our plant and left."),
    ("They will take away our rights.", "They will take our rights away."),
    ("We could never pay for all the care she needs.", "We could never pay for all the care that she needs."),
    ("We prioritized those things that we value.", "We prioritized those things we value."),
    ("I watched him as he helped make America stronger.", "I watched him as he helped to make America stronger."),
    ("He is fighting to help others achieve it.", "He is fighting to help others to achieve it."),
    ("We thank the soldiers returning from Iraq and Afghanistan.",
     "We thank the soldiers returning from Afghanistan and Iraq."),
    ("Some officers asked us whether we wanted to press charges.",
     "Some officers asked us if we wanted to press charges."),
    ("We must help each other in order to win.", "We must help one another in order to win."),
    ("We must help each other in order to win.", "We must help each other to win."),
    ("A lot of small business owners feel the same way.", "Lots of small business owners feel the same way."),
    ("Lots of owners help one another.", "A lot of owners help one another."),
    ("Lots of owners help one another.", "Lots of owners help each other."),
    ("All of the men served.", "All the men served."),
    ("We know he cares.", "We know that he cares."),
    ("Now, we must act. Well, you know, it is late.", "We must act. Well, you know, it is late."),
    ("You know, we must act.", "We must act."),
    ("I am so proud of you.", "I am proud of you."),
    ("This is about more than just a piece of paper.", "This is about more than a piece of paper."),
    ("We really want to win this.", "We want to win this."),
    ("Right here in Ohio we make jeans.", "Here in Ohio we make jeans."),
    ("It includes both painful chapters and hopeful ones.", "It includes painful chapters and hopeful ones."),
])
def test_an_alternation_says_the_same_with_the_same_words(text, alternative):
    """Each alternation keeps the sentence's words, give or take a function word, and its sense."""
    from tasks.protect.alternations import alternations
    from tasks.protect.lexicon import load_pipeline
    from tasks.protect.reword import _render

    doc = load_pipeline()(text)
    made = {_render(doc, {i: found}) for i, each in alternations(doc).items() for found in each}
    assert alternative in made, made


def test_no_alternation_where_it_would_change_what_is_said():
    """No "that" before a wh-clause or a bare infinitive, no "if" for "whether ... or", no order swapped across a
    determiner ("the men and women" -> not "women and the men") or with its "both" or of a pair said in one order
    ("ladies and gentlemen", "bread and butter"), no particle moved past a pronoun
    it follows, no emphasis left out after a negation ("not just the rich") or where "so" opens a clause."""
    from tasks.protect.alternations import alternations
    from tasks.protect.lexicon import load_pipeline
    from tasks.protect.reword import _render

    nlp = load_pipeline()
    for text in ["He understands what it takes.", "Ask whether it rains or shines.", "They thank the men and women.",
                 "They gave it up.", "All of us voted.", "Not just the rich pay.", "It is not very good.",
                 "So we went home.", "Thank you, ladies and gentlemen.", "It is our bread and butter."]:
        doc = nlp(text)
        assert {_render(doc, {i: f}) for i, each in alternations(doc).items() for f in each} == set(), text
    both = nlp("It includes both painful chapters and hopeful ones.")
    assert not any("and both" in _render(both, {i: f}) for i, each in alternations(both).items() for f in each)
    much = nlp("We have so much potential and so much to be proud of.")  # conjuncts of another kind, with adverbs
    assert not any("and so much potential" in _render(much, {i: f}) for i, each in alternations(much).items()
                   for f in each)


def test_a_swapped_word_gets_its_article_and_an_ordinal_is_written_in_words():
    """"an honor" -> "an honour", not "a honour"; "a duty" -> "an obligation"; "the 29th month" -> "the
    twenty-ninth month", while "the 4th" with a symbol on it stays."""
    from tasks.protect.lexicon import indefinite_article, load_pipeline
    from tasks.protect.reword import _render, edit_options

    nlp = load_pipeline()
    doc = nlp("It was an honor and a duty.")
    assert _render(doc, {3: (4, "honour"), 6: (7, "obligation")}) == "It was an honour and an obligation."
    assert [indefinite_article(w) for w in ("hour", "union", "idea", "house", "European")] == ["an", "a", "an", "a", "a"]
    months = nlp("It was the 29th consecutive month and the 1st of many.")
    options = {months[i].text: e.options for i, e in edit_options(months).items()}
    assert options["29th"] == ("twenty-ninth",) and options["1st"] == ("first",), options


def test_a_split_that_leaves_a_phrase_standing_alone_is_told_from_one_that_makes_two_sentences():
    """stymask's split at "and" between two noun phrases left "His cronies in Congress being all too willing ..." as
    a sentence (released by the demo): a candidate with more sentences than its source and more of them without a
    tensed verb is refused; a split into two clauses, and a reply that was verbless already, are not."""
    from tasks.protect.reading import splits_off

    sources = ["We are tired of a president and his cronies in Congress being too willing to kick it.",
               "We all know that education leads to opportunity and that education begins with a teacher.",
               "Thank you.", "Next, he gave us purpose."]
    candidates = ["We are tired of a president. His cronies in Congress being too willing to kick it.",
                  "We all know that teaching leads to opportunity. That teaching begins with a teacher.",
                  "Thanks.", "Next, he gave us purpose. Yes."]
    parses: dict = {}
    assert splits_off(sources, candidates, parses).tolist() == [True, False, False, True]
    assert set(parses) == {sources[0], sources[1], sources[3], candidates[0], candidates[1], candidates[3]}  # kept
    assert splits_off(sources, candidates, parses).tolist() == [True, False, False, True]  # read back, same verdict


def test_no_word_of_a_fixed_expression_is_swapped():
    """A synonym for one word of an expression WordNet lists breaks it: the demo released "become a blind eye",
    "wellness care" and "named upon". Its words are not swapped; the words around it still are."""
    from tasks.protect.lexicon import fixed_expressions, load_pipeline
    from tasks.protect.reword import edit_options

    doc = load_pipeline()("They turned a blind eye to the cost of health care for hardworking families.")
    fixed = {doc[i].text for i in fixed_expressions(doc)}
    assert {"turned", "blind", "eye", "health", "care"} <= fixed, fixed
    swapped = {doc[i].text for i, e in edit_options(doc, 3, broader=True).items() if e.swaps}
    assert not swapped & {"turned", "blind", "eye", "health", "care"} and swapped, swapped
    called = load_pipeline()("Just as they were called upon, we are being called upon.")  # WordNet: "call on"
    assert not any(e.swaps for i, e in edit_options(called, 3, broader=True).items() if called[i].lower_ == "called")
