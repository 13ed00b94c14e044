"""PII detection (Presidio, offline spaCy), consistent pseudonyms, and the pii_leakage metric, on hand-written
examples with the real detector."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tasks.generate.base import build_strategy, generate_synthetic
from tasks.generate.pseudonymize import (
    FIRST_NAMES,
    FIRST_NAMES_BY_SEX,
    LAST_NAMES,
    NAMES_SEARCHED_COLUMN,
    REPLACED_COLUMN,
    Pseudonymizer,
    ordinary_words,
    pseudonymize_corpus,
)
from tasks.metrics.pii import ALL_ENTITIES, pii_leakage
from tasks.models.given_names import EITHER, FEMALE, MALE, given_name_sex, is_given_name
from tasks.models.pii import (
    DEFAULT_ENTITIES,
    PiiDetector,
    PiiSpan,
    detection_scores,
    names_only,
    normalise,
    occurs,
    only_a_place,
    supported_entities,
)

LABELLED = Path(__file__).parent / "data" / "pii_labelled.jsonl"

# One hand-written example per default entity type: (text, entity, the span's text).
EXAMPLES = [
    ("Yesterday I had lunch with Barack Obama in the city.", "PERSON", "Barack Obama"),
    ("Write to jane.doe@gmail.com before Friday.", "EMAIL_ADDRESS", "jane.doe@gmail.com"),
    ("Call me at 212-555-0187 tonight.", "PHONE_NUMBER", "212-555-0187"),
    ("The slides are at https://www.example.org/talks/pii.html for everyone.", "URL",
     "https://www.example.org/talks/pii.html"),
    ("Requests came from 203.0.113.77 all night.", "IP_ADDRESS", "203.0.113.77"),
    ("Charge card 4111 1111 1111 1111 for the order.", "CREDIT_CARD", "4111 1111 1111 1111"),
    ("Send it to IBAN DE89 3704 0044 0532 0130 00 please.", "IBAN_CODE", "DE89 3704 0044 0532 0130 00"),
    ("My social security number is 536-22-8726.", "US_SSN", "536-22-8726"),
    ("lol follow @jess_rivera for more", "SOCIAL_HANDLE", "@jess_rivera"),
]


@pytest.fixture(scope="module")
def detector() -> PiiDetector:
    return PiiDetector()


def test_each_default_entity_type_is_detected(detector: PiiDetector) -> None:
    assert {e for _, e, _ in EXAMPLES} == set(DEFAULT_ENTITIES)
    found = detector.detect([text for text, _, _ in EXAMPLES])
    for (text, entity, value), got in zip(EXAMPLES, found, strict=True):
        assert (entity, value) in {(s.entity, s.text) for s in got.spans}, (text, got.spans)
        for span in got.spans:
            assert text[span.start:span.end] == span.text


def test_overlaps_resolved_and_handles_are_not_emails(detector: PiiDetector) -> None:
    [email, url] = detector.detect(["Mail bob@site.com now.", "See www.cnn.com/news, then sleep."])
    assert [(s.entity, s.text) for s in email.spans] == [("EMAIL_ADDRESS", "bob@site.com")]  # not URL site.com
    assert [(s.entity, s.text) for s in url.spans] == [("URL", "www.cnn.com/news")]  # no trailing comma


def test_the_default_entity_types_are_among_those_the_analyzer_supports() -> None:
    """check_entities takes them without loading the analyzer: it must support every one."""
    assert set(DEFAULT_ENTITIES) <= set(supported_entities())


def test_unknown_entity_type_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown PII entity type 'PASSWORD'; known: .*SOCIAL_HANDLE"):
        PiiDetector(["PERSON", "PASSWORD"])


@pytest.mark.slow  # a fresh process loads Presidio and spaCy
def test_detection_works_without_network_and_never_downloads(tmp_path: Path) -> None:
    """Sockets refuse to connect and spaCy's downloader raises: detection must still find an e-mail (its
    tldextract check) and a name (spaCy NER on the installed model)."""
    code = """
import socket, spacy.cli
def refuse(*a, **k):
    raise OSError("network disabled in this test")
