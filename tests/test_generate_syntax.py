"""Syntax-guided strategies: distances (Zhang-Shasha, POS Levenshtein), rule-based transforms on real
spaCy parses, SynTr's per-author consistency, SynSim/SynDiff/SynOrig selection (real apertium when
installed), the LLM candidate plumbing (a scripted backend), and SynTr's speed."""

from __future__ import annotations

import functools
import random
import shutil
import time
from collections.abc import Sequence

import pandas as pd
import pytest

from tasks.corpus.schema import STATUS_FAILED, STATUS_OK
from tasks.errors import ConfigError
from tasks.generate.base import build_strategy, generate_synthetic
from tasks.generate.syntax import (
    IRREGULAR,
    Candidate,
    SynDiff,
    SynParams,
    SynSim,
    apply_transforms,
    author_plan,
    back_pp,
    dependency_tree,
    front_pp,
    levenshtein,
    load_parser,
    pos_distance,
    regular_participle,
    select_candidate,
    syntactic_distance,
    third_singular,
    to_active,
    to_passive,
    tree_distance,
    tree_edit_distance,
    tree_size,
)
from tasks.models.llm import ChatRequest, ChatResult, LLMBackend


def T(label: str, *kids):
    return (label, tuple(kids))


@pytest.fixture(scope="module")
def nlp():
    return load_parser()


def corpus(texts: list[str], authors: list[str] | None = None) -> pd.DataFrame:
    n = len(texts)
    return pd.DataFrame({
        "doc_id": [f"d{i}" for i in range(n)], "text": texts,
        "author_id": authors if authors is not None else [f"a{i % 2}" for i in range(n)],
        "group_id": [f"g{i % 3}" for i in range(n)], "position": pd.array(list(range(n)), dtype="Int64"),
        "split": ["train"] * n, "label": ["x"] * n,
    })


# --- distances ---------------------------------------------------------------------------------------------


def _forest_distance_reference(f1: tuple, f2: tuple) -> int:
    """The recursive definition of ordered forest edit distance (exponential; tiny trees only)."""

    @functools.cache
    def d(a: tuple, b: tuple) -> int:
        if not a and not b:
            return 0
        if not a:
            return sum(tree_size(t) for t in b)
        if not b:
            return sum(tree_size(t) for t in a)
        v, w = a[-1], b[-1]
        return min(d(a[:-1] + v[1], b) + 1, d(a, b[:-1] + w[1]) + 1,
                   d(a[:-1], b[:-1]) + d(v[1], w[1]) + (v[0] != w[0]))

    return d(f1, f2)


def _random_tree(rng: random.Random, n: int, labels: str = "abc"):
    nodes = [[rng.choice(labels), []]]
    for _ in range(n - 1):
        child = [rng.choice(labels), []]
        rng.choice(nodes)[1].append(child)
        nodes.append(child)

    def freeze(node):
        return (node[0], tuple(freeze(c) for c in node[1]))

    return freeze(nodes[0])


@pytest.mark.parametrize(("a", "b", "expected"), [
    (T("a"), T("a"), 0),
    (T("a"), T("b"), 1),
    (T("a", T("b")), T("a"), 1),  # delete a leaf
    (T("a"), T("a", T("b"), T("c")), 2),  # insert two leaves
    (T("a", T("b"), T("c")), T("a", T("c"), T("b")), 2),  # ordered trees: two relabels, not a swap
    (T("a", T("b", T("c"))), T("a", T("b"), T("c")), 2),  # chain -> siblings: delete + insert
    (T("a", T("b", T("c"), T("d"))), T("a", T("c"), T("d")), 1),  # delete inner node b: kids move up
    # Zhang & Shasha (1989)'s example: f(d(a c(b)) e) -> f(c(d(a b)) e) costs 2.
    (T("f", T("d", T("a"), T("c", T("b"))), T("e")), T("f", T("c", T("d", T("a"), T("b"))), T("e")), 2),
])
def test_tree_edit_distance_hand_computed(a, b, expected):
    assert tree_edit_distance(a, b) == expected
    assert tree_edit_distance(b, a) == expected


