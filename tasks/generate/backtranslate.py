"""Back-translation: English -> pivot language(s) -> English.

The article back-translates with mBART through German and Chinese pivots (Tang et al. 2021,
following Adelani et al. 2021). Two backends:

- ``apertium`` (default, offline): rule-based MT from Debian's ``apertium`` and a language pair
  (``apertium-eng-spa`` gives eng->spa->eng). It is the only translation that installs offline here.
  Each call costs ~0.4 s of start-up, so every text of a batch goes through one call per hop:
  apertium keeps line breaks 1:1, so texts are sent one text-line per line and regrouped by their
  line counts, which are checked.
- ``marian``: Hugging Face seq2seq models (``Helsinki-NLP/opus-mt-{src}-{tgt}`` by default, one per
  hop), loaded from ``model_dir`` (a folder holding ``opus-mt-en-de``, ``opus-mt-de-en``, ...), from
  the local Hugging Face cache, or downloaded when ``allow_download`` is set.

The params choose one pivot chain (``pivots: [spa]`` is eng->spa->eng; ``[spa, cat]`` is
eng->spa->cat->eng); the variant records it (``pivot-spa``), so DE and CN runs of the article are
two configured instances of this strategy with variants ``pivot-de`` and ``pivot-zh``.
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

from tasks.errors import ModelUnavailable
from tasks.generate.base import Strategy, register_strategy

SOURCE_LANG = "eng"
#: ISO 639-3 (apertium) to ISO 639-1 (OPUS-MT model names).
_ISO1 = {"eng": "en", "spa": "es", "deu": "de", "zho": "zh", "fra": "fr", "cat": "ca", "ita": "it",
         "por": "pt", "nld": "nl", "rus": "ru", "jpn": "ja", "glg": "gl", "ron": "ro"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_SPACES = re.compile(r" {2,}")
_SPACE_BEFORE_PUNCT = re.compile(r" +([.,;:!?%)\]}])")


class BacktranslateParams(BaseModel):
    """Params of the ``backtranslate`` strategy."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["apertium", "marian"] = Field(
        "apertium", description="apertium: offline rule-based MT (Debian package); marian: OPUS-MT/seq2seq models")
    pivots: list[str] = Field(
        default_factory=lambda: ["spa"],
        description="the pivot chain: English -> pivots[0] -> ... -> English; apertium codes (spa) "
                    "or ISO 639-1 codes (de, zh) for marian")
    batch_lines: int = Field(
        5000, ge=1, description="apertium: most text-lines per subprocess call (texts are never split across calls)")
    timeout_s: float = Field(600.0, gt=0, description="apertium: seconds one subprocess call may take")
    model_dir: str | None = Field(
        None, description="marian: folder holding one model folder per hop, named like opus-mt-en-de")
    model_template: str = Field(
        "Helsinki-NLP/opus-mt-{src}-{tgt}", description="marian: model id per hop (its last part names the folder)")
    allow_download: bool = Field(False, description="marian: let transformers download missing models")
    batch_size: int = Field(16, ge=1, description="marian: lines per forward pass")
    num_beams: int = Field(4, ge=1, description="marian: beam width (beam search is deterministic)")
    max_new_tokens: int = Field(256, ge=1, description="marian: most tokens generated per line")
    device: str | None = Field(None, description="marian: torch device (default: cuda when available, else cpu)")

    @field_validator("pivots")
    @classmethod
    def _check_pivots(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("needs at least one pivot language")
        for code in value:
            if not re.fullmatch(r"[a-z]{2,3}(_[A-Za-z]+)?", code):
                raise ValueError(f"'{code}' is not a language code like spa or de")
        return value


def _hops(source: str, pivots: list[str]) -> list[tuple[str, str]]:
    chain = [source, *pivots, source]
    return list(itertools.pairwise(chain))


def _clean_line(line: str) -> str:
    """Undo apertium's spacing artefacts (double spaces, a space before punctuation)."""
    return _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACES.sub(" ", line)).strip()


def split_text_lines(text: str) -> list[str]:
    """A text's lines as apertium sees them (it breaks lines at \\n and at \\r)."""
    return _LINE_BREAK.split(text)