socket.socket.connect = refuse
socket.create_connection = refuse
spacy.cli.download = refuse
from tasks.models.pii import PiiDetector
[d] = PiiDetector().detect(["Barack Obama wrote to jane.doe@gmail.com"])
print(sorted(s.entity for s in d.spans))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).parents[1], env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['EMAIL_ADDRESS', 'PERSON']"


def test_labelled_set_precision_recall_of_pattern_types(detector: PiiDetector) -> None:
    records = [json.loads(line) for line in LABELLED.read_text().splitlines() if line.strip()]
    labels = [[tuple(s) for s in r["spans"]] for r in records]
    assert sum(map(len, labels)) >= 100
    for r, spans in zip(records, labels, strict=True):
        assert all(value in r["text"] for _, value in spans)
    scores = {row["entity"]: row for row in detection_scores(labels, detector.detect([r["text"] for r in records]))}
    for entity in ("EMAIL_ADDRESS", "IP_ADDRESS", "CREDIT_CARD", "IBAN_CODE", "SOCIAL_HANDLE"):
        assert scores[entity]["recall"] >= 0.9 and scores[entity]["precision"] >= 0.9, scores[entity]
    assert scores["all"]["recall"] >= 0.7


def test_detection_scores_against_hand_count() -> None:
    from tasks.models.pii import DetectedText, PiiSpan

    labels = [[("PERSON", "Jane"), ("PERSON", "Jane"), ("URL", "a.com")], [("US_SSN", "536-22-8726")]]
    found = [DetectedText((PiiSpan("PERSON", 0, 4, "JANE", 1.0), PiiSpan("PERSON", 9, 12, "Tom", 1.0))),
             DetectedText((PiiSpan("PHONE_NUMBER", 4, 15, "536-22-8726", 0.4),))]
    rows = {r["entity"]: r for r in detection_scores(labels, found)}
    assert (rows["PERSON"]["tp"], rows["PERSON"]["fp"], rows["PERSON"]["fn"]) == (1, 1, 1)
    assert (rows["URL"]["fn"], rows["US_SSN"]["fn"], rows["PHONE_NUMBER"]["fp"]) == (1, 1, 1)
    assert (rows["all"]["tp"], rows["all"]["fp"], rows["all"]["fn"]) == (1, 2, 3)


def test_occurs_ignores_case_and_spaces_but_needs_whole_tokens() -> None:
    assert occurs("Jane  Doe", "so JANE\n doe said")
    assert not occurs("Jo", "Joking aside")
    assert occurs("@bob_99", "thanks @BOB_99!")
    assert normalise("  A\tB ") == "a b"


def _corpus(texts: list[str], **columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(texts))], "text": texts, **columns})


def test_surrogates_keep_the_type(detector: PiiDetector) -> None:
    corpus = _corpus([text for text, _, _ in EXAMPLES])
    out, mapping = pseudonymize_corpus(corpus, scope="document", seed=1, detector=detector)
    assert len(out) == len(corpus) and list(out["doc_id"]) == list(corpus["doc_id"])
    by_entity = {row.entity: row for row in mapping.itertuples()}
    for _, entity, value in EXAMPLES:
        row = by_entity[entity]
        assert row.original == value and row.surrogate != value
        assert value not in out["text"].str.cat(sep=" ")
    names = by_entity["PERSON"].surrogate.split()
    assert names[0] in FIRST_NAMES and names[1] in LAST_NAMES
    assert re.fullmatch(r"[a-z]+\.[a-z]+@example\.com", by_entity["EMAIL_ADDRESS"].surrogate)
    assert re.fullmatch(r"\d{3}-\d{3}-\d{4}", by_entity["PHONE_NUMBER"].surrogate)  # same format
    assert re.fullmatch(r"https://www\.example\.com/[a-z0-9]{6}", by_entity["URL"].surrogate)
    assert any(ipaddress.ip_address(by_entity["IP_ADDRESS"].surrogate) in ipaddress.ip_network(net)
               for net in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))
    assert re.fullmatch(r"\d{4} \d{4} \d{4} \d{4}", by_entity["CREDIT_CARD"].surrogate)
    assert re.fullmatch(r"[A-Z]{2}\d{2}( \d{4}){4} \d{2}", by_entity["IBAN_CODE"].surrogate)
    assert re.fullmatch(r"\d{3}-\d{2}-\d{4}", by_entity["US_SSN"].surrogate)
    assert re.fullmatch(r"@[a-z]+_[a-z]+\d{2}", by_entity["SOCIAL_HANDLE"].surrogate)
    assert out[REPLACED_COLUMN].tolist() == [1] * len(EXAMPLES)


