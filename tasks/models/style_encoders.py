"""The style_encoder role: texts -> fixed-length style vectors (for style cosine and style Fréchet distance).

Three encoders share one small interface (``name``, ``dims``, ``model_id``, ``cache_key``,
``signature_fields()``, ``encode(texts) -> (n, dims) float64``):

- :class:`StylometricEncoder` (offline default): a documented hand-built vector of character n-grams,
  function words, punctuation, casing, length and POS-tag distribution (see its docstring);
- :class:`IdiolectEncoder`: Zhu & Jurgens (2021) idiolect embeddings (seed 000 §4.2), a RoBERTa-base encoder
  with a learned attention-pooling head, loaded from a local state dict plus a roberta-base folder (their
  weights do not install offline);
- :class:`SentenceStyleEncoder`: any sentence-transformers model (e.g. AnnaWegmann/Style-Embedding), through
  the shared embedding cache.

:func:`load_style_encoder` picks one; :func:`style_vectors` encodes each distinct uncached text once.
:func:`pos_tags` (spaCy, tagger only, batched with ``nlp.pipe``) is shared by the encoder and the POS metrics.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence
from functools import cache as _memo
from pathlib import Path
from typing import Any

import numpy as np

from tasks.errors import ModelUnavailable
from tasks.models.embeddings import EmbeddingCache, sentence_embeddings, text_sha
from tasks.models.loaders import device, load_pos_tagger
from tasks.models.registry import ModelSpec, model_id, resolve_model
from tasks.parallel import resource_lock

# ---------------------------------------------------------------- POS tagging

UPOS: tuple[str, ...] = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
                         "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")
TAGSETS = ("upos", "ptb")
_POS_BATCH = 256


def resolve_tagger(tagger: Any = None) -> tuple[Any, str]:
    """(spaCy pipeline, model id) from None (the pos_tagger role's default), a ModelSpec, a name/path, or
    an already loaded spaCy ``Language``."""
    if tagger is None or isinstance(tagger, str):
        tagger = resolve_model("pos_tagger", tagger)
    if isinstance(tagger, ModelSpec):
        return load_pos_tagger(tagger), model_id(tagger)
    meta = getattr(tagger, "meta", None)
    if meta is None or not hasattr(tagger, "pipe"):
        raise TypeError(f"tagger must be None, a name, a ModelSpec or a spaCy Language, not {type(tagger).__name__}")
    return tagger, f"spacy/{meta.get('lang', '?')}_{meta.get('name', '?')}@{meta.get('version', '?')}"


def _tag_labels(nlp: Any, tagset: str) -> tuple[str, ...]:
    if tagset == "upos":
        return (*UPOS, "")
    return (*nlp.get_pipe("tagger").labels, "")


def pos_cache_key(tagger_id: str, tagset: str) -> str:
    """The key of a tagger's tags in an :class:`EmbeddingCache` (tag ids, whitespace tokens dropped)."""
    return f"{tagger_id}|pos|tagset={tagset}|ws=drop"


def doc_tags(doc: Any, tagset: str, labels: Sequence[str]) -> list[str]:
    """The tags of one spaCy doc in ``tagset`` (whitespace tokens dropped; a tag outside ``labels`` is "")."""
    known = set(labels)
    tags = [(tok.pos_ if tagset == "upos" else tok.tag_) for tok in doc if not tok.is_space]
    return [t if t in known else "" for t in tags]


def same_pipeline(a: Any, b: Any) -> bool:
    """Whether two loaded spaCy pipelines are the same packaged model (language, name and version)."""
    return all(a.meta.get(k) == b.meta.get(k) for k in ("lang", "name", "version"))


class PosTagRecorder:
    """Collects the POS tags of docs parsed elsewhere (e.g. by PII detection on the same spaCy model) and
    stores them where :func:`pos_tags` looks for ``tagger_id``'s tags, so those texts are not tagged a second
    time."""

    def __init__(self, nlp: Any, tagger_id: str, tagset: str = "upos") -> None:
        self.tagger_id = tagger_id
        self.tagset = tagset
        self.labels = _tag_labels(nlp, tagset)
        self.tags: dict[str, list[str]] = {}

    def __call__(self, text: str, doc: Any) -> None:
        self.tags[text_sha(text)] = doc_tags(doc, self.tagset, self.labels)

    def save(self, cache: EmbeddingCache) -> int:
        """Store the collected tags; returns how many texts."""
        _store_tags(cache, pos_cache_key(self.tagger_id, self.tagset), self.labels, self.tags)
        return len(self.tags)


def _store_tags(cache: EmbeddingCache, key: str, labels: Sequence[str], tags_by_sha: dict[str, list[str]]) -> None:
    index = {t: i for i, t in enumerate(labels)}
    cache.put_many(key, ((sha, np.array([index[t] for t in tags], dtype=np.float32))
                         for sha, tags in tags_by_sha.items()))


def pos_tags(texts: Sequence[str], tagger: Any = None, *, tagset: str = "upos", batch_size: int = _POS_BATCH,
             cache: EmbeddingCache | None = None) -> list[list[str]]:
    """POS tags of each text: Universal POS (``token.pos_``, ``tagset="upos"``) or the fine-grained
    Penn tags (``token.tag_``, ``"ptb"``). Whitespace tokens (SPACE / ``_SP``) are dropped. Each distinct
    text is tagged once, with ``nlp.pipe`` in batches and only tok2vec/tagger/attribute_ruler enabled; an
    :class:`EmbeddingCache` (optional) keeps tag ids per (tagger, tagset, text) across calls."""
    if tagset not in TAGSETS:
        raise ValueError(f"tagset must be one of {TAGSETS}, not {tagset!r}")
    texts = list(texts)
    if not texts:
        return []
    nlp, tagger_id = resolve_tagger(tagger)
    labels = _tag_labels(nlp, tagset)
    key = pos_cache_key(tagger_id, tagset)
    shas = [text_sha(t) for t in texts]
    found: dict[str, list[str]] = {}
    if cache is not None:
        for sha, arr in cache.get_many(key, shas).items():
            found[sha] = [labels[int(i)] for i in arr]
    missing = {sha: t for sha, t in zip(shas, texts, strict=True) if sha not in found}
    if missing:
        enable = [p for p in ("tok2vec", "tagger", "attribute_ruler") if p in nlp.pipe_names]
        # One pipeline is shared by every thread of the process; select_pipes changes it for everyone, and
        # spaCy does not promise thread-safe calls, so one thread tags with it at a time.
        with resource_lock(nlp), nlp.select_pipes(enable=enable):
            docs = nlp.pipe(list(missing.values()), batch_size=batch_size)
            new = {sha: doc_tags(doc, tagset, labels) for sha, doc in zip(missing, docs, strict=True)}
        found.update(new)
        if cache is not None:
            _store_tags(cache, key, labels, new)
    return [list(found[s]) for s in shas]


# ---------------------------------------------------------------- stylometric encoder

# English function words (closed classes: pronouns, determiners, prepositions, conjunctions, auxiliaries and
# modals, negation, common contractions), lower case; matched against lower-cased word tokens.
FUNCTION_WORDS: tuple[str, ...] = (
    "i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "you", "your", "yours", "he", "him", "his",
    "she", "her", "hers", "it", "its", "they", "them", "their", "theirs", "this", "that", "these", "those",
    "who", "whom", "whose", "which", "what", "a", "an", "the", "some", "any", "no", "every", "each", "all",
    "both", "either", "neither", "much", "many", "more", "most", "few", "less", "other", "another", "such",
    "of", "in", "on", "at", "to", "for", "with", "by", "from", "about", "into", "over", "after", "before",
    "between", "under", "through", "during", "without", "against", "among", "up", "down", "out", "off",
    "and", "or", "but", "nor", "so", "yet", "if", "because", "although", "though", "while", "when", "where",
    "whether", "than", "as", "then", "be", "am", "is", "are", "was", "were", "been", "being", "have", "has",
    "had", "do", "does", "did", "will", "would", "shall", "should", "can", "could", "may", "might", "must",
    "not", "never", "very", "just", "too", "also", "only", "there", "here", "how", "why",
    "i'm", "i've", "i'll", "i'd", "you're", "it's", "that's", "there's", "don't", "doesn't", "didn't",
    "can't", "won't", "isn't", "aren't", "wasn't", "couldn't", "wouldn't", "shouldn't",
)
PUNCTUATION: tuple[str, ...] = (".", ",", "!", "?", ";", ":", "'", '"', "-", "(", ")", "…", "*", "/", "&", "@",
                                "#", "~")
_WORD = re.compile(r"\w+(?:'\w+)*")
# scale of the length block: log1p(x) / log1p(cap), so a post of 1000 chars / 200 words maps to 1
_LEN_CAPS = (1000.0, 200.0)
_WORD_LEN_CAP = 10.0


def _is_symbol(char: str) -> bool:
    """Unicode symbol (So: emoji and other symbols; Sk: modifier symbols)."""
    return unicodedata.category(char) in ("So", "Sk")


class StylometricEncoder:
    """A deterministic, documented stylometric vector (offline default of the style_encoder role).

    Blocks, concatenated in this order (texts are stripped and ’ is read as '):

    1. ``char``: hashed character 1-3-grams (sklearn HashingVectorizer, murmurhash3, case kept, whitespace
       runs collapsed) into ``buckets`` buckets, L2-normalised (the profile's direction);
    2. ``fw``: frequency of each of :data:`FUNCTION_WORDS` per word token (lower-cased ``\\w+('\\w+)*``);
    3. ``punct``: each mark of :data:`PUNCTUATION` per character, then symbols/emoji (Unicode So/Sk) per
       character and digits per character;
    4. ``case``: uppercase letters / letters, title-case words / words, all-caps words (2+ letters) / words;
    5. ``len``: log1p(chars)/log1p(1000), log1p(words)/log1p(200), mean word length / 10;
    6. ``pos``: relative frequency of each Universal POS tag (spaCy tagger, whitespace tokens dropped).

    Every block is in [0, 1]-ish units so none dominates cosine by scale alone. An empty text gives the
    zero vector. ``use_pos=False`` drops block 6 (no spaCy needed)."""

    name = "stylometric"
    version = "1"

    def __init__(self, buckets: int = 256, *, use_pos: bool = True, tagger: Any = None,
                 batch_size: int = _POS_BATCH) -> None:
        if buckets < 1:
            raise ValueError("buckets must be >= 1")
        self.buckets = int(buckets)
        self.use_pos = use_pos
        self.tagger = tagger
        self.batch_size = batch_size
        self._tagger_id: str | None = None

    # interface ----------------------------------------------------------------------------------
    def feature_names(self) -> list[str]:
        names = [f"char_{i}" for i in range(self.buckets)]
        names += [f"fw_{w}" for w in FUNCTION_WORDS]
        names += [f"punct_{p}" for p in PUNCTUATION] + ["punct_symbol", "punct_digit"]
        names += ["case_upper", "case_title", "case_allcaps", "len_chars", "len_words", "len_word_mean"]
        if self.use_pos:
            names += [f"pos_{t}" for t in UPOS]
        return names

    @property
    def dims(self) -> int:
        return len(self.feature_names())

    def _tagger_model_id(self) -> str:
        if self._tagger_id is None:
            self._tagger_id = resolve_tagger(self.tagger)[1]
        return self._tagger_id

    @property
    def model_id(self) -> str:
        pos = f"+pos={self._tagger_model_id()}" if self.use_pos else ""
        return f"{self.name}-v{self.version}(char1-3x{self.buckets}{pos})"

    @property
    def cache_key(self) -> str:
        return f"{self.model_id}|style"

    def signature_fields(self) -> dict[str, object]:
        return {"model": self.model_id, "dims": self.dims}

    # encoding -----------------------------------------------------------------------------------
    def encode(self, texts: Sequence[str], cache: EmbeddingCache | None = None) -> np.ndarray:
        """(n, dims) float64 style vectors; ``cache`` keeps the POS tags (shared with the POS metrics)."""
        from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer

        texts = [t.replace("’", "'").strip() for t in texts]
        n = len(texts)
        if n == 0:
            return np.zeros((0, self.dims))
        char = HashingVectorizer(analyzer="char", ngram_range=(1, 3), n_features=self.buckets,
                                 alternate_sign=False, norm="l2", lowercase=False).transform(texts).toarray()
        words = [_WORD.findall(t) for t in texts]
        n_words = np.array([len(w) for w in words], dtype=np.float64)
        n_chars = np.array([len(t) for t in texts], dtype=np.float64)
        safe_words = np.maximum(n_words, 1.0)[:, None]
        safe_chars = np.maximum(n_chars, 1.0)[:, None]
        fw_vec = CountVectorizer(vocabulary=FUNCTION_WORDS, analyzer=lambda ws: [w.lower() for w in ws])
        fw = fw_vec.transform(words).toarray() / safe_words
        punct = np.array([[t.count(p) for p in PUNCTUATION] + [sum(map(_is_symbol, t)), sum(map(str.isdigit, t))]
                          for t in texts], dtype=np.float64) / safe_chars
        case = np.zeros((n, 3))
        for i, (t, ws) in enumerate(zip(texts, words, strict=True)):
            letters = sum(map(str.isalpha, t))
            uppers = sum(map(str.isupper, t))
            case[i] = (uppers / letters if letters else 0.0,
                       sum(map(str.istitle, ws)) / len(ws) if ws else 0.0,
                       sum(w.isupper() and sum(map(str.isalpha, w)) > 1 for w in ws) / len(ws) if ws else 0.0)
        mean_wlen = np.array([np.mean([len(w) for w in ws]) if ws else 0.0 for ws in words])
        length = np.column_stack([np.log1p(n_chars) / np.log1p(_LEN_CAPS[0]),
                                  np.log1p(n_words) / np.log1p(_LEN_CAPS[1]), mean_wlen / _WORD_LEN_CAP])
        blocks = [char, fw, punct, case, length]
        if self.use_pos:
            pos = np.zeros((n, len(UPOS)))
            col = {t: j for j, t in enumerate(UPOS)}
            tags_of = pos_tags(texts, self.tagger, tagset="upos", batch_size=self.batch_size, cache=cache)
            for i, tags in enumerate(tags_of):
                for tag in tags:
                    if tag in col:
                        pos[i, col[tag]] += 1
                if tags:
                    pos[i] /= len(tags)
            blocks.append(pos)
        return np.hstack(blocks).astype(np.float64)


# ---------------------------------------------------------------- sentence-transformers style encoder


class SentenceStyleEncoder:
    """A sentence-transformers model used as a style encoder (e.g. AnnaWegmann/Style-Embedding, or MiniLM,
    a semantic stand-in); vectors go through the shared embedding cache."""

    name = "sentence-transformers"
    version = "1"

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    @property
    def model_id(self) -> str:
        return model_id(self.spec)

    @property
    def dims(self) -> int | None:
        return None  # known after the first encode

    @property
    def cache_key(self) -> str:
        return f"{self.model_id}|sentence"

    def signature_fields(self) -> dict[str, object]:
        return {"model": self.model_id, "pool": "sentence-transformers"}

    def encode(self, texts: Sequence[str], cache: EmbeddingCache | None = None) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, 0))
        return sentence_embeddings(texts, self.spec, cache=cache).astype(np.float64)


