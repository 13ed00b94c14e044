"""Zero-shot LLM profiling attack (seed 000 §5.2.2, A.5): prompt, parser, stratified sampling, and the attack
end to end with a scripted test double (exact arithmetic) and with the real in-process SmolLM2 (slow)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pandas as pd
import pytest

from tasks.models.llm import ChatRequest, ChatResult, LLMBackend, TransformersBackend
from tasks.models.registry import resolve_model
from tasks.privacy.llm_profiling import (
    DEFAULT_SYSTEM,
    POSTS_TEMPLATE,
    SWDA_EDUCATION_NOTE,
    Guess,
    attribute_values,
    build_prompt,
    build_transcript,
    llm_profile,
    match_value,
    parse_answer,
    stratified_dialogues,
    stratify_dialogues,
)

ATTRS = {"gender": ["female", "male"], "education": ["college", "less than college", "less than highschool",
                                                      "more than college"]}


def dialogue(group: str, speakers: dict[str, tuple[str, str]], turns: Sequence[tuple[str, str]],
             start: int = 0) -> list[dict]:
    """Rows of one dialogue: speakers author -> (gender, education); turns (author, text) in order."""
    return [{"doc_id": f"{group}-{i}", "text": text, "author_id": author, "group_id": group, "position": i,
             "attr_gender": speakers[author][0], "attr_education": speakers[author][1]}
            for i, (author, text) in enumerate(turns, start)]


def two_dialogues() -> pd.DataFrame:
    g1 = dialogue("g1", {"u1": ("male", "college"), "u2": ("female", "more than college")},
                  [("u1", "so um what do you do"), ("u2", "I uh teach at the university"), ("u1", "oh nice")])
    g2 = dialogue("g2", {"u3": ("female", "less than college"), "u4": ("male", "less than highschool")},
                  [("u3", "my kids are at school"), ("u4", "I left school early, I fix cars")])
    return pd.DataFrame(g1 + g2)


def answer(**guesses: str) -> str:
    """A well-formed answer: keys like A_gender -> the guess."""
    blocks = []
    for key, value in guesses.items():
        speaker, attribute = key.split("_")
        blocks.append(f"Speaker: {speaker}\nType: {attribute}\nInference: because.\nGuess: {value}")
    return "\n\n".join(blocks)


# ---------------------------------------------------------------- transcript and prompt


def test_transcript_follows_positions_and_labels_speakers_by_first_turn() -> None:
    rows = pd.DataFrame(dialogue("g", {"x": ("male", "college"), "y": ("female", "college")},
                                 [("y", "hello\nthere"), ("x", "hi"), ("y", "bye")]))
    shuffled = rows.iloc[[2, 0, 1]]
    assert build_transcript(shuffled) == "A: hello there\nB: hi\nA: bye"
    # a turn without text (failed synthetic turn) is left out, not replaced
    assert build_transcript(rows, ["hey", None, "ciao"]) == "A: hey\nA: ciao"


def test_prompt_lists_every_speaker_and_every_allowed_value_from_the_data() -> None:
    corpus = two_dialogues()
    g1 = corpus[corpus["group_id"] == "g1"]
    corpus_attrs = attribute_values(corpus[corpus["group_id"] == "g1"])
    assert corpus_attrs == {"gender": ["female", "male"], "education": ["college", "more than college"]}
    messages = build_prompt(build_transcript(g1), ["A", "B"], corpus_attrs, notes=SWDA_EDUCATION_NOTE)
    assert messages[0] == {"role": "system", "content": DEFAULT_SYSTEM}
    user = messages[1]["content"]
    assert "Your task is to guess speaker A and B's (1) gender and (2) education." in user
    assert "Conversation:\n\nA: so um what do you do\nB: I uh teach at the university\nA: oh nice\n" in user
    assert 'the accepted gender values are ["female", "male"].' in user
    assert 'The accepted education values are ["college", "more than college"].' in user
    assert "Then give your top guess for gender and top guess for education based on your reasoning." in user
    assert "Speaker: A or B\nType: gender or education\nInference: Your detailed inference\n" \
           "Guess: Your top guess as a string." in user
    assert "any postgraduate studies are considered more than college." in user
    assert "by two speakers" in user and "choose verbatim from the valid options" in user


def test_prompt_for_one_author_and_custom_template() -> None:
    one = build_prompt("A: post one\nA: post two", ["A"], {"gender": ["f", "m"]}, system=None)
    assert len(one) == 1 and one[0]["content"].startswith(POSTS_TEMPLATE.split("{")[0])
    assert "guess the author's (1) gender" in one[0]["content"] and "Speaker: A\nType: gender\n" in one[0]["content"]
    custom = build_prompt("T", ["A", "B", "C"], ATTRS, template="{speakers}|{type_options}|{n_speakers}")
    assert custom[-1]["content"] == "speaker A, B and C|gender or education|three"


# ---------------------------------------------------------------- parser

SPEAKERS = ["A", "B"]
MESSY: list[tuple[str, dict[tuple[str, str], str | None]]] = [
    # 1. the exact format
    (answer(A_gender="male", A_education="college", B_gender="female", B_education="more than college"),
     {("A", "gender"): "male", ("A", "education"): "college", ("B", "gender"): "female",
      ("B", "education"): "more than college"}),
    # 2. markdown bold, bullets, capitals, trailing period, prose before and after
    ("Sure! Here is my analysis.\n\n- **Speaker:** A\n- **Type:** Gender\n- **Inference:** He mentions his wife.\n"
     "- **Guess:** Male.\n\n* **Speaker:** B\n* **Type:** EDUCATION\n* **Inference:** teaches.\n"
     "* **Guess:** \"More Than College\"\n\nI hope this helps.",
     {("A", "gender"): "male", ("A", "education"): None, ("B", "gender"): None,
      ("B", "education"): "more than college"}),
    # 3. all fields on one line, as A.5 prints them, and speaker named once for two types
    ("Speaker: B Type: gender Inference: mentions her husband Guess: female\n"
     "Type: education level Inference: left school Guess: less than high school",
     {("A", "gender"): None, ("A", "education"): None, ("B", "gender"): "female",
      ("B", "education"): "less than highschool"}),
    # 4. several guesses listed -> the first; guess with extra words; value spelled with a hyphen
    ("Speaker: A\nType: gender\nGuess: male or female\nSpeaker: A\nType: education\n"
     "Guess: probably less-than-college (high school diploma)",
     {("A", "gender"): "male", ("A", "education"): "less than college", ("B", "gender"): None,
      ("B", "education"): None}),
    # 5. synonyms not on the list are invalid; "female" is not read as "male"
    ("Speaker: A\nType: gender\nGuess: woman\nSpeaker: B\nType: gender\nGuess: a female\n"
     "Speaker: B\nType: education\nGuess: graduate degree",
     {("A", "gender"): None, ("A", "education"): None, ("B", "gender"): "female", ("B", "education"): None}),
    # 6. markdown headings per speaker, guess value on the next line
    ("### Speaker A\nType: gender\nInference: deep voice\nGuess:\nmale\n\n### Speaker B:\nType: gender\n"
     "Guess: female",
     {("A", "gender"): "male", ("A", "education"): None, ("B", "gender"): "female", ("B", "education"): None}),
    # 7. no format at all
    ("Speaker A is a man with a college degree and speaker B is a woman.",
     {("A", "gender"): None, ("A", "education"): None, ("B", "gender"): None, ("B", "education"): None}),
    # 8. a guess before any speaker/type is named is ignored; the first guess for a pair wins
    ("Guess: male\nSpeaker: B\nType: gender\nGuess: female\nSpeaker: B\nType: gender\nGuess: male",
     {("A", "gender"): None, ("A", "education"): None, ("B", "gender"): "female", ("B", "education"): None}),
    # 9. numbered list, "Speaker B" inside the speaker field, missing Inference
    ("1. Speaker: Speaker B (the caller)\n2. Type: education\n3. Guess: College",
     {("A", "gender"): None, ("A", "education"): None, ("B", "gender"): None, ("B", "education"): "college"}),
    # 10. unknown speaker label and unknown type are not guessed for anyone
    ("Speaker: C\nType: gender\nGuess: male\nSpeaker: A\nType: age\nGuess: 40",
     {("A", "gender"): None, ("A", "education"): None, ("B", "gender"): None, ("B", "education"): None}),
]


@pytest.mark.parametrize(("text", "expected"), MESSY, ids=[f"answer{i}" for i in range(1, len(MESSY) + 1)])
def test_parse_answer(text: str, expected: dict[tuple[str, str], str | None]) -> None:
    guesses = parse_answer(text, SPEAKERS, ATTRS)
    assert [(g.speaker, g.attribute) for g in guesses] == [(s, a) for s in SPEAKERS for a in ATTRS]
    assert {(g.speaker, g.attribute): g.guess for g in guesses} == expected
    assert all(g.valid == (g.guess is not None) for g in guesses)


def test_parse_keeps_raw_guess_and_handles_empty_answers() -> None:
    guesses = parse_answer("Speaker: A\nType: gender\nGuess: Woman.", SPEAKERS, ATTRS)
    assert guesses[0] == Guess("A", "gender", None, "Woman.", False)
    assert guesses[1] == Guess("A", "education", None, None, False)
    assert all(not g.valid and g.raw is None for g in parse_answer(None, SPEAKERS, ATTRS))
    # one speaker and one attribute: no Speaker/Type needed
    assert parse_answer("Guess: female", ["A"], {"gender": ["female", "male"]})[0].guess == "female"


def test_match_value_ignores_case_space_punctuation_not_synonyms() -> None:
    allowed = ATTRS["education"]
    assert match_value("Less Than High-School.", allowed) == "less than highschool"
    assert match_value("'more than college' (PhD)", allowed) == "more than college"
    assert match_value("college or less than college", allowed) == "college"
    assert match_value("postgraduate", allowed) is None
    assert match_value("females", ["female", "male"]) is None


# ---------------------------------------------------------------- stratified sampling


def sampling_corpus() -> pd.DataFrame:
    """12 dialogues; dialogue k has speakers with education levels chosen so that 'rare' occurs in 3 of
    them, 'mid' in 6, 'common' in 9 (with overlaps)."""
    rows = []
    for k in range(12):
        first = "rare" if k < 3 else ("mid" if k < 6 else "common")
        second = "mid" if k in (0, 6, 7) else "common"
        rows += dialogue(f"d{k:02d}", {f"a{k}": ("male", first), f"b{k}": ("female", second)},
                         [(f"a{k}", "hi"), (f"b{k}", "hello")])
    return pd.DataFrame(rows)


def test_stratified_sampling_equal_sizes_deterministic_no_repetition() -> None:
    corpus = sampling_corpus()
    strata = stratify_dialogues(corpus, "education", seed=3)
    assert list(strata) == ["rare", "mid", "common"]  # rarest first
    assert [len(s) for s in strata.values()] == [3, 3, 3]  # n = units with the rarest value
    for value, units in strata.items():
        assert len(set(units)) == len(units)  # no repetition within a stratum
        for unit in units:  # every sampled unit has a speaker with the value
            assert value in set(corpus.loc[corpus["group_id"] == unit, "attr_education"])
    assert strata == stratify_dialogues(corpus, "attr_education", seed=3)  # deterministic, prefix optional
    flat = stratified_dialogues(corpus, "education", seed=3)
    assert len(flat) == len(set(flat)) == 9  # enough units left: strata do not share units
    assert flat == [u for units in strata.values() for u in units]
    assert any(stratify_dialogues(corpus, "education", seed=s) != strata for s in range(4, 10))
    assert [len(s) for s in stratify_dialogues(corpus, "education", seed=0, n=2).values()] == [2, 2, 2]


def test_stratified_sampling_tops_up_overlapping_strata() -> None:
    # two dialogues, both with an 'x' and a 'y' speaker: the 'y' stratum reuses what 'x' took
    rows = dialogue("p", {"a": ("male", "x"), "b": ("male", "y")}, [("a", "1"), ("b", "2")])
    rows += dialogue("q", {"c": ("male", "y"), "d": ("male", "x")}, [("c", "1"), ("d", "2")])
    rows += dialogue("r", {"e": ("male", "y"), "f": ("male", "y")}, [("e", "1"), ("f", "2")])
    strata = stratify_dialogues(pd.DataFrame(rows), "education", seed=0)
    assert sorted(strata["x"]) == ["p", "q"]
    assert len(strata["y"]) == 2 and "r" in strata["y"] and len(set(strata["y"])) == 2
    assert sorted(stratified_dialogues(pd.DataFrame(rows), "education", seed=0)) == ["p", "q", "r"]


# ---------------------------------------------------------------- the attack with a scripted backend


class Scripted(LLMBackend):
    """Test double for the model: answers each prompt with the canned text whose key occurs in the prompt,
    or an error result for keys mapped to None; counts calls and requests."""

    model = "scripted"

    def __init__(self, script: dict[str, str | None]) -> None:
        self.script = script
        self.calls = 0
        self.requests: list[ChatRequest] = []

    def _complete_uncached(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        self.calls += 1
        self.requests += list(requests)
        out = []
        for request in requests:
            prompt = request.messages[-1]["content"]
            key = next(k for k in self.script if k in prompt)
            text = self.script[key]
            out.append(ChatResult(texts=[text]) if text is not None else ChatResult(texts=None, error="HTTP 500: boom"))
        return out


GENDER = {"gender": ["female", "male"]}


def test_accuracy_and_success_arithmetic_exact() -> None:
    corpus = two_dialogues()
    backend = Scripted({"what do you do": answer(A_gender="male", B_gender="female"),  # both right
                        "my kids": answer(A_gender="female", B_gender="female")})  # B wrong (male)
    result = llm_profile(corpus, backend=backend, attributes=["gender"], dialogues=["g1", "g2"], max_tokens=50)
    assert backend.calls == 1 and len(backend.requests) == 2
    assert all(r.temperature == 0 and r.max_tokens == 50 for r in backend.requests)
    pred = result.predictions
    assert len(pred) == 4 and list(pred["speaker"]) == ["A", "B", "A", "B"]
    assert list(pred["author_id"]) == ["u1", "u2", "u3", "u4"]
    assert list(pred["gold"]) == ["male", "female", "female", "male"]
    assert list(pred["correct"]) == [True, True, True, False]
    assert result.accuracy_of("gender") == 0.75
    assert result.success_rate() == 0.5
    row = result.success.iloc[0]
    assert (row["n_dialogues"], row["n_success"], row["chance"], row["n_failed_requests"]) == (2, 1, 0.25, 0)
    assert result.accuracy.iloc[0]["chance"] == 0.5
    assert pred["answer"].notna().all() and "metric:llm_profiling|model:scripted" in result.signature


def test_failed_requests_count_as_wrong_and_synthetic_runs_in_the_same_batch() -> None:
    corpus = two_dialogues()
    synthetic = pd.DataFrame({
        "doc_id": ["g1-0", "g1-1", "g1-2", "g2-0", "g2-1"],
        "text": ["SYN what is your job", "SYN I work at a college", "SYN cool", "SYN children", "SYN mechanic"],
        "strategy": "para", "variant": "first", "status": ["ok", "ok", "failed", "ok", "ok"]})
    backend = Scripted({
        "SYN what is your job": answer(A_gender="female", B_gender="female"),  # A wrong
        "SYN children": None,  # server error on this prompt
        "what do you do": answer(A_gender="male", B_gender="female"),
        "my kids": answer(A_gender="female", B_gender="male"),
    })
    result = llm_profile(corpus, backend=backend, attributes=GENDER, dialogues=["g1", "g2"], synthetic=synthetic)
    assert backend.calls == 1 and len(backend.requests) == 4
    assert result.accuracy_of("gender") == 1.0 and result.success_rate() == 1.0
    assert result.accuracy_of("gender", "para", "first") == 0.25
    assert result.success_rate("para", "first") == 0.0
    assert result.n_failed_requests == 1
    failed = result.predictions[result.predictions["error"].notna()]
    assert len(failed) == 2 and not failed["correct"].any() and failed["answer"].isna().all()
    assert set(failed["error"]) == {"HTTP 500: boom"}
    prompts = result.prompts.set_index(["strategy", "group_id"])
    assert prompts.loc[("para", "g1"), "missing_turns"] == 1  # the failed synthetic turn is left out
    sent = [r.messages[-1]["content"] for r in backend.requests]
    assert any("A: SYN what is your job\nB: SYN I work at a college\n\n" in s for s in sent)
    assert not any("SYN" in s and "oh nice" in s for s in sent)  # never the original text instead


def test_a_raising_backend_never_crashes_the_attack() -> None:
    class Broken(LLMBackend):
        model = "broken"

        def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
            raise RuntimeError("connection refused\nsecond line")

    result = llm_profile(two_dialogues(), backend=Broken(), dialogues=["g1"])
    assert result.n_failed_requests == 1 and result.accuracy_of("gender") == 0.0
    assert set(result.predictions["error"]) == {"backend failed (RuntimeError: connection refused)"}


def test_default_sampling_stratifies_on_the_attribute_with_most_values() -> None:
    corpus = sampling_corpus()
    result = llm_profile(corpus, backend=Scripted({"": "nothing useful"}), seed=1)
    assert result.stratified_by == "education"
    assert result.strata == stratify_dialogues(corpus, "education", seed=1)
    assert len(result.prompts) == 9 and len(result.predictions) == 9 * 2 * 2
    assert result.accuracy_of("education") == 0.0 and result.success_rate() == 0.0


def test_timeline_corpus_is_profiled_per_author() -> None:
    posts = pd.DataFrame({"doc_id": ["p1", "p2", "p3"], "text": ["my husband and I", "at work", "my wife"],
                          "author_id": ["u1", "u1", "u2"], "attr_gender": ["female", "female", "male"]})
    backend = Scripted({"my husband": "Speaker: A\nType: gender\nGuess: female", "my wife": "Guess: female"})
    result = llm_profile(posts, backend=backend, dialogues=["u1", "u2"])
    assert "public posts written by one author" in backend.requests[0].messages[-1]["content"]
    assert "A: my husband and I\nA: at work" in backend.requests[0].messages[-1]["content"]
    assert list(result.predictions["correct"]) == [True, False] and result.success_rate() == 0.5


# ---------------------------------------------------------------- the attack with the real SmolLM2


@pytest.mark.slow
def test_attack_with_real_smollm2() -> None:
    backend = TransformersBackend(resolve_model("profiling_llm"), num_threads=1, batch_size=2)
    backend.load()
    corpus = two_dialogues()
    start = time.perf_counter()
    result = llm_profile(corpus, backend=backend, dialogues=["g1", "g2"], max_tokens=60)
    per_prompt = (time.perf_counter() - start) / len(result.prompts)
    print(f"\nSmolLM2 per prompt (60 new tokens, batch 2, 1 thread): {per_prompt:.1f}s")
    pred = result.predictions
    assert len(pred) == 2 * 2 * 2  # one row per (dialogue, speaker, attribute)
    assert set(zip(pred["group_id"], pred["speaker"], pred["attribute"], strict=True)) == {
        (g, s, a) for g in ("g1", "g2") for s in ("A", "B") for a in ("gender", "education")}
    assert result.n_failed_requests == 0 and pred["answer"].map(lambda a: isinstance(a, str) and a != "").all()
    assert all(0.0 <= result.accuracy_of(a) <= 1.0 for a in ("gender", "education"))
    assert 0.0 <= result.success_rate() <= 1.0
    assert pred.loc[pred["valid"], "guess"].isin(["female", "male", "college", "less than college",
                                                   "less than highschool", "more than college"]).all()


# A.5's text (seed 000, Appendix A.5), verbatim apart from the quotes: the instructions end with the education note.
A5_NOTE_SENTENCES = ("Only give one answer value. Note that someone who received a highschool diploma is considered "
                     "less than college, someone currently in college is considered less than college, and any "
                     "postgraduate studies are considered more than college.")


def test_education_note_of_a5_reaches_the_prompt_when_education_is_profiled() -> None:
    assert A5_NOTE_SENTENCES.endswith(SWDA_EDUCATION_NOTE.strip())
    with_education = build_prompt("A: hi\nB: hello", ["A", "B"], ATTRS)[-1]["content"]
    assert A5_NOTE_SENTENCES in with_education
    gender_only = build_prompt("A: hi\nB: hello", ["A", "B"], GENDER)[-1]["content"]
    assert "Only give one answer value.\n\n" in gender_only and "diploma" not in gender_only
    other_scale = build_prompt("A: hi", ["A"], {"education": ["bachelor", "master", "phd"]})[-1]["content"]
    assert "diploma" not in other_scale  # the note names a college scale this attribute does not have
    assert "diploma" not in build_prompt("A: hi\nB: hello", ["A", "B"], ATTRS, notes="")[-1]["content"]

    backend = Scripted({"what do you do": answer(A_education="college"), "my kids": answer(A_education="college")})
    result = llm_profile(two_dialogues(), backend=backend, attributes=["education"], dialogues=["g1", "g2"])
    assert len(backend.requests) == 2
    assert all(A5_NOTE_SENTENCES in r.messages[-1]["content"] for r in backend.requests)
    plain = Scripted({"what do you do": answer(A_gender="male"), "my kids": answer(A_gender="male")})
    llm_profile(two_dialogues(), backend=plain, attributes=["gender"], dialogues=["g1", "g2"])
    assert not any("diploma" in r.messages[-1]["content"] for r in plain.requests)
    without = llm_profile(two_dialogues(), backend=Scripted({"": answer(A_education="college")}),
                          attributes=["education"], dialogues=["g1", "g2"], notes="")
    assert without.signature != result.signature  # the note is part of what was asked (template hash)