def test_timeline_keeps_one_pseudonym_per_person_and_author(detector: PiiDetector) -> None:
    """A user's timeline (scope author): the friend keeps one name across posts, "Jane" and "Doe" alone
    follow "Jane Doe"; another author's "Jane Doe" is a different scope."""
    corpus = _corpus(["Had dinner with Jane Doe and her dog today.",
                      "Jane says the dog is fine now, mail her at jane.doe@gmail.com",
                      "Doe family reunion next week, Jane is hosting.",
                      "Also saw Jane Doe at the gym.",
                      "I wrote to jane.doe@gmail.com about Jane Doe."],
                     author_id=["u1", "u1", "u1", "u2", "u2"])
    out, mapping = pseudonymize_corpus(corpus, scope="author", seed=7, detector=detector)
    texts = out["text"].tolist()
    assert not any(occurs(v, t) for t in texts for v in ("Jane", "Doe", "jane.doe@gmail.com"))
    u1 = mapping[(mapping["scope_key"] == "author_id=u1") & (mapping["entity"] == "PERSON")]
    full = u1.loc[u1["original"] == "Jane Doe", "surrogate"].iloc[0]
    first, last = full.split()
    assert f"with {full} and" in texts[0]
    assert texts[1].startswith(f"{first} says") and texts[2].startswith(f"{last} family") and f"{first} is" in texts[2]
    u2 = mapping[(mapping["scope_key"] == "author_id=u2") & (mapping["original"] == "Jane Doe")]
    assert u2["surrogate"].iloc[0] in texts[3] and u2["surrogate"].iloc[0] in texts[4]
    emails = mapping[mapping["entity"] == "EMAIL_ADDRESS"].set_index("scope_key")["surrogate"]
    assert emails["author_id=u1"] in texts[1] and emails["author_id=u2"] in texts[4]
    assert set(mapping["scope"]) == {"author"}


def test_conversation_keeps_one_pseudonym_per_group(detector: PiiDetector) -> None:
    corpus = _corpus(["hey @mike_t are you coming tonight?", "@mike_t is always late lol",
                      "I am here, ask @mike_t", "unrelated: @mike_t in another thread"],
                     group_id=["c1", "c1", "c1", "c2"], author_id=["a", "b", "c", "a"])
    out, _ = pseudonymize_corpus(corpus, scope="group", seed=3, detector=detector)
    handles = [re.findall(r"@\w+", t) for t in out["text"]]
    assert len({h[0] for h in handles[:3]}) == 1 and "@mike_t" not in handles[0]
    assert handles[3][0] != handles[0][0]
    doc_scope, _ = pseudonymize_corpus(corpus, scope="document", seed=3, detector=detector)
    assert len({re.findall(r"@\w+", t)[0] for t in doc_scope["text"][:3]}) == 3


def test_deterministic_given_the_seed(detector: PiiDetector) -> None:
    corpus = _corpus(["Jane Doe called 212-555-0187 and mailed jane@x.org", "Tom Baker is at 10.0.0.7"])
    a, map_a = pseudonymize_corpus(corpus, seed=5, detector=detector)
    b, map_b = pseudonymize_corpus(corpus, seed=5, detector=detector)
    c, _ = pseudonymize_corpus(corpus, seed=6, detector=detector)
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(map_a, map_b)
    assert a["text"].tolist() != c["text"].tolist()