def test_tree_edit_distance_matches_recursive_reference():
    rng = random.Random(7)
    for _ in range(150):
        a, b = _random_tree(rng, rng.randint(1, 6)), _random_tree(rng, rng.randint(1, 6))
        assert tree_edit_distance(a, b) == _forest_distance_reference((a,), (b,)), (a, b)


def test_levenshtein_matches_reference_dp():
    def ref(a, b):
        dp = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i in range(len(a) + 1):
            for j in range(len(b) + 1):
                if i == 0 or j == 0:
                    dp[i][j] = i + j
                else:
                    dp[i][j] = min(dp[i - 1][j] + 1, dp[i][j - 1] + 1, dp[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
        return dp[-1][-1]

    rng = random.Random(3)
    tags = ["NOUN", "VERB", "DET", "ADP"]
    for _ in range(200):
        a = [rng.choice(tags) for _ in range(rng.randint(0, 7))]
        b = [rng.choice(tags) for _ in range(rng.randint(0, 7))]
        assert levenshtein(a, b) == ref(a, b)
    assert levenshtein("kitten", "sitting") == 3


def test_parsed_distances_are_normalised(nlp):
    active, passive, swapped = nlp.pipe(["The dog chased the cat.", "The cat was chased by the dog.",
                                         "The cat chased the dog."])
    assert tree_distance(active, swapped) == 0.0 and pos_distance(active, swapped) == 0.0
    ted = tree_edit_distance(dependency_tree(active), dependency_tree(passive))
    assert tree_distance(active, passive) == pytest.approx(ted / (len(active) + len(passive)))
    assert 0.0 < tree_distance(active, passive) <= 1.0
    assert pos_distance(active, passive) == pytest.approx(
        levenshtein([t.pos_ for t in active], [t.pos_ for t in passive]) / len(passive))
    assert syntactic_distance(active, passive) == tree_distance(active, passive)
    assert syntactic_distance(active, passive, "pos") == pos_distance(active, passive)


# --- transforms --------------------------------------------------------------------------------------------


def test_verb_morphology():
    assert [regular_participle(w) for w in ("approve", "carry", "stop", "admit", "visit", "play")] == [
        "approved", "carried", "stopped", "admitted", "visited", "played"]
    assert [third_singular(w) for w in ("support", "watch", "carry", "have", "go", "play")] == [
        "supports", "watches", "carries", "has", "goes", "plays"]
    assert IRREGULAR["write"] == ("wrote", "written")


@pytest.mark.parametrize(("transform", "source", "expected"), [
    (to_passive, "The committee approved the plan.", "The plan was approved by the committee."),
    (to_passive, "She writes the letters.", "The letters are written by her."),
    (to_passive, "They write letters every day.", "Letters are written by them every day."),
    (to_passive, "The senator quickly approved the new budget.", "The new budget was quickly approved by the senator."),
    (to_passive, "Obama signed the law in 2010.", "The law was signed by Obama in 2010."),
    (to_passive, "Voters carry the burden.", "The burden is carried by voters."),
    (to_active, "The plan was approved by the committee.", "The committee approved the plan."),
    (to_active, "The letters are written by her.", "She writes the letters."),
    (to_active, "The plans were rejected by the voters.", "The voters rejected the plans."),
    (to_active, "The bill is supported by the senator.", "The senator supports the bill."),
    (front_pp, "I met him in Paris.", "In Paris, I met him."),
    (front_pp, "The students studied the law at Harvard.", "At Harvard, the students studied the law."),
    (back_pp, "In Paris, I met him.", "I met him in Paris."),
    (back_pp, "On Monday we will vote on the bill.", "We will vote on the bill on Monday."),
    (to_passive, "I love you. The dog chased the cat in the park.",
     "You are loved by me. The cat was chased by the dog in the park."),
])
def test_transforms_exact(nlp, transform, source, expected):
    assert transform(nlp(source)) == expected


@pytest.mark.parametrize(("transform", "source"), [
    (to_passive, "The government has raised taxes."),  # auxiliary: left alone
    (to_passive, "He gave the book to Mary."),  # dative
    (to_passive, "I think that the senator supports the bill."),  # clausal complement
    (to_passive, "Did the committee approve the plan?"),  # question
    (to_passive, "We need more jobs."),  # stative verb
    (to_passive, "The late Stephen Covey writes about two kinds of people."),  # "about" parsed as "roughly"
    (to_active, "The plan was approved."),  # no agent to promote
    (to_active, "The plan has been approved by the committee."),  # another auxiliary
    (front_pp, "I met him."),
    (front_pp, "In Paris, I met him in a cafe."),  # already fronted
    (back_pp, "I met him in Paris."),
])
def test_transforms_return_none_when_not_applicable(nlp, transform, source):
    assert transform(nlp(source)) is None


def test_apply_transforms_composes_with_reparse(nlp):
    [(text, applied)] = apply_transforms(nlp, ["The committee approved the plan in March."],
                                         [["to_passive", "front_pp"]])
    assert text == "In March, the plan was approved by the committee."
    assert applied == ["to_passive", "front_pp"]
    [(same, none)] = apply_transforms(nlp, ["Yes."], [["to_active", "back_pp"]])
    assert same == "Yes." and none == []


# --- SynTr --------------------------------------------------------------------------------------------------


def test_syntr_is_consistent_within_an_author_and_deterministic():
    texts = ["The committee approved the plan in March.", "The dog chased the cat in the park.",
             "The plans were rejected by the voters.", "In Paris, I met him.", "Yes, absolutely."]
    authors = ["ann", "ann", "ann", "bob", "bob"]
    strategy = build_strategy("syntr", {"on_no_transform": "keep"})
    plans = strategy.plans(corpus(texts, authors), seed=5)
    assert plans[0] == plans[1] == plans[2] == author_plan("ann", 5)
    assert plans[3] == plans[4] == author_plan("bob", 5)
    assert len({tuple(author_plan(f"user{i}", 5)) for i in range(20)}) > 1  # authors differ
    first = generate_synthetic(strategy, corpus(texts, authors), seed=5)
    again = generate_synthetic(build_strategy("syntr", {"on_no_transform": "keep"}), corpus(texts, authors), seed=5)
    assert first["text"].tolist() == again["text"].tolist()
    assert (first["status"] == STATUS_OK).all()
    assert first["text"][4] == "Yes, absolutely."  # nothing applies: kept, still ok, flagged
    assert first["unchanged"][4] == True  # noqa: E712
    transformed = apply_transforms(load_parser(), texts, plans)
    assert first["text"].tolist() == [t for t, _ in transformed]
    # default: a text no transform applies to is rewritten as SynOrig rewrites it (its own parse as template)
    default = generate_synthetic(build_strategy("syntr", {}), corpus(texts, authors), seed=5)
    untouched = [i for i, (_, applied) in enumerate(transformed) if not applied]
    assert 4 in untouched
    synorig = generate_synthetic(build_strategy("synorig", {}), corpus([texts[i] for i in untouched]), seed=5)
    for j, i in enumerate(untouched):
        assert default["text"][i] == synorig["text"][j]
    for i, (text, applied) in enumerate(transformed):
        if applied:
            assert default["text"][i] == text
    assert default["unchanged"].sum() <= first["unchanged"].sum()


def test_syntr_same_author_gets_same_transform():
    """Two authors with opposite voice plans: each one's texts all move the same way."""
    seed = 0
    voice = {a: author_plan(a, seed, ["voice"])[0] for a in (f"u{i}" for i in range(40))}
    passiviser = next(a for a, v in voice.items() if v == "to_passive")
    activiser = next(a for a, v in voice.items() if v == "to_active")
    texts = ["The committee approved the plan.", "The dog chased the cat.",
             "The plan was approved by the committee.", "The cat was chased by the dog."]
    batch = corpus(texts, [passiviser, passiviser, activiser, activiser])
    out = generate_synthetic(build_strategy("syntr", {"families": ["voice"]}), batch, seed=seed)
    assert out["text"].tolist() == ["The plan was approved by the committee.", "The cat was chased by the dog.",
                                    "The committee approved the plan.", "The dog chased the cat."]


def test_syntr_params_are_strict():
    with pytest.raises(ConfigError, match=r"strategies\.syntr\.k"):
        build_strategy("syntr", {"k": 3})
    with pytest.raises(ConfigError, match=r"strategies\.synsim\.mode"):
        build_strategy("synsim", {"mode": "syntr"})
    with pytest.raises(ConfigError, match=r"strategies\.syndiff\.distance"):
        build_strategy("syndiff", {"distance": "cosine"})


def _debate_sentences(n: int) -> list[str]:
    rng = random.Random(11)
    subjects = ["The senator", "My opponent", "The president", "We", "They", "The American people", "I"]
    verbs = ["supported", "rejected", "approved", "signs", "opposes", "cut", "raised", "built"]
    objects = ["the bill", "taxes", "the wall", "this deal", "the plan", "jobs", "our schools"]
    pps = ["in 2008", "in Ohio", "on day one", "at the convention", "for our children", "after the war"]
    other = ["Well, let me tell you something.", "That is not true.", "We need to bring back jobs.",
             "Believe me, it is a disaster.", "Thank you very much, Lester.",
             "The deal was negotiated by her husband.", "In this country, we respect the law."]
    out = []
    for _ in range(n):
        if rng.random() < 0.3:
            out.append(rng.choice(other))
        else:
            pp = f" {rng.choice(pps)}" if rng.random() < 0.6 else ""
            out.append(f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)}{pp}.")
    return out


def test_syntr_speed_on_debate_sentences():
    texts = _debate_sentences(500)
    strategy = build_strategy("syntr", {"on_no_transform": "keep"})  # the transforms' own speed
    batch = corpus(texts, [f"a{i % 25}" for i in range(len(texts))])
    start = time.perf_counter()
    out = generate_synthetic(strategy, batch, seed=1)
    rate = len(texts) / (time.perf_counter() - start)
    changed = (out["text"] != batch["text"]).mean()
    print(f"syntr: {rate:.0f} texts/s on {len(texts)} debate-like sentences, {changed:.0%} changed")
    assert len(out) == len(texts) and (out["status"] == STATUS_OK).all()
    assert changed > 0.3
    assert rate > 20


# --- SynSim / SynDiff / SynOrig -----------------------------------------------------------------------------

SOURCES = ["The committee approved the plan in March.", "In my opinion, we should cut taxes because people are very tired.",
           "The plans were rejected by the voters.", "Maybe you are right."]


def test_select_candidate_extremes():
    cands = [Candidate("a", "x", 0.3, 0.1), Candidate("b", "y", 0.1, 0.2), Candidate("c", "z", 0.1, 0.9),
             Candidate("d", "w", 0.7, 0.0)]
    assert select_candidate(cands, "synsim") == 1
    assert select_candidate(cands, "syndiff") == 3
    assert select_candidate(cands, "synorig") == 2  # tie on distance: the one that differs most in words
    assert select_candidate([], "synsim") is None


@pytest.mark.parametrize("mode", ["synsim", "syndiff"])
def test_synsim_syndiff_pick_the_extreme_candidate(mode):
    strategy = build_strategy(mode, {"k": 4})
    all_cands = strategy.candidates(SOURCES, seed=3)
    out = generate_synthetic(strategy, corpus(SOURCES), seed=3)
    assert len(out) == len(SOURCES) and (out["status"] == STATUS_OK).all()
    for source, cands, chosen in zip(SOURCES, all_cands, out["text"], strict=True):
        assert 0 < len(cands) <= 4 and all(c.text != source for c in cands)
        assert len({c.text for c in cands}) == len(cands)
        pick = next(c for c in cands if c.text == chosen)
        if mode == "synsim":
            assert all(pick.distance <= c.distance for c in cands)
        else:
            assert all(pick.distance >= c.distance for c in cands)
    # transforms are in the pool: the first source has voice and PP variants
    assert {"to_passive", "front_pp"} <= {c.origin for c in all_cands[0]} | {
        c.origin for c in build_strategy(mode, {"k": 50}).candidates(SOURCES[:1], seed=3)[0]}


def test_synorig_uses_only_lexical_candidates():
    strategy = build_strategy("synorig", {"k": 8})
    all_cands = strategy.candidates(SOURCES, seed=0)
    for cands in all_cands:
        assert all(c.origin in ("lexical", "bt") for c in cands)
    out = generate_synthetic(strategy, corpus(SOURCES), seed=0)
    assert out["text"][1] != SOURCES[1]  # a synonym swap keeps the parse (distance 0)
    if shutil.which("apertium") is None:
        return
    # no synonym; the spa round trip gives the text back verbatim, so with that pivot alone it is kept
    # (flagged unchanged), while the default close and far pivots give it a rewrite
    assert out["text"][2] != SOURCES[2] and out["unchanged"][2] == False  # noqa: E712
    spa_only = generate_synthetic(build_strategy("synorig", {"k": 8, "pivots": ["spa"]}), corpus(SOURCES), seed=0)
    assert spa_only["text"][2] == SOURCES[2] and spa_only["unchanged"][2] == True  # noqa: E712


@pytest.mark.skipif(shutil.which("apertium") is None, reason="apertium is not installed")
def test_rules_generator_adds_backtranslations():
    cands = build_strategy("synsim", {"k": 50}).candidates(["Maybe you are right."], seed=0)[0]
    assert any(c.origin == "bt" for c in cands)


def test_generate_keeps_one_row_per_input_and_fails_bad_rows():
    batch = corpus(["The dog chased the cat.", "ok", "Yes."])
    batch.loc[1, "text"] = None
    out = generate_synthetic(build_strategy("synsim", {"k": 3, "backtranslate": False}), batch, seed=0)
    assert out["status"].tolist() == [STATUS_OK, STATUS_FAILED, STATUS_OK]
    assert out["text"][2] == "Yes."  # no candidate: kept, and flagged
    assert out["unchanged"][2] == True and out["unchanged"][0] == False and pd.isna(out["unchanged"][1])  # noqa: E712
    out = generate_synthetic(build_strategy("synsim", {"backtranslate": False, "on_no_candidate": "fail"}),
                             corpus(["Yes."]), seed=0)
    assert out["status"][0] == STATUS_FAILED and "no candidate" in out["reason"][0]


class ScriptedLLM(LLMBackend):
    """A test double for the model: answers each request with fixed completions."""

    model = "scripted"

    def __init__(self, answers: dict[str, list[str] | None]) -> None:
        self.answers = answers
        self.requests: list[ChatRequest] = []

    def _complete_uncached(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        self.requests.extend(requests)
        out = []
        for r in requests:
            texts = next((v for k, v in self.answers.items() if k in r.messages[-1]["content"]), None)
            out.append(ChatResult(texts=texts) if texts is not None else ChatResult(texts=None, error="boom"))
        return out


def test_llm_generator_plumbing():
    llm = ScriptedLLM({"The dog chased the cat.": ["The cat was chased by the dog.", "The hound chased the cat.",
                                                   "The dog chased the cat."],
                       "Fails.": None})
    params = SynParams(generator="llm", k=3)
    strategy = SynSim(params, llm=llm)
    out = generate_synthetic(strategy, corpus(["The dog chased the cat.", "Fails."]), seed=4)
    assert out["text"].tolist() == ["The hound chased the cat.", "Fails."]  # closest syntax; failure -> kept
    assert [r.n for r in llm.requests] == [3, 3] and llm.requests[0].seed == 4
    diff = generate_synthetic(SynDiff(params, llm=llm), corpus(["The dog chased the cat."]), seed=4)
    assert diff["strategy"][0] == "syndiff" and diff["text"][0] == "The cat was chased by the dog."
