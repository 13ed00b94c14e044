"""The protect move ``generalize`` (tasks/protect/generalize.py) with the real spaCy model and the packaged
WordNet: entities, numbers, dates and identifiers of a fixed set of sentences leave, their surrogates take the
same grammatical role (the re-parsed sentence keeps its root and the dependency labels of every untouched token,
and the replaced phrase the relation of what it replaced), the same entity gets the same surrogate within an
author, an evidence word becomes its WordNet hypernym, and a protect round with ``generalize`` on its ladder moves
a document holding an entity and records the move."""

from __future__ import annotations

import difflib
import re

import pandas as pd
import pytest

from tasks.protect.generalize import Surrogates, generalize
from tasks.protect.lexicon import hypernym, inflect_verb, load_pipeline, load_wordnet, plural

#: (sentence, what must leave it, what must be in it after)
SENTENCES = [
    ("I moved to Ohio in 2011 and never looked back.", ["Ohio", "2011"], ["the state", "that year"]),
    ("Obama's speech in Chicago was great.", ["Obama", "Chicago"], ["Someone's speech", "the city"]),
    ("We paid $500 for the Ohio river cruise.", ["$", "500", "Ohio"], ["a sum", "the state river"]),
    ("Set RAPIDS_VER to 23.02 before building.", ["RAPIDS_VER", "23.02"], ["the version setting"]),
    ("My sister works at Google as a lawyer.", ["Google"], ["at the organisation"]),
    ("The Democrats won 3 seats last week.", ["Democrats", "3"], ["a few seats"]),
    ("He was born in France and studied at Oxford University.", ["France", "Oxford"], ["the country", "the university"]),
    ("The bug came back after we installed version 3.2.1 last night.", ["3.2.1"], ["installed that version"]),
    ("Back in the 1990s we had a machine in Berlin.", ["1990s", "Berlin"], ["those years", "the city"]),
    ("On March 3rd, 2015, Sarah flew to Paris with 20 friends.", ["March", "2015", "Sarah", "Paris", "20"],
     ["that day", "many friends"]),
]
#: Relations a surrogate may take for the one it replaced: a noun phrase in object or adverbial position (the
#: small model tells "$500" as an object from "a sum" as an adverbial), a prenominal modifier ("20" -> "many").
SAME_ROLE = ({"pobj", "dobj", "npadvmod", "attr"}, {"nummod", "amod", "compound", "nmod", "quantmod"})


@pytest.fixture(scope="module")
def nlp():
    return load_pipeline()


def _tokens(nlp, text: str) -> list:
    return list(nlp(text))