def test_no_ones_names_are_not_names(detector: PiiDetector) -> None:
    """A deity, a phrase in another language, a lone letter: the NER model's PERSON, no one's name
    (names_only); the names beside them stay."""
    texts = ["God bless you, and God bless America.", "Buenas noches, Florida.",
             "the Catholic Church is against the death penalty and so am I. But I was governor.",
             "Thank you, Elaine. Donald brought it up and Hillary answered."]
    found = detector.detect(texts)
    assert [[s.text for s in d.spans] for d in found[:3]] == [[], [], []]
    assert {"Donald", "Hillary"} <= {s.text for s in found[3].spans}
    kept = (PiiSpan("PERSON", 0, 6, "Kenyet", 0.85),)
    assert names_only(kept, "Kenyet noches") == () and names_only(kept, "Kenyet brought it") == kept


def test_a_place_alone_is_not_a_name() -> None:
    """A lone word WordNet knows only as a place's name, used as a place, is no one's name unless people are given
    it: "Bermuda" and "Ohio" go, "Virginia" and "Charlotte" (first names), "Washington" and "Madison" (presidents)
    stay, and so does "Dallas" where the text uses it as a person's name."""
    assert only_a_place("Bermuda") and only_a_place("Ohio") and only_a_place("Cuba")
    for name in ("Virginia", "Charlotte", "Washington", "Madison", "Houston", "Mitt", "bermuda"):
        assert not only_a_place(name), name
    text = "Mitt is betting on a Bermuda shell corporation."
    alone = (PiiSpan("PERSON", text.index("Bermuda"), text.index("Bermuda") + 7, "Bermuda", 0.85),)
    assert names_only(alone, text) == ()
    dallas = (PiiSpan("PERSON", 10, 16, "Dallas", 0.85),)  # a place's name used as a person's stays a name
    assert only_a_place("Dallas") and names_only(dallas, "I thanked Dallas.") == dallas
    virginia = (PiiSpan("PERSON", 10, 18, "Virginia", 0.85),)
    assert names_only(virginia, "I thanked Virginia.") == virginia


def test_english_words_none_of_them_a_name_are_not_a_persons_name() -> None:
    """A span of English words of which none is a given name or a surname in the lists names a thing, not a person
    ("Head Start", a programme, had become "Chen Lopez"); one of common words of which one is a name stays."""
    def span(text: str, name: str) -> tuple[PiiSpan, ...]:
        return (PiiSpan("PERSON", text.index(name), text.index(name) + len(name), name, 0.85),)

    text = "— to Head Start, to community college, to job training."
    assert names_only(span(text, "Head Start"), text) == ()
    for text, name in (("I met Will Smith.", "Will Smith"), ("Ask Bill Gates.", "Bill Gates"),
                       ("I met Rich Little.", "Rich Little"), ("We met Maria Lopez.", "Maria Lopez")):
        assert names_only(span(text, name), text) == span(text, name), name


def test_surrogate_first_names_keep_the_original_sex() -> None:
    """A first name the lists give one sex gets a surrogate of that sex or of either, under every seed; one of
    both sexes gets one of either; a lone word the lists do not hold, a surname."""
    assert (given_name_sex("Jason"), given_name_sex("ROSA"), given_name_sex("Hector")) == (MALE, FEMALE, MALE)
    assert given_name_sex("Jordan") == EITHER and given_name_sex("Mitt") is None and is_given_name("Jordan")
    either = set(FIRST_NAMES_BY_SEX[FEMALE]) & set(FIRST_NAMES_BY_SEX[MALE])
    assert either and set(FIRST_NAMES_BY_SEX[FEMALE]) - either and set(FIRST_NAMES_BY_SEX[MALE]) - either
    for name, surrogate_sex in (FIRST_NAMES_BY_SEX[FEMALE], FEMALE), (FIRST_NAMES_BY_SEX[MALE], MALE):
        assert all(given_name_sex(n) in (surrogate_sex, EITHER, None) for n in name)  # the pools agree with the lists
    assert all(given_name_sex(n) in (EITHER, None) for n in FIRST_NAMES_BY_SEX[EITHER])
    text = "Hector and his wife Rosa, they have a beautiful citizen son, Jason."
    spans = [(PiiSpan("PERSON", text.index(n), text.index(n) + len(n), n, 0.85)) for n in ("Hector", "Rosa", "Jason")]
    drawn = {"Hector": set(), "Rosa": set(), "Jason": set()}
    for seed in range(30):
        pseudonymizer = Pseudonymizer(seed)
        for span in spans:
            drawn[span.text].add(pseudonymizer.surrogate(span, "u1"))
    assert drawn["Rosa"] <= set(FIRST_NAMES_BY_SEX[FEMALE]) and len(drawn["Rosa"] - either) > 5
    assert drawn["Hector"] | drawn["Jason"] <= set(FIRST_NAMES_BY_SEX[MALE])
    assert drawn["Jason"] - either
    charlie = PiiSpan("PERSON", 0, 7, "Charlie", 0.85)  # a name of either sex gets one too ("his sons Charlie")
    assert {Pseudonymizer(seed).surrogate(charlie, "u1") for seed in range(10)} <= either
    alone = Pseudonymizer(0)
    for text, pool in (("President Obama", LAST_NAMES), ("Dr. King", LAST_NAMES), ("Michelle", FIRST_NAMES_BY_SEX[FEMALE])):
        name = text.split()[-1]
        span = PiiSpan("PERSON", text.index(name), len(text), name, 0.85)
        assert alone.surrogate(span, "u1") in pool, text  # a lone surname stays a surname