# ---------------------------------------------------------------- idiolect encoder (Zhu & Jurgens 2021)

IDIOLECT_MASK_MODES = ("exclude", "reference")
_STATE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


def _idiolect_hint(detail: str) -> ModelUnavailable:
    return ModelUnavailable(
        f"model for role 'style_encoder': idiolect (Zhu & Jurgens 2021, roberta-base + attention pooling) "
        f"{detail}; give its state dict via config models.style_encoder: /path/to/state_dict.pt with a local "
        f"roberta-base folder (config.json + tokenizer files) beside it"
    )


@_memo
def _idiolect_classes() -> tuple[type, type]:
    """(AttentionHead, IdiolectModel) nn.Module classes, built on first use (torch imported lazily). Their
    attribute names follow the reference code (``roberta``, ``pooler.pooling.W``, ``pooler.out_layer``) so
    its state dicts load as they are."""
    import torch
    from torch import nn

    class AttentionPooling(nn.Module):
        """Softmax attention over tokens with one learned scoring vector (self-attention pooling)."""

        def __init__(self, hidden: int) -> None:
            super().__init__()
            self.W = nn.Linear(hidden, 1)

        def forward(self, states: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
            logits = self.W(states).squeeze(-1)
            if mode == "reference":  # the reference adds the 0/1 mask to the logits (padding kept, e^-1)
                logits = logits + mask.to(logits.dtype)
            else:
                logits = logits.masked_fill(mask == 0, float("-inf"))
            weights = torch.softmax(logits, dim=-1).unsqueeze(-1)
            return (states * weights).sum(dim=1)

    class AttentionHead(nn.Module):
        def __init__(self, hidden: int) -> None:
            super().__init__()
            self.pooling = AttentionPooling(hidden)
            self.out_layer = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))

        def forward(self, states: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
            return self.out_layer(self.pooling(states, mask, mode))

    class IdiolectModel(nn.Module):
        """Encoder (AutoModel from the backbone config) + attention pooling + 2-layer MLP."""

        def __init__(self, config: Any) -> None:
            super().__init__()
            from transformers import AutoModel

            self.roberta = AutoModel.from_config(config)
            self.pooler = AttentionHead(int(config.hidden_size))

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, mode: str = "exclude") -> torch.Tensor:
            states = self.roberta(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return self.pooler(states, attention_mask, mode)

    return AttentionHead, IdiolectModel


class IdiolectEncoder:
    """Idiolect embeddings (Zhu & Jurgens 2021): the backbone's last hidden states, attention-pooled and
    passed through a 2-layer MLP, as their ``SRoberta`` model.

    ``state_dict``: a file with the trained weights (a ``state_dict()``, optionally with a ``module.``
    prefix); ``backbone``: a local folder with the roberta-base ``config.json`` and tokenizer files (the
    weights come from the state dict), defaulting to the state dict's own folder. Choices (in the
    signature): ``max_length=102`` tokens as the reference training code; ``mask_mode="exclude"`` keeps
    padding out of the attention (batch-independent), ``"reference"`` reproduces the reference code, which
    adds the 0/1 mask to the logits and pads every text to ``max_length``. Loading is lazy; missing files
    raise ModelUnavailable (one line) at construction."""

    name = "idiolect"
    version = "1"

    def __init__(self, state_dict: str | Path, backbone: str | Path | None = None, *, max_length: int = 102,
                 mask_mode: str = "exclude", batch_size: int = 32) -> None:
        if mask_mode not in IDIOLECT_MASK_MODES:
            raise ValueError(f"mask_mode must be one of {IDIOLECT_MASK_MODES}, not {mask_mode!r}")
        self.state_path = Path(state_dict).expanduser()
        if not self.state_path.is_file():
            raise _idiolect_hint(f"state dict {self.state_path} does not exist")
        self.backbone = Path(backbone).expanduser() if backbone is not None else self.state_path.parent
        if not (self.backbone / "config.json").is_file():
            raise _idiolect_hint(f"backbone folder {self.backbone} has no config.json")
        self.max_length = int(max_length)
        self.mask_mode = mask_mode
        self.batch_size = batch_size
        self._loaded: tuple[Any, Any] | None = None
        config = json.loads((self.backbone / "config.json").read_text())
        self._dims = int(config.get("hidden_size", 0)) or None
        digest = hashlib.sha256((self.backbone / "config.json").read_bytes())
        digest.update(f"{self.state_path.name}:{self.state_path.stat().st_size}".encode())
        self._fingerprint = "sha256-" + digest.hexdigest()[:12]

    @property
    def model_id(self) -> str:
        return f"idiolect/{self.state_path.stem}@{self._fingerprint}"

    @property
    def dims(self) -> int | None:
        return self._dims

    @property
    def cache_key(self) -> str:
        return f"{self.model_id}|style|maxlen={self.max_length}|mask={self.mask_mode}"

    def signature_fields(self) -> dict[str, object]:
        return {"model": self.model_id, "pool": "attention+mlp", "maxlen": self.max_length, "mask": self.mask_mode}

    def load(self) -> tuple[Any, Any]:
        """(tokenizer, IdiolectModel in eval mode on the default device)."""
        if self._loaded is not None:
            return self._loaded
        import torch
        from transformers import AutoConfig, AutoTokenizer

        try:
            config = AutoConfig.from_pretrained(str(self.backbone), local_files_only=True)
            tokenizer = AutoTokenizer.from_pretrained(str(self.backbone), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise _idiolect_hint(f"cannot read the backbone folder {self.backbone} ({type(exc).__name__})") from exc
        try:
            state = torch.load(self.state_path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a pickled whole module, a corrupt file, ...
            raise _idiolect_hint(
                f"cannot read {self.state_path} as a state dict ({type(exc).__name__}); a pickled model can be "
                f"converted with torch.save(torch.load(p, weights_only=False).state_dict(), out)") from exc
        if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
            state = state["state_dict"]
        state = {k.removeprefix("module."): v for k, v in state.items()}
        _, model_cls = _idiolect_classes()
        model = model_cls(config)
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith("roberta.pooler.")]
        unexpected = [k for k in unexpected if not k.endswith("position_ids")]
        if missing or unexpected:
            raise _idiolect_hint(f"state dict {self.state_path.name} does not match the model "
                                 f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
        self._loaded = (tokenizer, model.eval().to(device()))
        self._dims = int(config.hidden_size)
        return self._loaded

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(n, hidden) float64 idiolect vectors; batches sorted by length (``exclude`` mode)."""
        import torch

        texts = list(texts)
        tokenizer, model = self.load()
        out = np.zeros((len(texts), int(self._dims or 0)))
        if not texts:
            return out
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        padding = "max_length" if self.mask_mode == "reference" else "longest"
        dev = next(model.parameters()).device
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            enc = tokenizer([texts[i] for i in idx], add_special_tokens=True, max_length=self.max_length,
                            truncation=True, padding=padding, return_tensors="pt")
            with torch.inference_mode():
                vec = model(enc["input_ids"].to(dev), enc["attention_mask"].to(dev), self.mask_mode)
            out[idx] = vec.float().cpu().numpy()
        return out


# ---------------------------------------------------------------- choosing and running an encoder

StyleEncoder = StylometricEncoder | IdiolectEncoder | SentenceStyleEncoder


def load_style_encoder(spec_or_name: Any = None, *, backbone: str | Path | None = None,
                       tagger: Any = None) -> StyleEncoder:
    """The style encoder for a config value.

    ``None`` or ``"stylometric"``: :class:`StylometricEncoder` (offline default); an encoder instance: itself;
    a path to a state dict file (``.pt/.pth/.bin/.ckpt``) or ``"idiolect:/path"``: :class:`IdiolectEncoder`
    (``backbone`` = the roberta-base folder, default the state dict's folder); ``"idiolect"`` alone raises
    ModelUnavailable saying how to provide it; a ModelSpec or any other name: resolved for the style_encoder
    role and used as a :class:`SentenceStyleEncoder`."""
    if isinstance(spec_or_name, StylometricEncoder | IdiolectEncoder | SentenceStyleEncoder):
        return spec_or_name
    if spec_or_name is None or (isinstance(spec_or_name, str) and spec_or_name.strip().lower() == "stylometric"):
        return StylometricEncoder(tagger=tagger)
    if isinstance(spec_or_name, ModelSpec):
        if spec_or_name.kind == "stylometric":
            return StylometricEncoder(tagger=tagger)
        return SentenceStyleEncoder(spec_or_name)
    name = str(spec_or_name).strip()
    if name.lower() == "idiolect":
        raise _idiolect_hint("weights are not installed (they are not on PyPI)")
    if name.lower().startswith("idiolect:"):
        return IdiolectEncoder(name.split(":", 1)[1], backbone)
    path = Path(name).expanduser()
    if path.suffix in _STATE_SUFFIXES:
        return IdiolectEncoder(path, backbone)
    return SentenceStyleEncoder(resolve_model("style_encoder", name))


def style_vectors(texts: Sequence[str], encoder: StyleEncoder, cache: EmbeddingCache | None = None) -> np.ndarray:
    """(n, d) float64 style vectors; each distinct text not yet in ``cache`` is encoded once."""
    texts = list(texts)
    if isinstance(encoder, SentenceStyleEncoder):
        return encoder.encode(texts, cache=cache)
    # The stylometric encoder tags through the cache too, so the POS metrics find its tags (and vice versa).
    encode = functools.partial(encoder.encode, cache=cache) if isinstance(encoder, StylometricEncoder) else encoder.encode
    shas = [text_sha(t) for t in texts]
    found = cache.get_many(encoder.cache_key, shas) if cache is not None else {}
    missing = {sha: t for sha, t in zip(shas, texts, strict=True) if sha not in found}
    if missing:
        vectors = encode(list(missing.values()))
        new = {sha: np.asarray(v, dtype=np.float32) for sha, v in zip(missing, vectors, strict=True)}
        found.update(new)
        if cache is not None:
            cache.put_many(encoder.cache_key, new.items())
    if not texts:
        return np.zeros((0, encoder.dims or 0))
    return np.stack([np.asarray(found[s], dtype=np.float64) for s in shas])