@pytest.mark.parametrize("sentence,gone,present", SENTENCES, ids=[s[:24] for s, _, _ in SENTENCES])
def test_surrogates_replace_what_identifies_and_keep_the_sentence_grammar(nlp, sentence, gone, present):
    [out] = generalize([sentence], ["author"], [[]], nlp=nlp)
    for text in gone:
        assert text not in out, (text, out)
    for text in present:
        assert text in out, (text, out)
    assert not re.search(r"\b(the|a|an|my|that|this)\s+(the|a|an|my|that|those)\b", out, re.I), out  # no "the my"
    assert out[0].isupper() and out.endswith(".")

    before, after = _tokens(nlp, sentence), _tokens(nlp, out)
    assert [t.text for t in before if t.dep_ == "ROOT"] == [t.text for t in after if t.dep_ == "ROOT"]
    matcher = difflib.SequenceMatcher(a=[t.text for t in before], b=[t.text for t in after], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":  # every untouched token keeps its relation
            assert [t.dep_ for t in before[i1:i2]] == [t.dep_ for t in after[j1:j2]], (out, before[i1:i2])
        elif tag == "replace":  # the surrogate phrase takes the replaced phrase's relation
            old = before[i1].doc[i1:i2].root
            new = after[j1].doc[j1:j2].root
            assert old.dep_ == new.dep_ or any({old.dep_, new.dep_} <= group for group in SAME_ROLE), (
                sentence, out, old, new)


def test_the_same_entity_gets_the_same_surrogate_within_an_author_and_another_author_starts_afresh(nlp):
    texts = ["I grew up in Ohio near Columbus.", "Texas is hot but Ohio is home.", "In 2011 we left Columbus.",
             "Ohio winters are long.", "Texas is where I live now."]
    authors = ["ann", "ann", "ann", "ann", "bob"]
    surrogates = Surrogates()
    out = generalize(texts, authors, [[]] * len(texts), surrogates=surrogates, nlp=nlp)
    assert out[0] == "I grew up in the state near the city."
    assert out[1] == "Another state is hot but the state is home."  # Ohio stays "the state", Texas is another
    assert out[2] == "In that year we left the city."  # Columbus again: the same as in the first document
    assert out[3] == "State winters are long."  # as a modifier: the kind alone
    assert out[4] == "The state is where I live now."  # bob's first state: his own numbering
    # a later round (a later call with the same mapping) keeps ann's phrases
    [again] = generalize(["We drove from Texas to Ohio."], ["ann"], [[]], surrogates=surrogates, nlp=nlp)
    assert again == "We drove from another state to the state."
    assert surrogates.index("ann", "GPE:state", "OHIO") == 0 and surrogates.index("ann", "GPE:state", "texas") == 1


def test_an_evidence_word_becomes_its_wordnet_hypernym_inflected_as_it_was(nlp):
    wn = load_wordnet()
    assert wn.get_version() == "3.0"
    parent = wn.synsets("guitar", "n")[0].hypernyms()[0]
    assert parent.lemma_names() == ["stringed_instrument"]  # only a phrase: the word is looked for a level up
    expected = "instrument"
    assert expected in parent.hypernyms()[0].lemma_names() and hypernym("guitar", "n") == expected
    assert [hypernym(w, "n") for w in ("tree", "bed", "month")] == ["plant", "furniture", "period"]
    coffee = wn.synsets("espresso", "n")[0].hypernyms()[0].lemma_names()[0]
    whisper = wn.synsets("whisper", "v")[0].hypernyms()[0].lemma_names()[0]
    texts = ["She sold her guitars and ordered an espresso.", "They whispered about the guitar."]
    features = [[("guitar", "word"), (" espresso ", "char"), ("whisper", "word")]] * 2
    out = generalize(texts, ["a", "a"], features, nlp=nlp)
    assert out[0] == f"She sold her {plural(expected)} and ordered a {coffee}."  # "an" follows the new word
    assert out[1] == f"They {inflect_verb(whisper, 'VBD')} about the {expected}."
    assert out[1] == "They talked about the instrument."
    # a unit of time stays: nothing above it reads ("two years ago" -> not "two periods ago")
    assert generalize(["We won two years ago."], ["a"], [[("years", "word")]], nlp=nlp) == ["We won two years ago."]
    # no evidence: the same words stay
    assert generalize(texts, ["a", "a"], [[], []], nlp=nlp) == texts


def test_the_hypernym_does_not_depend_on_the_order_nltk_returns_a_senses_parents(monkeypatch):
    """NLTK keeps a synset's pointers in a set, iterated in an order that changes with the process's hash seed:
    ``woman`` has two parents, and the move must pick the same one in every process."""
    wn = load_wordnet()
    synset_class = type(wn.synsets("woman", "n")[0])
    assert {s.name() for s in wn.synsets("woman", "n")[0].hypernyms()} == {"adult.n.01", "female.n.02"}
    parents = synset_class.hypernyms
    try:
        picked = []
        for order in (lambda s: sorted(parents(s), key=lambda p: p.name()),
                      lambda s: sorted(parents(s), key=lambda p: p.name(), reverse=True)):
            monkeypatch.setattr(synset_class, "hypernyms", order)
            hypernym.cache_clear()
            picked.append(hypernym("woman", "n"))
        assert picked == ["adult", "adult"]
    finally:
        monkeypatch.undo()
        hypernym.cache_clear()


def test_inflection_of_the_hypernym():
    assert [plural(w) for w in ("instrument", "church", "body", "man", "stringed instrument")] == [
        "instruments", "churches", "bodies", "men", "stringed instruments"]
    assert [inflect_verb("talk", t) for t in ("VBD", "VBZ", "VBG", "VB")] == ["talked", "talks", "talking", "talk"]
    assert [inflect_verb(v, "VBD") for v in ("move", "carry", "stop", "go", "travel rapidly")] == [
        "moved", "carried", "stopped", "went", "traveled rapidly"]


def test_a_protect_round_with_generalize_moves_a_document_with_an_entity(tmp_path):
    from tasks.corpus.simulate import simulate_histories, simulate_synthetic
    from tasks.privacy.attacks import plan_attacks
    from tasks.protect.loop import ProtectSettings, _Protector
    from tasks.protect.moves import Move
    from tasks.store import fingerprint_file

    histories = simulate_histories(8, 300, seed=1, out_path=tmp_path / "histories.parquet")
    corpus = simulate_synthetic(histories, n_timelines=4, n_posts=16, rewrite_strength=0.0, seed=2)
    corpus["text"] = corpus["text"].astype(str) + " I moved to Ohio in 2011."
    settings = ProtectSettings(start="mask-evidence", ladder=(Move("generalize"),), meaning_floors=(0.0,),
                               fluency_floor=None, judge=(("delta", {}),),  # every generalized text is kept
                               budget="reidentification<=0.10,verbatim<=1")  # and nothing composed with reword
    protector = _Protector(corpus, str(histories), settings, tmp_path / "rounds", lambda _: None,
                           fingerprint_file(histories), plan_attacks(["delta"], 0))
    zero = protector.round_zero()
    assert len(protector.caught(zero))  # the feedback attack catches some timelines
    one = protector.next_round(zero, 1)
    moved = one.docs[one.docs["rung"] > 0]
    assert len(moved) and (moved["move"] == "generalize").all()
    assert not moved["text"].str.contains("Ohio|2011").any()
    assert moved["text"].str.contains("the state in that year", regex=False).all()
    untouched = one.docs[one.docs["rung"] == 0]
    assert untouched["text"].str.contains("Ohio").all()


def test_a_document_in_another_language_gets_no_move_that_reads_english(tmp_path):
    """A Spanish post is not given generalize (nor any move that reads English: apertium had made "E un placer
    estar deceit ustedes" of one): it keeps its text, while the English ones are generalised."""
    from tasks.corpus.simulate import simulate_histories, simulate_synthetic
    from tasks.privacy.attacks import plan_attacks
    from tasks.protect.components import english_sources
    from tasks.protect.loop import ProtectSettings, _Protector
    from tasks.protect.moves import Move
    from tasks.store import fingerprint_file

    histories = simulate_histories(8, 300, seed=1, out_path=tmp_path / "histories.parquet")
    corpus = simulate_synthetic(histories, n_timelines=4, n_posts=16, rewrite_strength=0.0, seed=2)
    corpus["text"] = "I moved to Ohio in 2011 and I have lived there since then with my family."
    spanish = "Me mudé a Ohio en 2011 y desde entonces vivo allí con mi familia."
    corpus.loc[0, "text"] = spanish
    settings = ProtectSettings(start="mask-evidence", ladder=(Move("generalize"),), meaning_floors=(0.0,),
                               fluency_floor=None, judge=(("delta", {}),),
                               budget="reidentification<=1,verbatim<=0.05")  # every document must move
    protector = _Protector(corpus, str(histories), settings, tmp_path / "rounds", lambda _: None,
                           fingerprint_file(histories), plan_attacks(["delta"], 0))
    assert english_sources(protector).tolist() == [False] + [True] * (len(corpus) - 1)
    one = protector.next_round(protector.round_zero(), 1)
    assert one.docs["text"].iloc[0] == spanish and one.docs["rejected"].iloc[0] == "unchanged"
    assert one.docs["move"].iloc[1:].str.startswith("generalize").all()
    assert not one.docs["text"].iloc[1:].str.contains("Ohio").any()


def test_an_evidence_noun_gets_no_gerund_for_its_hypernym(nlp):
    """WordNet's parent of "choice" is "deciding": a gerund loses the noun's count ("a clear deciding")."""
    text = "We have a clear choice this campaign."
    assert generalize([text], ["a"], [[("choice", "word")]], nlp=nlp) == [text]


def test_small_number_words_stay_and_numbers_in_a_duration_become_quantifiers(nlp):
    texts = ["We fought two wars and won 3 seats.", "I was 13 years old and walked 5 miles in two hours."]
    assert generalize(texts, ["a", "a"], [[], []], nlp=nlp) == [
        "We fought two wars and won a few seats.", "I was many years old and walked a few miles in two hours."]


def test_an_evidence_words_hypernym_is_put_in_only_where_it_keeps_the_sense():
    """WordNet's first sense is not always the text's: "bank" -> "slope" in "The bank raised interest rates". With
    the sense check (the hypernym's contextual vector against the word's) that one is not put in, and one that keeps
    the sense ("choir" -> "chorus") still is."""
    from tasks.metrics.meaning import span_similarity

    texts = ["The bank raised interest rates again.", "She sang in the church choir on Sundays."]
    features = [[("bank", "word")], [("choir", "word")]]
    plain = generalize(texts, ["a", "b"], features)
    assert plain == ["The slope raised interest rates again.", "She sang in the church chorus on Sundays."]
    checked = generalize(texts, ["a", "b"], features, sense=span_similarity)
    assert checked == [texts[0], plain[1]]


def test_groups_places_and_deities_get_phrases_that_keep_the_sentence_true(nlp):
    """A party stays a party, a nation's people citizens ("fellow Americans" -> "fellow citizens", not "locals"),
    a place the kind a text likelier means ("Wisconsin": a state before a river), a titled person the office ("the
    governor", not "someone"), and God is no one to hide; a group inside a longer name takes the name with it."""
    from tasks.protect.lexicon import place_kind

    assert [place_kind(p) for p in ("Wisconsin", "Ohio", "Israel", "Miami")] == ["state", "state", "country", "city"]
    texts = ["Even Republicans agree with Democratic policies.", "Hear me, my fellow Americans.",
             "In Wisconsin, we believe in hard work.", "God bless you.",
             "Governor Romney met President Obama and Mr. Smith."]
    out = generalize(texts, ["a"] * 5, [[]] * 5, nlp=nlp)
    assert out[0] == "Even party members agree with party policies.", out
    assert out[1] == "Hear me, my fellow citizens.", out
    assert out[2] == "In the state, we believe in hard work.", out
    assert out[3] == "God bless you.", out
    assert out[4] == "The governor met the president and someone.", out
    plurals = generalize(["Even the Tories agree.", "Many Jews came."], ["a", "a"], [[], []], nlp=nlp)
    assert plurals == ["Even the party members agree.", "Many believers came."]  # "tories", "jews": plural forms
    named = generalize(["And the Young Republicans are excited.", "We, the College Democrats, agree.",
                        "Yesterday, Senate Democrats blocked it."], ["a"] * 3, [[]] * 3, nlp=nlp)
    # part of a longer name, which goes with it: not "the Young party members"; and no party is left in the text
    assert named[:2] == ["And the party members are excited.", "We, the party members, agree."], named
    assert not any(re.search("Republican|Democrat", t) for t in named), named
    # a group's adjective in lower case names no group ("a republican form of government" is not a party's)
    form = "Our law guarantees us a republican form of government."
    assert generalize([form], ["a"], [[]], nlp=nlp) == [form]


def test_a_name_the_pseudonymiser_put_in_stays(nlp):
    """Protect's round 0 puts fictitious names in; generalize leaves them (the NER had taken one for a place: "I
    know the place does too") and still generalises the rest, and a real name in a text where the pseudonymiser
    wrote no such surrogate is generalised, even when it shares a word with another text's surrogate."""
    texts = ["And I know Rosa Becker does too.", "Then Kai Tanaka went to Ohio.", "I know Rosa Becker."]
    assert generalize(texts, ["a"] * 3, [[]] * 3, nlp=nlp)[0] == "And I know someone does too."
    kept = generalize(texts, ["a"] * 3, [[]] * 3, nlp=nlp, pseudonyms=[{"Rosa Becker"}, {"Kai Tanaka"}, set()])
    assert kept == ["And I know Rosa Becker does too.", "Then Kai Tanaka went to the state.", "I know someone."]


def test_protect_hands_generalize_the_surrogates_of_each_rows_own_scope():
    """A surrogate counts as a pseudonym only in the scope (author, by default) the pseudonymiser wrote it in."""
    from types import SimpleNamespace

    from tasks.generate.pseudonymize import MAPPING_COLUMNS
    from tasks.protect.apply import _pseudonyms

    mapping = pd.DataFrame([["author", "author_id=a", "PERSON", "Mitt Romney", "Rosa Becker", 2]],
                           columns=MAPPING_COLUMNS)
    p = SimpleNamespace(mappings=[mapping], settings=SimpleNamespace(pii_scope="author"))
    rows = pd.DataFrame({"doc_id": ["d1", "d2"], "author_id": ["a", "b"], "group_id": ["g", "g"]})
    assert _pseudonyms(p, rows) == [{"Rosa Becker"}, set()]


def test_names_get_the_kind_wordnet_gives_them_and_common_words_with_a_capital_stay(nlp):
    """A titled name is the office whatever the NER took it for ("Governor Romney would ..."); an organisation
    WordNet knows gets its kind ("Congress" -> "the legislature"), an acronym never itself in lower case ("the
    aarp"); "the great state of Michigan" is "the great state"; a place takes its likelier sense ("Washington":
    the capital, not "the state"); a common word with a capital names nothing ("believe in Magic")."""
    from tasks.protect.lexicon import place_kind

    assert [place_kind(p) for p in ("Washington", "Georgia", "Jordan")] == ["city", "state", "country"]
    texts = ["Governor Romney would replace the guarantee of Medicare with a voucher system.",
             "I represent the Research Triangle area in Congress.",
             "It won the support of the AARP.",
             "I'm Jennifer Granholm from the great state of Michigan, where the trees are just the right height.",
             "It's in the form of the Democrat leaders in Washington.",
             "This is not a time for America to believe in Magic.",
             'My father wrote about it in "Profiles in Courage."']
    out = generalize(texts, ["a"] * len(texts), [[]] * len(texts), nlp=nlp)
    assert out[0] == "The governor would replace the guarantee of health care with a voucher system.", out
    assert out[1].endswith(" area in the legislature."), out
    assert "AARP" not in out[2] and "aarp" not in out[2], out
    assert "from the great state, where" in out[3] and "Michigan" not in out[3], out
    assert out[4] == "It's in the form of the party leaders in the city.", out
    assert out[5] == "This is not a time for the country to believe in Magic.", out
    assert out[6] == texts[6], out
    [relative] = generalize(["I worked at a plant that Governor Romney bought."], ["a"], [[]], nlp=nlp)
    assert relative == "I worked at a plant that the governor bought.", relative  # "that" opens a clause here
    [lower] = generalize(["Yesterday I met president Obama in the city."], ["a"], [[]], nlp=nlp)
    assert lower == "Yesterday I met the president in the city.", lower  # a person's title needs no capital