class _Apertium:
    """Runs apertium pairs over many lines with one subprocess call per hop and chunk."""

    def __init__(self, hops: list[tuple[str, str]], timeout_s: float) -> None:
        self.hops, self.timeout_s = hops, timeout_s
        exe = shutil.which("apertium")
        pair = f"{hops[0][0]}-{hops[0][1]}"
        if exe is None:
            raise ModelUnavailable(_apertium_missing(pair))
        self.exe = exe
        try:
            listed = subprocess.run([exe, "-l"], capture_output=True, text=True, timeout=60, check=False).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise ModelUnavailable(f"backtranslate: `apertium -l` failed ({exc})") from None
        pairs = set(listed.split())
        for src, tgt in hops:
            if f"{src}-{tgt}" not in pairs:
                raise ModelUnavailable(_apertium_missing(f"{src}-{tgt}"))

    def translate(self, lines: list[str]) -> list[str]:
        """Translate lines through every hop; the output has exactly one line per input line."""
        for src, tgt in self.hops:
            payload = "".join(line + "\n" for line in lines)
            proc = subprocess.run([self.exe, "-u", f"{src}-{tgt}"], input=payload, capture_output=True,
                                  text=True, encoding="utf-8", errors="replace", timeout=self.timeout_s,
                                  check=False)
            if proc.returncode != 0:
                err = " ".join(proc.stderr.split())[:300]
                raise RuntimeError(f"apertium {src}-{tgt} exited with code {proc.returncode}: {err}")
            out = proc.stdout[:-1] if proc.stdout.endswith("\n") else proc.stdout
            got = out.split("\n") if lines else []
            if len(got) != len(lines):
                raise RuntimeError(f"apertium {src}-{tgt} returned {len(got)} lines for {len(lines)}; "
                                   "the text-to-output mapping cannot be trusted")
            lines = [_clean_line(line) for line in got]
        return lines


def _apertium_missing(pair: str) -> str:
    a, b = pair.split("-", 1)
    package = f"apertium-{min(a, b)}-{max(a, b)}"
    return (f"backtranslate: apertium {package.removeprefix('apertium-')} is not installed; install with "
            f"`apt-get install apertium {package}` (make setup does this where apt is available)")


class _Seq2Seq:
    """One Hugging Face translation model per hop (MarianMT or any AutoModelForSeq2SeqLM)."""

    def __init__(self, hops: list[tuple[str, str]], params: BacktranslateParams) -> None:
        self.params = params
        self.sources = [self._resolve(src, tgt) for src, tgt in hops]
        self._loaded: list[tuple[Any, Any]] | None = None

    def _resolve(self, src: str, tgt: str) -> str:
        """Where the model of one hop loads from; ModelUnavailable (one line) when it is not local."""
        p = self.params
        model_id = p.model_template.format(src=_ISO1.get(src, src), tgt=_ISO1.get(tgt, tgt))
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

    def _load(self) -> list[tuple[Any, Any]]:
        if self._loaded is None:
            import torch
            from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

            device = self.params.device or ("cuda" if torch.cuda.is_available() else "cpu")
            local_only = not self.params.allow_download
            loaded = []
            for source in self.sources:
                try:
                    tok = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
                    model = AutoModelForSeq2SeqLM.from_pretrained(source, local_files_only=local_only)
                except (OSError, ValueError, ImportError) as exc:
                    raise ModelUnavailable(f"backtranslate: cannot load translation model {source}: "
                                           f"{' '.join(str(exc).split())[:300]}") from None
                loaded.append((tok, model.to(device).eval()))
            self._loaded = loaded
        return self._loaded

    def translate(self, lines: list[str], seed: int) -> list[str]:
        import torch

        torch.manual_seed(seed)
        p = self.params
        for tok, model in self._load():
            todo = [i for i, line in enumerate(lines) if line.strip()]
            out = list(lines)
            for start in range(0, len(todo), p.batch_size):
                idx = todo[start:start + p.batch_size]
                enc = tok([lines[i] for i in idx], return_tensors="pt", padding=True, truncation=True)
                enc = {k: v.to(model.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                with torch.inference_mode():
                    gen = model.generate(**enc, num_beams=p.num_beams, max_new_tokens=p.max_new_tokens,
                                         do_sample=False)
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
    """English -> pivot chain -> English; checks the backend is installed when constructed."""

    params: BacktranslateParams

    def __init__(self, params: BacktranslateParams) -> None:
        super().__init__(params)
        hops = _hops(SOURCE_LANG, params.pivots)
        if params.backend == "apertium":
            self._engine: _Apertium | _Seq2Seq = _Apertium(hops, params.timeout_s)
        else:
            self._engine = _Seq2Seq(hops, params)

    @property
    def variant(self) -> str:
        return "pivot-" + "-".join(self.params.pivots)

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[str | Exception]:
        """Back-translate every text; texts go in chunks of whole texts, a failed chunk fails its rows."""
        results: list[str | Exception] = [ValueError("not translated")] * len(batch)
        chunk: list[tuple[int, list[str]]] = []
        n_lines = 0

        def flush() -> None:
            nonlocal chunk, n_lines
            if not chunk:
                return
            lines = [line for _, doc_lines in chunk for line in doc_lines]
            try:
                if isinstance(self._engine, _Apertium):
                    out = self._engine.translate(lines)
                else:
                    out = self._engine.translate(lines, seed)
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
