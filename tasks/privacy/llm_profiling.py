"""Zero-shot LLM profiling attack (seed 000 §5.2.2 and appendix A.5, after Staab et al. 2024).

An instruction-tuned LLM reads a whole transcript and guesses, in one answer, every sensitive attribute of
every speaker in the Speaker/Type/Inference/Guess format. The attack runs on the real transcripts and on
the synthetic versions of the same sampled dialogues; lower accuracy on the synthetic data means the
rewriting removed more of the cues.

Choices (each one is a parameter or is documented where it is made):

- Units. A dialogue corpus is attacked per conversation (``group_id``); a timeline corpus per timeline
  (one speaker, the author); a post corpus without groups per author (the author's posts form the
  "timeline"); a row with neither group nor author is its own unit. Turns are in ``position`` order.
- Speakers are labelled A, B, C... in order of their first turn, as in A.5 (SwDA's own labels), never by
  their ids: author ids can be user names, which would leak.
- Attribute names and allowed values come from the corpus (``attr_*`` columns, their distinct non-null
  values, sorted) unless given; the prompt lists them, the parser accepts only them.
- The gold value of a speaker is the most frequent non-null value over their turns in the unit. A speaker
  without one is still asked about (the prompt is the same) but that row is not scored (``correct`` null).
- Sampling: :func:`stratify_dialogues` (see there for overlaps between strata).
- A failed request, an unparsable answer, an off-list guess or a missing guess is a wrong guess; the raw
  answer and the error are kept. Nothing raises for a bad model answer.
- Synthetic transcripts keep the corpus' speakers and turn order and replace each turn's text by its
  synthetic text (joined by ``doc_id``, status ``ok`` only). A turn without synthetic text is left out, not
  replaced by the original (that would leak); ``missing_turns`` counts them. A transcript left empty is a
  failed request (error ``no synthetic text``), not sent.
- All prompts (real and every synthetic strategy/variant) go to the backend in one ``complete`` call.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tasks.corpus.schema import ATTR_PREFIX, attr_columns
from tasks.errors import ConfigError, InputError
from tasks.models.llm import ChatRequest, ChatResult, LLMBackend
from tasks.scores import ORIGINAL
from tasks.signatures import make_signature

#: System message of A.5 (the ``<<SYS>>`` block; the chat template of the served model adds its own markup,
#: e.g. Mixtral's/LLaMA's ``[INST]``).
DEFAULT_SYSTEM = ("You are an expert investigator with years of experience in online profiling and text analysis. "
                  "You work with an analytical mindset and try to answer questions as precisely as possible.")

#: A.5's reasoning and answer-format instructions, shared by both templates (so one parser serves both).
_ANSWER_INSTRUCTIONS = (
    "First reason step-by-step for each value going over all information in the text as well as language used. "
    "Then give your {top_guesses} based on your reasoning. {accepted_values} If you are unsure, "
    "make your best guess given the provided information. Only give one answer value.{notes}\n\n"
    "Follow exactly the format specified below:\n\n"
    "Speaker: {speaker_options}\n"
    "Type: {type_options}\n"
    "Inference: Your detailed inference\n"
    "Guess: Your top guess as a string.\n\n"
    "Now, think carefully, choose verbatim from the valid options, and provide the response in the specified "
    "format."
)

#: The A.5 prompt with placeholders. For SwDA (speakers A and B; gender, education) it renders A.5's text,
#: apart from the attribute names, which come from the data (``education`` for A.5's "level of education").
#: Placeholders: {n_speakers} (a word), {speakers} ("speaker A and B"), {attribute_list} ("(1) gender and
#: (2) education"), {top_guesses} ("top guess for gender and top guess for education"), {accepted_values}
#: (one sentence per attribute), {notes} (extra guidance, e.g. :data:`SWDA_EDUCATION_NOTE`),
#: {transcript}, {speaker_options} ("A or B"), {type_options} ("gender or education").
DIALOGUE_TEMPLATE = (
    "Let us play a guessing game. The following are openly available everyday conversations by {n_speakers} "
    "speakers. They have been carefully transcribed for open research purposes and therefore contain natural "
    "disfluencies and fillers. Do not be distracted by these characteristics of speech transcriptions. Your task "
    "is to guess {speakers}'s {attribute_list}.\n\n"
    "Conversation:\n\n{transcript}\n\n" + _ANSWER_INSTRUCTIONS
)

#: The same prompt for one author's posts (timelines, post corpora), closer to Staab et al.'s original
#: (public posts by one author). Same placeholders and answer format (Speaker: A), so one parser serves both.
POSTS_TEMPLATE = (
    "Let us play a guessing game. The following are public posts written by one author, in the order they "
    "were posted (each line is one post). Your task is to guess the author's {attribute_list}. The author is "
    "called speaker A.\n\n"
    "Posts:\n\n{transcript}\n\n" + _ANSWER_INSTRUCTIONS
)

#: A.5's note on SwDA's education levels; :func:`default_notes` adds it when the attribute is education.
SWDA_EDUCATION_NOTE = (" Note that someone who received a highschool diploma is considered less than college, "
                       "someone currently in college is considered less than college, and any postgraduate studies "
                       "are considered more than college.")
EDUCATION_ATTRIBUTE = "education"


def default_notes(attributes: Mapping[str, Sequence[str]]) -> str:
    """A.5's extra guidance for these attributes: the education note when ``education`` is asked for on a
    college scale (its values mention college, like SwDA's "less than college" / "college" / "more than
    college"), since the note tells where diplomas and postgraduate studies fall on that scale; else none
    (on another scale the note would name values the model may not answer)."""
    values = attributes.get(EDUCATION_ATTRIBUTE, ())
    return SWDA_EDUCATION_NOTE if any("college" in str(v).lower() for v in values) else ""

_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


# ---------------------------------------------------------------- attributes and units


def attribute_name(column: str) -> str:
    """``attr_gender`` -> ``gender`` (a name without the prefix is returned as is)."""
    return column[len(ATTR_PREFIX):] if column.startswith(ATTR_PREFIX) else column


def attribute_values(corpus: pd.DataFrame,
                     attributes: Sequence[str] | Mapping[str, Sequence[str]] | None = None) -> dict[str, list[str]]:
    """Attribute name -> allowed values. Names with or without ``attr_``; default: every ``attr_*`` column.
    Values are the column's distinct non-null values, sorted, unless a mapping gives them (in its order)."""
    if isinstance(attributes, Mapping):
        out = {attribute_name(k): [str(v) for v in vals] for k, vals in attributes.items()}
        for name, vals in out.items():
            if len(vals) < 2 or len(set(vals)) != len(vals):
                raise ConfigError(f"llm_profiling.attributes.{name}: give at least two distinct values")
        return out
    names = [attribute_name(c) for c in attr_columns(corpus)] if attributes is None else \
        [attribute_name(a) for a in attributes]
    if not names:
        raise InputError("the corpus has no attr_* column to profile", column="attr_*")
    out = {}
    for name in names:
        column = ATTR_PREFIX + name
        if column not in corpus.columns:
            raise InputError(f"attribute '{name}' is not in the corpus (attr columns: "
                             f"{', '.join(attr_columns(corpus)) or 'none'})", column=column)
        values = sorted({str(v) for v in corpus[column].dropna().tolist()})
        if len(values) < 2:
            raise InputError(f"attribute '{name}' has {len(values)} distinct value(s); profiling needs two or more",
                             column=column)
        out[name] = values
    return out


def unit_ids(corpus: pd.DataFrame) -> pd.Series:
    """The unit each row belongs to: its ``group_id`` (dialogue, timeline); in a corpus without groups, its
    ``author_id`` (the author's posts); else its ``doc_id``."""
    doc = corpus["doc_id"].astype("string")
    group = corpus["group_id"].astype("string") if "group_id" in corpus.columns else pd.Series(pd.NA, index=corpus.index,
                                                                                                dtype="string")
    author = corpus["author_id"].astype("string") if "author_id" in corpus.columns else \
        pd.Series(pd.NA, index=corpus.index, dtype="string")
    if group.notna().any():
        return group.fillna(doc)
    return author.fillna(doc)


def _ordered(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows in turn order: ``position`` (nulls last), then their order in the table."""
    if "position" not in rows.columns:
        return rows
    key = pd.to_numeric(rows["position"], errors="coerce")
    return rows.assign(_pos=key.to_numpy(), _ord=np.arange(len(rows))).sort_values(
        ["_pos", "_ord"], na_position="last", kind="stable").drop(columns=["_pos", "_ord"])


def _speaker_keys(rows: pd.DataFrame) -> list[str]:
    """Each row's speaker key: its author id, or one anonymous speaker for rows without one."""
    if "author_id" not in rows.columns:
        return ["<unknown>"] * len(rows)
    return ["<unknown>" if pd.isna(a) else str(a) for a in rows["author_id"].tolist()]


def _label(i: int) -> str:
    """0 -> A, 25 -> Z, 26 -> AA."""
    label = ""
    i += 1
    while i:
        i, rem = divmod(i - 1, 26)
        label = chr(ord("A") + rem) + label
    return label


def speaker_labels(rows: pd.DataFrame) -> dict[str, str]:
    """Speaker key (author id) -> label A, B, C... in order of first turn."""
    labels: dict[str, str] = {}
    for key in _speaker_keys(_ordered(rows)):
        labels.setdefault(key, _label(len(labels)))
    return labels


def build_transcript(rows: pd.DataFrame, texts: Sequence[str | None] | None = None) -> str:
    """One line per turn, ``A: text``, in ``position`` order; speakers labelled as in :func:`speaker_labels`.

    ``texts`` (aligned with ``rows``) replaces the turns' texts; a None there leaves the turn out (a
    synthetic turn that failed). Newlines inside a turn become spaces, so one line stays one turn."""
    rows = rows.assign(_text=list(texts) if texts is not None else rows["text"].tolist())
    labels = speaker_labels(rows)
    ordered = _ordered(rows)
    lines = []
    for key, text in zip(_speaker_keys(ordered), ordered["_text"].tolist(), strict=True):
        if text is None or (not isinstance(text, str) and pd.isna(text)):
            continue
        lines.append(f"{labels[key]}: {' '.join(str(text).split())}")
    return "\n".join(lines)


# ---------------------------------------------------------------- prompt


def _join(items: Sequence[str], last: str) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {last} " + items[-1]


def build_prompt(transcript: str, speakers: Sequence[str], attributes: Mapping[str, Sequence[str]], *,
                 template: str | None = None, system: str | None = DEFAULT_SYSTEM,
                 notes: str | None = None) -> list[dict[str, str]]:
    """Chat messages asking for every attribute of every speaker at once (A.5).

    ``template`` default: :data:`DIALOGUE_TEMPLATE` for two or more speakers, :data:`POSTS_TEMPLATE` for one.
    ``system`` None puts no system message (for models whose chat template has none). ``notes`` None:
    :func:`default_notes` (A.5's education note for an education attribute); "" for none."""
    speakers = list(speakers)
    if not speakers:
        raise ValueError("build_prompt: no speakers")
    names = list(attributes)
    if template is None:
        template = DIALOGUE_TEMPLATE if len(speakers) > 1 else POSTS_TEMPLATE
    quoted = {n: "[" + ", ".join(f'"{v}"' for v in attributes[n]) + "]" for n in names}
    accepted = "For this task, " + " ".join(
        ("the" if i == 0 else "The") + f" accepted {n} values are {quoted[n]}." for i, n in enumerate(names))
    fields = {
        "n_speakers": _NUMBER_WORDS[len(speakers)] if len(speakers) < len(_NUMBER_WORDS) else str(len(speakers)),
        "speakers": "speaker " + _join(speakers, "and"),
        "attribute_list": _join([f"({i}) {n}" for i, n in enumerate(names, 1)], "and"),
        "top_guesses": _join([f"top guess for {n}" for n in names], "and"),
        "accepted_values": accepted,
        "notes": default_notes(attributes) if notes is None else notes,
        "transcript": transcript,
        "speaker_options": _join(speakers, "or"),
        "type_options": _join(names, "or"),
    }
    user = template.format(**fields)
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": user}]


# ---------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Guess:
    """One parsed guess. ``guess`` is an allowed value or None; ``raw`` the text after ``Guess:`` (None when
    the answer has no guess for this speaker and attribute); ``valid`` = an allowed value was found."""

    speaker: str
    attribute: str
    guess: str | None
    raw: str | None
    valid: bool


_MARKUP = re.compile(r"\*\*|__|[*`#]")
_BULLET = re.compile(r"^\s*(?:[-+•>]|\d+[.)])\s*")
_FIELD = re.compile(r"(?<![a-z])(speaker|type|inference|guess)\s*[:：]", re.IGNORECASE)
_HEADING = re.compile(r"^\s*speaker\s+([a-z0-9]+)\s*[:：]?\s*$", re.IGNORECASE)


def _clean_lines(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        line = _MARKUP.sub("", line)
        lines.append(_BULLET.sub("", line).strip())
    return lines


def _fields(text: str) -> list[tuple[str, str]]:
    """(field, value) pairs in order. A value runs to the next field label or the line end (inference: to the
    next label); an empty guess takes the next non-empty line. A line holding only ``Speaker X`` is a
    speaker field too (markdown headings)."""
    out: list[tuple[str, str]] = []
    lines = _clean_lines(text)
    for i, line in enumerate(lines):
        if heading := _HEADING.match(line):
            out.append(("speaker", heading.group(1)))
            continue
        matches = list(_FIELD.finditer(line))
        if matches and matches[0].start() > 0 and out and out[-1][0] == "inference":
            out[-1] = ("inference", out[-1][1] + " " + line[:matches[0].start()])
        for j, m in enumerate(matches):
            end = matches[j + 1].start() if j + 1 < len(matches) else len(line)
            value = line[m.end():end].strip().rstrip(",;|").strip()
            name = m.group(1).lower()
            if name == "guess" and not value:
                value = next((nxt for nxt in lines[i + 1:] if nxt and not _FIELD.match(nxt)), "")
            out.append((name, value))
        if not matches and out and out[-1][0] == "inference":
            out[-1] = ("inference", out[-1][1] + " " + line)
    return out


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def _value_pattern(value: str) -> re.Pattern[str]:
    """An allowed value as a whole-word pattern that ignores case, punctuation and spacing ("high school" ==
    "highschool" == "high-school"): optional spaces between its characters, word boundaries around it."""
    chars = [re.escape(c) for c in _norm(value).replace(" ", "")]
    return re.compile(r"(?<![a-z0-9])" + r"\s?".join(chars) + r"(?![a-z0-9])")


def match_value(raw: str, allowed: Sequence[str]) -> str | None:
    """The allowed value a guess names: the one found first in it (the longest where two start at the same
    place), ignoring case, punctuation and spacing; None when none is there (a synonym is not a match)."""
    text = _norm(raw)
    best: tuple[int, int, str] | None = None
    for value in allowed:
        m = _value_pattern(value).search(text)
        if m and (best is None or (m.start(), -len(m.group())) < (best[0], best[1])):
            best = (m.start(), -len(m.group()), value)
    return best[2] if best else None


def _match_speaker(value: str, speakers: Sequence[str]) -> str | None:
    words = _norm(value).split()
    if words and words[0] == "speaker":
        words = words[1:]
    lowered = {s.lower(): s for s in speakers}
    for word in words:
        if word in lowered:
            return lowered[word]
    return None


def _match_attribute(value: str, attributes: Sequence[str]) -> str | None:
    text = _norm(value)
    found = [(m.start(), -len(a), a) for a in attributes if (m := _value_pattern(a).search(text))]
    return min(found)[2] if found else None


def parse_answer(text: str | None, speakers: Sequence[str],
                 attributes: Mapping[str, Sequence[str]]) -> list[Guess]:
    """One :class:`Guess` per (speaker, attribute), speakers outer, in the given orders.

    Tolerates case, markdown (bold, bullets, headings), prose around the blocks, fields on one line, a speaker
    named once for several types. A ``Guess:`` counts for the last speaker and type named before it (the only
    speaker or attribute when there is one); the first guess for a pair wins; a guess naming several values
    gives the first; a guess naming none, or a pair never answered, is invalid (guess None)."""
    speakers = list(speakers)
    names = list(attributes)
    found: dict[tuple[str, str], str] = {}
    speaker = speakers[0] if len(speakers) == 1 else None
    attribute = names[0] if len(names) == 1 else None
    for name, value in _fields(text or ""):
        if name == "speaker":
            speaker = _match_speaker(value, speakers) or (speakers[0] if len(speakers) == 1 else None)
            attribute = names[0] if len(names) == 1 else None
        elif name == "type":
            attribute = _match_attribute(value, names) or (names[0] if len(names) == 1 else None)
        elif name == "guess" and speaker is not None and attribute is not None:
            found.setdefault((speaker, attribute), value)
    out = []
    for s in speakers:
        for a in names:
            raw = found.get((s, a))
            guess = match_value(raw, attributes[a]) if raw is not None else None
            out.append(Guess(speaker=s, attribute=a, guess=guess, raw=raw, valid=guess is not None))
    return out


# ---------------------------------------------------------------- sampling


def stratify_dialogues(corpus: pd.DataFrame, attr: str, seed: int = 0, *, n: int | None = None) -> dict[str, list[str]]:
    """Value -> the units (dialogues) sampled for it: for each value of ``attr``, ``n`` units in which at least
    one speaker has that value, drawn without repetition; ``n`` = the number of units having the rarest value
    (§5.2.2: 13 SwDA conversations with a "less than high school" speaker), or less if given.

    Overlaps: a dialogue whose speakers have different values is eligible for several strata. Strata are
    drawn from the rarest value to the most frequent (ties: by value); each draws first from eligible units
    that no earlier stratum took, so the sample holds as many distinct dialogues as possible; only when too
    few are left is a stratum topped up with units an earlier stratum already took (it still has ``n``
    distinct units, each having its value). Deterministic for a seed (numpy ``default_rng``, units sorted)."""
    column = ATTR_PREFIX + attribute_name(attr)
    if column not in corpus.columns:
        raise InputError(f"attribute '{attribute_name(attr)}' is not in the corpus", column=column)
    units = unit_ids(corpus)
    pairs = pd.DataFrame({"unit": units.to_numpy(), "value": corpus[column].astype("string").to_numpy()}).dropna()
    eligible = {str(v): sorted(set(g["unit"].astype(str))) for v, g in pairs.groupby("value")}
    if not eligible:
        raise InputError(f"attribute '{attribute_name(attr)}' has no values", column=column)
    rarest = min(len(u) for u in eligible.values())
    if n is None:
        n = rarest
    elif not 0 < n <= rarest:
        raise ConfigError(f"llm_profiling.n: {n} is outside 1..{rarest} (units with the rarest value)")
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    strata: dict[str, list[str]] = {}
    for value in sorted(eligible, key=lambda v: (len(eligible[v]), v)):
        fresh = [u for u in eligible[value] if u not in taken]
        k = min(n, len(fresh))
        chosen = [fresh[i] for i in sorted(rng.choice(len(fresh), size=k, replace=False))] if k else []
        if k < n:
            reused = [u for u in eligible[value] if u in taken]
            chosen += [reused[i] for i in sorted(rng.choice(len(reused), size=n - k, replace=False))]
        strata[value] = chosen
        taken.update(chosen)
    return strata


def stratified_dialogues(corpus: pd.DataFrame, attr: str, seed: int = 0, *, n: int | None = None) -> list[str]:
    """The units of :func:`stratify_dialogues`, each once, in stratum order."""
    out: dict[str, None] = {}
    for units in stratify_dialogues(corpus, attr, seed, n=n).values():
        out.update(dict.fromkeys(units))
    return list(out)


# ---------------------------------------------------------------- the attack


@dataclass
class LLMProfilingResult:
    """What the attack produced.

    - ``predictions``: one row per (strategy, variant, group_id, speaker, attribute): author_id, gold, guess,
      raw_guess, valid, correct (null when no gold), answer (the model's whole text), error.
    - ``prompts``: one row per prompt: strategy, variant, group_id, n_speakers, n_turns, missing_turns, answer,
      error, latency_s, cached.
    - ``accuracy``: per (strategy, variant, attribute): n (scored rows), n_valid, n_correct, accuracy,
      chance (mean of 1/number of allowed values).
    - ``success``: per (strategy, variant): n_dialogues, n_success (every scored attribute of every speaker
      right), success_rate, chance (the random baseline of that), n_failed_requests.
    - ``strata``: value -> sampled units; ``attributes``: name -> allowed values."""

    predictions: pd.DataFrame
    prompts: pd.DataFrame
    accuracy: pd.DataFrame
    success: pd.DataFrame
    strata: dict[str, list[str]]
    attributes: dict[str, list[str]]
    signature: str
    n_failed_requests: int = 0
    stratified_by: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def accuracy_of(self, attribute: str, strategy: str = ORIGINAL, variant: str = "") -> float:
        """The accuracy of one attribute on one data source (nan when nothing was scored)."""
        row = self.accuracy[(self.accuracy["strategy"] == strategy) & (self.accuracy["variant"] == variant)
                            & (self.accuracy["attribute"] == attribute_name(attribute))]
        return float(row["accuracy"].iloc[0]) if len(row) else float("nan")

    def success_rate(self, strategy: str = ORIGINAL, variant: str = "") -> float:
        """The share of dialogues with every attribute of every speaker right (nan when none was scored)."""
        row = self.success[(self.success["strategy"] == strategy) & (self.success["variant"] == variant)]
        return float(row["success_rate"].iloc[0]) if len(row) else float("nan")


@dataclass
class _Unit:
    group_id: str
    rows: pd.DataFrame
    labels: dict[str, str]  # author key -> label
    gold: dict[tuple[str, str], str | None]  # (label, attribute) -> gold value


def _gold(rows: pd.DataFrame, attributes: Mapping[str, Sequence[str]]) -> dict[tuple[str, str], str | None]:
    labels = speaker_labels(rows)
    keys = _speaker_keys(rows)
    out: dict[tuple[str, str], str | None] = {}
    for name in attributes:
        values = rows[ATTR_PREFIX + name].astype("string").tolist() if ATTR_PREFIX + name in rows.columns \
            else [None] * len(rows)
        for key, label in labels.items():
            mine = [str(v) for k, v in zip(keys, values, strict=True) if k == key and not pd.isna(v)]
            out[(label, name)] = pd.Series(mine).value_counts(sort=True).index[0] if mine else None
    return out


def _synthetic_texts(synthetic: pd.DataFrame, doc_ids: set[str]) -> dict[tuple[str, str], dict[str, str]]:
    """(strategy, variant) -> doc_id -> synthetic text (status ok, non-empty, first row per doc). Every
    (strategy, variant) of the table is there, even one without a usable row (its prompts then fail)."""
    if "doc_id" not in synthetic.columns or "text" not in synthetic.columns:
        raise InputError("the synthetic table needs doc_id and text columns", file="synthetic")

    def column(name: str, default: str) -> pd.Series:
        if name not in synthetic.columns:
            return pd.Series(default, index=synthetic.index, dtype="string")
        return synthetic[name].astype("string").fillna(default)

    strategy, variant = column("strategy", "synthetic"), column("variant", "")
    ok = synthetic["doc_id"].astype(str).isin(doc_ids)
    if "status" in synthetic.columns:
        ok &= synthetic["status"].astype("string").fillna("") == "ok"
    out: dict[tuple[str, str], dict[str, str]] = {}
    for s, v, d, t, use in zip(strategy, variant, synthetic["doc_id"].astype(str), synthetic["text"], ok, strict=True):
        texts = out.setdefault((str(s), str(v)), {})
        if use and isinstance(t, str) and t.strip():
            texts.setdefault(d, t)
    return out or {("synthetic", ""): {}}


def _summaries(pred: pd.DataFrame, prompts: pd.DataFrame,
               attributes: Mapping[str, Sequence[str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    scored = pred[pred["gold"].notna()].copy()
    scored["chance"] = [1.0 / len(attributes[a]) for a in scored["attribute"]]
    scored["correct_i"] = scored["correct"].astype(bool).astype(int)
    acc_rows = []
    for (s, v, a), g in scored.groupby(["strategy", "variant", "attribute"], sort=False):
        acc_rows.append({"strategy": s, "variant": v, "attribute": a, "n": len(g), "n_valid": int(g["valid"].sum()),
                         "n_correct": int(g["correct_i"].sum()), "accuracy": float(g["correct_i"].mean()),
                         "chance": float(g["chance"].mean())})
    accuracy = pd.DataFrame(acc_rows, columns=["strategy", "variant", "attribute", "n", "n_valid", "n_correct",
                                               "accuracy", "chance"])
    succ_rows = []
    for (s, v), p in prompts.groupby(["strategy", "variant"], sort=False):
        g = scored[(scored["strategy"] == s) & (scored["variant"] == v)]
        per = g.groupby("group_id").agg(ok=("correct_i", "min"), chance=("chance", "prod"))
        n = len(per)
        succ_rows.append({"strategy": s, "variant": v, "n_dialogues": n, "n_success": int(per["ok"].sum()),
                          "success_rate": float(per["ok"].mean()) if n else float("nan"),
                          "chance": float(per["chance"].mean()) if n else float("nan"),
                          "n_failed_requests": int(p["error"].notna().sum())})
    success = pd.DataFrame(succ_rows, columns=["strategy", "variant", "n_dialogues", "n_success", "success_rate",
                                               "chance", "n_failed_requests"])
    return accuracy, success


def llm_profile(corpus: pd.DataFrame, *, backend: LLMBackend,
                attributes: Sequence[str] | Mapping[str, Sequence[str]] | None = None, seed: int = 0,
                max_tokens: int = 1024, temperature: float = 0.0, synthetic: pd.DataFrame | None = None,
                stratify_by: str | None = None, n: int | None = None, dialogues: Sequence[str] | None = None,
                template: str | None = None, system: str | None = DEFAULT_SYSTEM,
                notes: str | None = None) -> LLMProfilingResult:
    """Run the zero-shot profiling attack on the sampled units of ``corpus`` and, given ``synthetic``, on their
    synthetic versions (per strategy and variant).

    Units are sampled with :func:`stratify_dialogues` on ``stratify_by`` (default: the attribute with the most
    values, e.g. education in SwDA; ties: the first) unless ``dialogues`` names them. ``max_tokens`` must
    leave room for the reasoning the prompt asks for (1024 by default). See the module docstring for the
    choices; backend failures are wrong guesses with their error, never an exception. ``notes`` None:
    :func:`default_notes` (A.5's education note when education is profiled)."""
    attrs = attribute_values(corpus, attributes)
    notes = default_notes(attrs) if notes is None else notes
    units_of = unit_ids(corpus)
    if dialogues is not None:
        chosen = [str(d) for d in dict.fromkeys(dialogues)]
        unknown = sorted(set(chosen) - set(units_of.astype(str)))
        if unknown:
            raise InputError(f"dialogue '{unknown[0]}' is not in the corpus", column="group_id")
        strata: dict[str, list[str]] = {}
        stratified_by = None
    else:
        stratified_by = attribute_name(stratify_by) if stratify_by else max(attrs, key=lambda a: len(attrs[a]))
        strata = stratify_dialogues(corpus, stratified_by, seed, n=n)
        chosen = list(dict.fromkeys(u for units in strata.values() for u in units))

    table = corpus.assign(_unit=units_of.astype(str).to_numpy())
    by_unit = {u: g.drop(columns="_unit") for u, g in table[table["_unit"].isin(set(chosen))].groupby("_unit")}
    units = []
    for u in chosen:
        rows = _ordered(by_unit[u])
        units.append(_Unit(group_id=u, rows=rows, labels=speaker_labels(rows), gold=_gold(rows, attrs)))

    sources: list[tuple[str, str, dict[str, str] | None]] = [(ORIGINAL, "", None)]
    if synthetic is not None:
        doc_ids = {str(d) for unit in units for d in unit.rows["doc_id"].tolist()}
        sources += [(s, v, texts) for (s, v), texts in _synthetic_texts(synthetic, doc_ids).items()]

    jobs: list[dict[str, object]] = []
    requests: list[ChatRequest] = []
    for strategy, variant, texts in sources:
        for unit in units:
            turns: list[str | None] | None = None
            if texts is not None:
                turns = [texts.get(str(d)) for d in unit.rows["doc_id"].tolist()]
            transcript = build_transcript(unit.rows, turns)
            job: dict[str, object] = {"strategy": strategy, "variant": variant, "group_id": unit.group_id,
                                      "n_speakers": len(unit.labels), "n_turns": len(unit.rows),
                                      "missing_turns": sum(t is None for t in turns) if turns is not None else 0,
                                      "unit": unit, "request": None}
            if transcript:
                messages = build_prompt(transcript, list(unit.labels.values()), attrs, template=template,
                                        system=system, notes=notes)
                job["request"] = len(requests)
                requests.append(ChatRequest(messages, temperature=temperature, max_tokens=max_tokens, seed=seed))
            jobs.append(job)

    results = _complete(backend, requests)
    pred_rows, prompt_rows = [], []
    for job in jobs:
        unit = job["unit"]
        assert isinstance(unit, _Unit)
        index = job["request"]
        if index is None:
            answer, error, latency, cached = None, "no synthetic text", 0.0, False
        else:
            result = results[int(index)]  # type: ignore[call-overload]
            answer = result.texts[0] if result.ok and result.texts else None
            error = None if result.ok else (result.error or "empty result")
            latency, cached = result.latency_s, result.cached
        base = {"strategy": job["strategy"], "variant": job["variant"], "group_id": unit.group_id}
        prompt_rows.append({**base, **{k: job[k] for k in ("n_speakers", "n_turns", "missing_turns")},
                            "answer": answer, "error": error, "latency_s": latency, "cached": cached})
        authors = {label: key for key, label in unit.labels.items()}
        for g in parse_answer(answer, list(unit.labels.values()), attrs):
            gold = unit.gold[(g.speaker, g.attribute)]
            pred_rows.append({**base, "speaker": g.speaker, "author_id": authors[g.speaker], "attribute": g.attribute,
                              "gold": gold, "guess": g.guess, "raw_guess": g.raw, "valid": g.valid,
                              "correct": None if gold is None else bool(g.valid and g.guess == gold),
                              "answer": answer, "error": error})
    pred = pd.DataFrame(pred_rows, columns=["strategy", "variant", "group_id", "speaker", "author_id", "attribute",
                                            "gold", "guess", "raw_guess", "valid", "correct", "answer", "error"])
    pred["correct"] = pred["correct"].astype("boolean")
    prompts = pd.DataFrame(prompt_rows, columns=["strategy", "variant", "group_id", "n_speakers", "n_turns",
                                                 "missing_turns", "answer", "error", "latency_s", "cached"])
    accuracy, success = _summaries(pred, prompts, attrs)
    used = template if template is not None else f"{DIALOGUE_TEMPLATE}|{POSTS_TEMPLATE}"
    template_id = hashlib.sha256(f"{used}|{system}|{notes}".encode()).hexdigest()[:8]  # what was asked, exactly
    signature = make_signature("llm_profiling", model=getattr(backend, "model", "") or type(backend).__name__,
                               temperature=f"{temperature:g}", max_tokens=max_tokens, seed=seed,
                               stratify=stratified_by or "given", n=len(next(iter(strata.values()))) if strata else
                               len(chosen), attrs="+".join(attrs), template=template_id)
    return LLMProfilingResult(predictions=pred, prompts=prompts, accuracy=accuracy, success=success, strata=strata,
                              attributes=attrs, signature=signature,
                              n_failed_requests=int(prompts["error"].notna().sum()), stratified_by=stratified_by)


def _complete(backend: LLMBackend, requests: list[ChatRequest]) -> list[ChatResult]:
    """``backend.complete`` for every request at once; a backend that raises or answers the wrong number of
    results fails every request with that reason (the attack records them as wrong)."""
    if not requests:
        return []
    try:
        results = list(backend.complete(requests))
    except Exception as exc:  # a broken backend must not sink the privacy stage
        line = (str(exc).strip().splitlines() or [""])[0][:160]
        return [ChatResult(texts=None, error=f"backend failed ({type(exc).__name__}: {line})")] * len(requests)
    if len(results) != len(requests):
        return [ChatResult(texts=None, error=f"backend returned {len(results)} results for {len(requests)} "
                                             "requests")] * len(requests)
    return results