def test_words_the_corpus_writes_in_lower_case_are_not_names(detector: PiiDetector) -> None:
    """"Mom" beside "my mom" is an ordinary word (not replaced, nor propagated), unless a title says it is a
    name; a name the corpus writes capitalised everywhere, even sentence-initial only, stays one."""
    texts = ["He wrote, dear Mom and Dad, we are fine.", "My mom and my dad came.", "Ask mom.",
             "Dad said so, dad.", "Trump spoke. Then Trump left."]
    assert ordinary_words(texts, ["Mom", "Dad", "Trump", "Then"]) == {"Mom", "Dad"}
    assert ordinary_words(["Wildfires burned.", "The wildfires spread."], ["Wildfires"]) == {"Wildfires"}
    corpus = _corpus(["He wrote, dear Mom and Dad, today we spotted a boat.", "My mom called my dad.",
                      "I miss my mom so much.", "Dad jokes are the best, dad."], author_id=["u1"] * 4)
    out, mapping = pseudonymize_corpus(corpus, scope="author", seed=0, detector=detector)
    assert out["text"].tolist() == corpus["text"].tolist() and mapping.empty
    listed = _corpus(["We worry about the future of our two kids, Jack and Grace.", "It was grace, pure grace."])
    out, mapping = pseudonymize_corpus(listed, scope="author", seed=0, detector=detector)
    assert {"Jack", "Grace"} <= set(mapping["original"]) and out["text"].iloc[1] == "It was grace, pure grace."


def test_another_language_is_one_langid_names_and_whose_words_it_has() -> None:
    """Spanish and French are in another language; English, a text too short to tell, and made-up words langid is
    just as sure of (simulated text) are not."""
    from tasks.models.pii import in_another_language, is_english

    assert in_another_language("Es un placer estar con ustedes esta noche.")
    assert in_another_language("Nous sommes ici ce soir pour parler de notre avenir.")
    assert not in_another_language("We are here tonight to talk about our future.")
    assert not in_another_language("Gracias.")
    made_up = "Dede, nogujipi stanfi luch pefulo voze gatenira dade fuci rirare dirare, luch edanliga vufe dirade?!"
    assert not is_english(made_up) and not in_another_language(made_up)  # langid: Italian, sure of it


def test_non_english_text_keeps_names_and_says_so(detector: PiiDetector) -> None:
    corpus = _corpus(["Ich habe gestern mit Peter Müller gesprochen, er wohnt jetzt in Berlin. "
                      "Schreib ihm an peter.mueller@web.de", "I talked to Peter Miller yesterday."])
    out, _ = pseudonymize_corpus(corpus, seed=0, detector=detector)
    german, english = out["text"].tolist()
    assert "Peter Müller" in german and "Berlin" in german  # names are not searched in German text
    assert "peter.mueller@web.de" not in german and "@example.com" in german  # patterns still are
    assert "Peter Miller" not in english
    assert out[NAMES_SEARCHED_COLUMN].tolist() == [False, True]


