"""Back-translation: English -> pivot language -> English, one labelled variant per pivot.

The article back-translates with mBART through a close (German) and a distant (Chinese) pivot (Tang
et al. 2021, following Adelani et al. 2021). ``pivots: [...]`` lists the pivots; each gives its own
variant ``pivot-<code>`` (one row per input and pivot), so one configured strategy yields both of the
article's rows. A chain through several languages is written ``spa>cat`` (eng->spa->cat->eng). Backends:

- ``apertium`` (default, offline): rule-based MT from Debian's ``apertium`` and its language pairs.
  Default pivots ``[eo, hbs]``: measured round-trip divergence (1 - corpus BLEU of the round trip
  against the source, ``benchmarks/backtranslate_pivots.py``, 200 debate sentences) ranks the
  English pairs that go both ways: Esperanto 0.49 (closest), Spanish 0.51, Galician 0.56, Catalan
  0.61, Serbo-Croatian 0.72 (farthest); Basque, Icelandic and Macedonian have only the X->English
  direction in Debian. Pair names differ (``eng-spa`` but ``en-eo``): the English code each pair
  uses is looked up in ``apertium -l``. Each call costs ~0.4 s of start-up, so every text of a batch
  goes through one call per hop: apertium keeps line breaks 1:1, so texts are sent one text-line per
  line and regrouped by their line counts, which are checked.
- ``marian``: Hugging Face seq2seq models (``Helsinki-NLP/opus-mt-{src}-{tgt}`` by default, one per
  hop), loaded from ``model_dir`` (a folder holding ``opus-mt-en-de``, ``opus-mt-de-en``, ...), from
  the local Hugging Face cache, or downloaded when ``allow_download`` is set. A multilingual model
  (mBART-50, M2M100, NLLB: ``model_template`` without ``{src}``/``{tgt}``, e.g.
  ``facebook/mbart-large-50-many-to-many-mmt``) is told the languages: ``tokenizer.src_lang`` is set
  to the source code and generation is forced to start with the target language token
  (``forced_bos_token_id``); codes come from ``lang_codes`` (mBART-50 codes by default: en_XX, de_DE,
  zh_CN, ...).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.errors import STRICT_INPUT, ModelUnavailable
from tasks.generate.base import Strategy, register_strategy
from tasks.limits import MAX_BATCH, MAX_REPEATS, MAX_SECONDS, MAX_SHARD, MAX_TOKENS

SOURCE_LANG = "eng"
#: ISO 639-3 (apertium) to ISO 639-1 (OPUS-MT model names).
_ISO1 = {"eng": "en", "spa": "es", "deu": "de", "zho": "zh", "fra": "fr", "cat": "ca", "ita": "it",
         "por": "pt", "nld": "nl", "rus": "ru", "jpn": "ja", "glg": "gl", "ron": "ro"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_SPACES = re.compile(r" {2,}")
_SPACE_BEFORE_PUNCT = re.compile(r" +([.,;:!?%)\]}])")


class BacktranslateParams(BaseModel):
    """Params of the ``backtranslate`` strategy."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)

    backend: Literal["apertium", "marian"] = Field(
        "apertium", description="apertium: offline rule-based MT (Debian package); marian: OPUS-MT/seq2seq models")
    pivots: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PIVOTS),
        description="one variant per entry: English -> pivot -> English (a chain: spa>cat); apertium codes "
                    "(eo, spa) or ISO 639-1 codes (de, zh) for marian")
    batch_lines: int = Field(
        5000, ge=1, le=MAX_SHARD, description="apertium: most text-lines per subprocess call (texts are never split across calls)")
    timeout_s: float = Field(600.0, gt=0, le=MAX_SECONDS,
                             description="apertium: seconds one subprocess call may take")
    model_dir: str | None = Field(
        None, description="marian: folder holding one model folder per hop, named like opus-mt-en-de")
    model_template: str = Field(
        "Helsinki-NLP/opus-mt-{src}-{tgt}", description="marian: model id per hop (its last part names the folder)")
    allow_download: bool = Field(False, description="marian: let transformers download missing models")
    batch_size: int = Field(16, ge=1, le=MAX_BATCH, description="marian: lines per forward pass")
    num_beams: int = Field(4, ge=1, le=MAX_REPEATS, description="marian: beam width (beam search is deterministic)")
    max_new_tokens: int = Field(256, ge=1, le=MAX_TOKENS, description="marian: most tokens generated per line")
    device: str | None = Field(None, description="marian: torch device (default: cuda when available, else cpu)")
    lang_codes: dict[str, str] = Field(
        default_factory=dict, description="marian, multilingual model: ISO code -> the model's language token "
                                          "(default: mBART-50's, e.g. de -> de_DE)")

    @field_validator("pivots")
    @classmethod
    def _check_pivots(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("needs at least one pivot language")
        for entry in value:
            for code in entry.split(">"):
                if not re.fullmatch(r"[a-z]{2,3}(_[A-Za-z]+)?", code):
                    raise ValueError(f"'{code}' is not a language code like spa or de")
        if len(set(value)) != len(value):
            raise ValueError(f"pivots repeat: {value}")
        return value


#: Measured closest and farthest apertium pivots (see the module docstring).
DEFAULT_PIVOTS: tuple[str, ...] = ("eo", "hbs")
#: Debian package of each apertium pair with English (names do not follow one pattern).
APERTIUM_PACKAGES = {"spa": "apertium-eng-spa", "cat": "apertium-eng-cat", "gl": "apertium-en-gl",
                     "eo": "apertium-eo-en", "hbs": "apertium-hbs-eng", "eu": "apertium-eu-en",
                     "isl": "apertium-isl-eng", "mkd": "apertium-mkd-eng"}
#: mBART-50 language tokens for the ISO 639-1 codes most used as pivots.
MBART50_CODES = {"en": "en_XX", "de": "de_DE", "zh": "zh_CN", "fr": "fr_XX", "es": "es_XX", "it": "it_IT",
                 "ja": "ja_XX", "ru": "ru_RU", "pt": "pt_XX", "nl": "nl_XX", "ro": "ro_RO", "cs": "cs_CZ",
                 "ar": "ar_AR", "ko": "ko_KR", "tr": "tr_TR", "fi": "fi_FI", "et": "et_EE", "gl": "gl_ES"}


def pivot_chain(pivot: str) -> list[str]:
    """The languages one ``pivots`` entry goes through: ``spa`` -> [spa]; ``spa>cat`` -> [spa, cat]."""
    return pivot.split(">")


def _hops(source: str, pivots: list[str]) -> list[tuple[str, str]]:
    chain = [source, *pivots, source]
    return list(itertools.pairwise(chain))


def _clean_line(line: str) -> str:
    """Undo apertium's spacing artefacts (double spaces, a space before punctuation)."""
    return _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACES.sub(" ", line)).strip()