def test_leakage_against_hand_count(detector: PiiDetector) -> None:
    sources = ["Jane Doe wrote to jane.doe@gmail.com, call 212-555-0187.",
               "Nothing personal in here at all.",
               "Ask @bob_99 about it, or Tom Baker."]
    outputs = ["JANE   doe wrote, call me.",                       # PERSON leaked (case, spaces); email, phone not
               "Nothing personal, write to maria.lopez@example.com",  # 1 invented e-mail, no source PII
               "Ask @bob_99 about it."]                             # handle leaked, Tom Baker not
    samples, dist = pii_leakage(sources, outputs, detector, strategy="s")
    overall = samples[samples["entity"] == ALL_ENTITIES].set_index("doc_id")
    assert overall.loc["0", "pii_leakage"] == pytest.approx(1 / 3)
    assert pd.isna(overall.loc["1", "pii_leakage"]) and overall.loc["1", "pii_leakage_reason"] == \
        "no PII detected in the source"
    assert overall.loc["2", "pii_leakage"] == pytest.approx(1 / 2)
    assert overall["pii_invented"].tolist() == [0.0, 1.0, 0.0]
    value = dist.set_index(["metric", "entity"])
    assert value.loc[("pii_leakage", ALL_ENTITIES), "value"] == pytest.approx(2 / 5)
    assert value.loc[("pii_leakage", ALL_ENTITIES), "n"] == 5
    assert value.loc[("pii_leakage", "PERSON"), "value"] == pytest.approx(1 / 2)
    assert value.loc[("pii_leakage", "SOCIAL_HANDLE"), "value"] == 1.0
    assert value.loc[("pii_leakage", "EMAIL_ADDRESS"), "value"] == 0.0
    assert value.loc[("pii_invented", ALL_ENTITIES), "value"] == 1.0
    assert value.loc[("pii_invented", "EMAIL_ADDRESS"), "value"] == 1.0
    assert set(dist["level"]) == {"distribution"} and dist["signature"].str.contains("presidio").all()


def test_stymask_leaks_and_pseudonymize_then_stymask_does_not(detector: PiiDetector) -> None:
    corpus = _corpus(["OMG i just met Barack Obama!!! email me at fan.club@gmail.com",
                      "Follow @jess_rivera, she is SO funny... call 212-555-0187",
                      "Jennifer Lopez and Tom Hanks were at the party lol"], author_id=["a", "b", "c"])
    stymask = build_strategy("stymask").fit(corpus)
    plain = generate_synthetic(stymask, corpus, seed=0)
    pseudonymised, _ = pseudonymize_corpus(corpus, scope="author", seed=0, detector=detector)
    masked = generate_synthetic(stymask.fit(pseudonymised), pseudonymised, seed=0)
    _, leak_plain = pii_leakage(corpus["text"].tolist(), plain["text"].tolist(), detector, strategy="stymask")
    _, leak_masked = pii_leakage(corpus["text"].tolist(), masked["text"].tolist(), detector,
                                 strategy="pseudonymize+stymask")
    overall = "metric == 'pii_leakage' and entity == 'all'"
    assert leak_plain.query(overall)["value"].iloc[0] > 0.5
    assert leak_masked.query(overall)["value"].iloc[0] == 0.0
    assert leak_masked.query(overall)["n"].iloc[0] == leak_plain.query(overall)["n"].iloc[0] > 0


def test_suite_reports_pii_rows_with_an_entity_column(tmp_path: Path) -> None:
    from tasks.metrics.suite import MetricOptions, score_strategy, strategy_metric_table

    corpus = _corpus(["Jane Doe wrote to jane.doe@gmail.com", "Ask @bob_99"])
    synthetic = pd.DataFrame({"doc_id": ["d0", "d1"], "strategy": "copy", "variant": "first",
                              "text": ["Jane Doe wrote to someone", None], "status": ["ok", "failed"],
                              "reason": [None, "boom"]})
    result = score_strategy(corpus, synthetic, ["pii_leakage", "pii_invented"], MetricOptions(), tmp_path / "c.sqlite")
    dist = result.distribution_scores.set_index(["metric", "entity"])
    assert dist.loc[("pii_leakage", "all"), "value"] == 0.5 and dist.loc[("pii_leakage", "all"), "n_failed"] == 1
    assert dist.loc[("pii_leakage", "PERSON"), "value"] == 1.0
    assert result.sample_scores.set_index("doc_id").loc["d1", "pii_leakage_reason"] == "generation failed"
    wide = strategy_metric_table(result.distribution_scores)
    assert wide.loc[0, "pii_leakage"] == 0.5


@pytest.mark.slow  # a CLI process loads Presidio and spaCy
def test_cli_pseudonymize_writes_mapping_only_in_private_folder(tmp_path: Path) -> None:
    corpus = _corpus(["Mail jane.doe@gmail.com or call 212-555-0187", "@bob_99 says hi"], author_id=["u", "u"])
    src = tmp_path / "corpus.parquet"
    corpus.to_parquet(src)
    cli = Path(sys.executable).parent / "synthugc"
    out = tmp_path / "shared" / "pseudo.parquet"
    done = subprocess.run([str(cli), "pseudonymize", "--corpus", str(src), "--out", str(out), "--scope", "author",
                           "--entities", "EMAIL_ADDRESS,PHONE_NUMBER,SOCIAL_HANDLE"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    written = pd.read_parquet(out)
    assert len(written) == 2 and not written["text"].str.contains("jane.doe|212-555-0187|bob_99").any()
    mapping = pd.read_parquet(out.parent / "private" / "pseudo.pii_mapping.parquet")
    assert set(mapping["original"]) == {"jane.doe@gmail.com", "212-555-0187", "@bob_99"}
    assert "3 spans replaced" in done.stdout
    bad = subprocess.run([str(cli), "pseudonymize", "--corpus", str(src), "--out", str(out), "--scope", "planet"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == "synthugc: error: --scope 'planet': must be one of document, group, author"


def test_config_pseudonymize_section_is_validated() -> None:
    from flows.config import parse_config
    from tasks.errors import ConfigError

    base = {"experiment": "x", "data": {"dataset": "debates"}, "generate": {"strategies": [{"name": "stymask"}]}}
    cfg = parse_config({**base, "generate": {**base["generate"], "pseudonymize": {"scope": "group"}}})
    assert cfg.generate.pseudonymize.scope == "group"
    assert list(cfg.generate.pseudonymize.entities) == list(DEFAULT_ENTITIES)
    assert parse_config(base).generate.pseudonymize is None
    with pytest.raises(ConfigError, match=r"generate\.pseudonymize\.scope"):
        parse_config({**base, "generate": {**base["generate"], "pseudonymize": {"scope": "planet"}}})
    with pytest.raises(ConfigError, match=r"generate\.pseudonymize\.entities.*PASSWORD"):
        parse_config({**base, "generate": {**base["generate"], "pseudonymize": {"entities": ["PASSWORD"]}}})


def test_pii_counts_detects_each_distinct_text_once(detector: PiiDetector, monkeypatch: pytest.MonkeyPatch) -> None:
    """An output equal to its source, or a source shared by two variants, goes through Presidio once; the
    counts are those of detecting every text (an unchanged output leaks every span of its source)."""
    from tasks.metrics.pii import pii_counts

    source = "Write to jane.doe@example.com today."
    pairs = pd.DataFrame({"doc_id": ["d1", "d1", "d2"], "strategy": "s", "variant": ["a", "b", "a"],
                          "status": "ok", "source": [source, source, "Nothing here."],
                          "text": [source, "Write to them today.", "Nothing here."]})
    seen: list[str] = []
    detect = detector.detect
    monkeypatch.setattr(detector, "detect", lambda texts, **kw: seen.extend(texts) or detect(texts, **kw))
    counts = pii_counts(pairs, detector)
    assert sorted(seen) == sorted({source, "Write to them today.", "Nothing here."})
    totals = counts[counts["entity"] == ALL_ENTITIES].reset_index(drop=True)
    assert totals.loc[0, "source_spans"] >= 1 and totals.loc[0, "leaked"] == totals.loc[0, "source_spans"]
    assert totals.loc[1, "leaked"] == 0 and totals.loc[2, "source_spans"] == 0


def test_detection_without_the_parser_equals_presidio_batch_analyzer_on_the_full_pipeline(detector: PiiDetector) -> None:
    """The parser is off (Presidio never reads it) and each text is parsed once through spaCy's pipe; the
    spans are those Presidio's own BatchAnalyzerEngine finds with every spaCy component on."""
    from presidio_analyzer import BatchAnalyzerEngine

    from tasks.models import pii

    texts = [t for t, _, _ in EXAMPLES] + [json.loads(line)["text"] for line in LABELLED.read_text().splitlines()]
    texts += ["Je m'appelle Pierre Dupont et mon courriel est pierre@exemple.fr", ""]
    found = detector.detect(texts)
    nlp = pii.pipeline()
    assert "parser" in nlp.disabled
    nlp.enable_pipe("parser")
    try:
        batch = BatchAnalyzerEngine(analyzer_engine=pii._analyzer(detector.model))
        for text, mine in zip(texts, found, strict=True):
            entities = detector.entities if mine.english else detector._patterns_only
            (theirs,) = batch.analyze_iterator([text], language=pii.LANGUAGE, entities=list(entities),
                                               score_threshold=detector.score_threshold)
            assert mine.spans == pii.names_only(pii._non_overlapping(theirs, text), text), text
    finally:
        nlp.disable_pipe("parser")
    assert sum(len(d.spans) for d in found) >= len(EXAMPLES)


def test_cached_detections_come_back_bit_for_bit_without_loading_the_analyzer(
        detector: PiiDetector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.models import pii
    from tasks.models.embeddings import EmbeddingCache

    texts = [t for t, _, _ in EXAMPLES] + ["nothing to see", "Ich habe gestern mit Peter Müller gesprochen, er "
                                           "wohnt jetzt in Berlin. Schreib ihm an peter.mueller@web.de"]
    with EmbeddingCache(tmp_path / "c.sqlite") as cache:
        first = detector.detect(texts, cache=cache)
        monkeypatch.setattr(pii, "_analyzer", lambda model: pytest.fail("a cached text was parsed again"))
        again = pii.PiiDetector().detect(texts, cache=cache)  # a new detector of the default types: no analyzer either
        assert cache.hits == len(set(texts))
    assert again == first
    assert any(d.spans for d in again) and not again[-1].english and again[-1].spans
    assert [s.score for d in again for s in d.spans] == [s.score for d in first for s in d.spans]


def test_the_cached_language_model_is_langids_own_and_a_damaged_copy_is_written_again(tmp_path, monkeypatch):
    """langid's model, decoded once into the cache folder, gives the identifier langid builds from its own model
    string (reference: ``LanguageIdentifier.from_modelstring``): the same arrays and the same answers; a damaged
    copy is decoded and written again."""
    from langid.langid import LanguageIdentifier, model

    from tasks.models import pii

    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path))
    reference = LanguageIdentifier.from_modelstring(model, norm_probs=True)
    texts = ["Das ist ein Test der Sprache, nicht wahr?", "This is plainly English.", "Ceci n'est pas une pipe.",
             "Hola, ¿cómo estás hoy?", "日本語のテキストです", "Привет, как дела?", "", "12 34 56"]
    for attempt in ("decoded", "read", "damaged"):
        if attempt == "damaged":
            next(tmp_path.glob("models/langid-*.npz")).write_bytes(b"not an npz")
        pii._language_identifier.cache_clear()
        ours = pii._language_identifier()
        assert len(list(tmp_path.glob("models/langid-*.npz"))) == 1
        assert ours.nb_classes == reference.nb_classes and ours.tk_output == reference.tk_output
        assert ours.tk_nextmove == reference.tk_nextmove and ours.nb_numfeats == reference.nb_numfeats
        assert (ours.nb_ptc == reference.nb_ptc).all() and (ours.nb_pc == reference.nb_pc).all()
        assert [ours.classify(t) for t in texts] == [reference.classify(t) for t in texts]
    pii._language_identifier.cache_clear()