def split_text_lines(text: str) -> list[str]:
    """A text's lines as apertium sees them (it breaks lines at \\n and at \\r)."""
    return _LINE_BREAK.split(text)


_ENGLISH_CODES = ("eng", "en")


def _apertium_pair(src: str, tgt: str, pairs: set[str]) -> str | None:
    """The installed apertium pair for one hop, whichever English code (eng/en) it uses; None if absent."""
    for a in (_ENGLISH_CODES if src in _ENGLISH_CODES else (src,)):
        for b in (_ENGLISH_CODES if tgt in _ENGLISH_CODES else (tgt,)):
            if f"{a}-{b}" in pairs:
                return f"{a}-{b}"
    return None


class _Apertium:
    """Runs apertium pairs over many lines with one subprocess call per hop and chunk."""

    def __init__(self, hops: list[tuple[str, str]], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        exe = shutil.which("apertium")
        if exe is None:
            raise ModelUnavailable(_apertium_missing(*hops[0]))
        self.exe = exe
        try:
            listed = subprocess.run([exe, "-l"], capture_output=True, text=True, timeout=60, check=False).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise ModelUnavailable(f"backtranslate: `apertium -l` failed ({exc})") from None
        pairs = set(listed.split())
        self.pairs: list[str] = []
        for src, tgt in hops:
            pair = _apertium_pair(src, tgt, pairs)
            if pair is None:
                raise ModelUnavailable(_apertium_missing(src, tgt))
            self.pairs.append(pair)

    def translate(self, lines: list[str]) -> list[str]:
        """Translate lines through every hop; the output has exactly one line per input line."""
        for pair in self.pairs:
            payload = "".join(line + "\n" for line in lines)
            proc = subprocess.run([self.exe, "-u", pair], input=payload, capture_output=True,
                                  text=True, encoding="utf-8", errors="replace", timeout=self.timeout_s,
                                  check=False)
            if proc.returncode != 0:
                err = " ".join(proc.stderr.split())[:300]
                raise RuntimeError(f"apertium {pair} exited with code {proc.returncode}: {err}")
            out = proc.stdout[:-1] if proc.stdout.endswith("\n") else proc.stdout
            got = out.split("\n") if lines else []
            if len(got) != len(lines):
                raise RuntimeError(f"apertium {pair} returned {len(got)} lines for {len(lines)}; "
                                   "the text-to-output mapping cannot be trusted")
            lines = [_clean_line(line) for line in got]
        return lines


def _apertium_missing(src: str, tgt: str) -> str:
    other = tgt if src in _ENGLISH_CODES else src
    package = APERTIUM_PACKAGES.get(other, f"apertium-{min(src, tgt)}-{max(src, tgt)}")
    return (f"backtranslate: apertium {src}-{tgt} is not installed; install with "
            f"`apt-get install apertium {package}` (make setup does this where apt is available)")


class _Seq2Seq:
    """One Hugging Face translation model per hop (MarianMT or any AutoModelForSeq2SeqLM); a multilingual
    model (one id for every hop) is loaded once and told the languages of each hop."""

    def __init__(self, hops: list[tuple[str, str]], params: BacktranslateParams) -> None:
        self.params = params
        self.hops = [(_ISO1.get(src, src), _ISO1.get(tgt, tgt)) for src, tgt in hops]
        self.sources = [self._resolve(src, tgt) for src, tgt in self.hops]
        self._loaded: dict[str, tuple[Any, Any]] = {}

    def _resolve(self, src: str, tgt: str) -> str:
        """Where the model of one hop loads from; ModelUnavailable (one line) when it is not local."""
        p = self.params
        model_id = p.model_template.format(src=src, tgt=tgt)
        if p.model_dir:
            folder = Path(p.model_dir) / model_id.rsplit("/", 1)[-1]
            if (folder / "config.json").is_file():
                return str(folder)
            if not p.allow_download:
                raise ModelUnavailable(
                    f"backtranslate: translation model {model_id} is not in {folder} (no config.json); "
                    f"save it there (save_pretrained) or set strategies.backtranslate.allow_download: true")
        if Path(model_id).is_dir() or p.allow_download or _in_hf_cache(model_id):
            return model_id
        raise ModelUnavailable(
            f"backtranslate: translation model {model_id} is not available offline; put it in a folder "
            f"and set strategies.backtranslate.model_dir (expects <model_dir>/{model_id.rsplit('/', 1)[-1]}), "
            f"or set strategies.backtranslate.allow_download: true")

    def _load(self, source: str) -> tuple[Any, Any]:
        if source not in self._loaded:
            import torch
            from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

            device = self.params.device or ("cuda" if torch.cuda.is_available() else "cpu")
            local_only = not self.params.allow_download
            try:
                tok = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
                model = AutoModelForSeq2SeqLM.from_pretrained(source, local_files_only=local_only)
            except (OSError, ValueError, ImportError) as exc:
                raise ModelUnavailable(f"backtranslate: cannot load translation model {source}: "
                                       f"{' '.join(str(exc).split())[:300]}") from None
            self._loaded[source] = (tok, model.to(device).eval())
        return self._loaded[source]

    def language_token(self, tok: Any, code: str) -> str | None:
        """The model's token for language ``code`` (``lang_codes``, mBART-50's table, or the code itself),
        None when the tokenizer has no such token (a bilingual model such as Marian needs none)."""
        for name in (self.params.lang_codes.get(code), MBART50_CODES.get(code), code, f"__{code}__"):
            if name and name in tok.get_vocab():
                return name
        return None

    def generation_kwargs(self, tok: Any, src: str, tgt: str) -> dict[str, Any]:
        """Set ``tok.src_lang`` and return ``forced_bos_token_id`` for a multilingual model's hop; {} else."""
        src_token, tgt_token = self.language_token(tok, src), self.language_token(tok, tgt)
        if tgt_token is None:
            return {}
        if src_token is not None and hasattr(tok, "src_lang"):
            tok.src_lang = src_token
        return {"forced_bos_token_id": tok.convert_tokens_to_ids(tgt_token)}

    def translate(self, lines: list[str], seed: int) -> list[str]:
        import torch

        torch.manual_seed(seed)
        p = self.params
        for (src, tgt), source in zip(self.hops, self.sources, strict=True):
            tok, model = self._load(source)
            extra = self.generation_kwargs(tok, src, tgt)
            todo = [i for i, line in enumerate(lines) if line.strip()]
            out = list(lines)
            for start in range(0, len(todo), p.batch_size):
                idx = todo[start:start + p.batch_size]
                enc = tok([lines[i] for i in idx], return_tensors="pt", padding=True, truncation=True)
                enc = {k: v.to(model.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                with torch.inference_mode():
                    gen = model.generate(**enc, num_beams=p.num_beams, max_new_tokens=p.max_new_tokens,
                                         do_sample=False, **extra)
                for i, text in zip(idx, tok.batch_decode(gen, skip_special_tokens=True), strict=True):
                    out[i] = " ".join(text.split())
            lines = out
        return lines


def _in_hf_cache(model_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    found = try_to_load_from_cache(model_id, "config.json", cache_dir=os.environ.get("HF_HUB_CACHE"))
    return isinstance(found, str)


@register_strategy("backtranslate", params=BacktranslateParams)
class Backtranslate(Strategy):
    """English -> pivot -> English, one variant per pivot; checks the backend is installed when constructed."""

    params: BacktranslateParams

    def __init__(self, params: BacktranslateParams) -> None:
        super().__init__(params)
        self._engines: list[_Apertium | _Seq2Seq] = []
        for pivot in params.pivots:
            hops = _hops(SOURCE_LANG, pivot_chain(pivot))
            self._engines.append(_Apertium(hops, params.timeout_s) if params.backend == "apertium"
                                 else _Seq2Seq(hops, params))

    @property
    def variant(self) -> str:
        return self.variants[0]

    @property
    def variants(self) -> list[str]:
        """``pivot-<code>`` per configured pivot (a chain ``spa>cat`` is ``pivot-spa-cat``)."""
        return ["pivot-" + "-".join(pivot_chain(p)) for p in self.params.pivots]

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[list[str | Exception]]:
        """Back-translate every text through each pivot: per text, one output per variant."""
        per_pivot = [self._translate(engine, batch, seed) for engine in self._engines]
        return [list(outs) for outs in zip(*per_pivot, strict=True)] if per_pivot else []

    def _translate(self, engine: _Apertium | _Seq2Seq, batch: pd.DataFrame, seed: int) -> list[str | Exception]:
        """One pivot over the batch; texts go in chunks of whole texts, a failed chunk fails its rows."""
        results: list[str | Exception] = [ValueError("not translated")] * len(batch)
        chunk: list[tuple[int, list[str]]] = []
        n_lines = 0

        def flush() -> None:
            nonlocal chunk, n_lines
            if not chunk:
                return
            lines = [line for _, doc_lines in chunk for line in doc_lines]
            try:
                if isinstance(engine, _Apertium):
                    out = engine.translate(lines)
                else:
                    out = engine.translate(lines, seed)
            except ModelUnavailable:
                raise
            except Exception as exc:
                for i, _ in chunk:
                    results[i] = exc
            else:
                pos = 0
                for i, doc_lines in chunk:
                    results[i] = "\n".join(out[pos:pos + len(doc_lines)])
                    pos += len(doc_lines)
            chunk, n_lines = [], 0

        for i, text in enumerate(batch["text"].tolist()):
            if not isinstance(text, str):
                results[i] = TypeError(f"text is not a string ({type(text).__name__})")
                continue
            doc_lines = [line.replace("\x00", "").strip() for line in split_text_lines(text)]
            if n_lines and n_lines + len(doc_lines) > self.params.batch_lines:
                flush()
            chunk.append((i, doc_lines))
            n_lines += len(doc_lines)
        flush()
        return results
