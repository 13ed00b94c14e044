"""Offline loaders, one process-wide instance per model (cached on the frozen spec less its role: the roles
that resolve to one model, as SmolLM2 is the offline ``llm``, ``paraphraser`` and ``profiling_llm``, share
one load instead of dequantising the same weights once per role).

Loads are serialised by one process-wide lock: metrics fan out on threads (the local Dask cluster), and
without it two threads would load the same model twice or race inside transformers' lazy imports (which
are not thread-safe on first use: "cannot import name 'AutoTokenizer' from 'transformers'").

Loading never reaches the internet unless the spec allows downloads: the HF offline variables are set and
``local_files_only`` is passed. A missing file or package becomes ModelUnavailable with one line.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tasks.errors import ModelUnavailable
from tasks.models.hf_export import export_complete, write_export
from tasks.models.registry import ALLOW_DOWNLOADS_ENV, ModelSpec, model_id
from tasks.settings import run_cache_dir

# spaCy components kept for POS: the tagger writes token.tag_ (fine-grained), the attribute_ruler maps tags
# to token.pos_ (UPOS), and tok2vec is the shared layer the small pipelines' tagger listens to.
POS_COMPONENTS = ("tok2vec", "tagger", "attribute_ruler")

_LOAD_LOCK = threading.RLock()
#: torch's default RNG and its CPU thread count are process-wide: a seeded torch section (training,
#: sampling) holds this lock, so two threads never reseed or draw from the same generator at once (runs
#: side by side would otherwise give different numbers from one at a time).
TORCH_RNG_LOCK = threading.RLock()
F = TypeVar("F", bound=Callable[..., Any])


def _load_key(value: Any) -> Any:
    """What a cached load is keyed by: a spec less its role (the model, whoever asks), anything else as is."""
    return dataclasses.replace(value, role="") if isinstance(value, ModelSpec) else value


def cache(func: F) -> F:
    """functools.cache keyed by :func:`_load_key` of each argument, whose first (loading) call per model runs
    under the process-wide load lock; a failed load is not cached (its error names the role that asked)."""
    loaded: dict[Any, Any] = {}

    @functools.wraps(func)
    def locked(*args: Any, **kwargs: Any) -> Any:
        key = (tuple(map(_load_key, args)), tuple(sorted((k, _load_key(v)) for k, v in kwargs.items())))
        with _LOAD_LOCK:
            if key not in loaded:
                loaded[key] = func(*args, **kwargs)
            return loaded[key]

    locked.cache_clear = loaded.clear  # type: ignore[attr-defined]
    return locked  # type: ignore[return-value]


def import_model_libraries() -> None:
    """Import transformers' auto classes, sentence-transformers and spaCy in this thread, before work fans
    out on threads that would otherwise race on their first lazy import."""
    with _LOAD_LOCK:
        import sentence_transformers  # noqa: F401
        import spacy  # noqa: F401
        from transformers import (  # noqa: F401
            AutoConfig,
            AutoModel,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoModelForSequenceClassification,
            AutoTokenizer,
        )


def device() -> str:
    """``cuda`` when a GPU is visible, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _offline(spec: ModelSpec) -> bool:
    """Set the HF offline variables unless the spec allows downloads; returns local_files_only."""
    if spec.allow_downloads:
        return False
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    return True


def _unavailable(spec: ModelSpec, exc: BaseException) -> ModelUnavailable:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return ModelUnavailable(
        f"model for role '{spec.role}': cannot load {spec.name} from {spec.path} ({type(exc).__name__}: {first}); "
        f"give a local folder via config models.{spec.role}: /path, or set {ALLOW_DOWNLOADS_ENV}=1 to allow "
        f"the Hugging Face hub"
    )


def _check_kind(spec: ModelSpec, *kinds: str) -> None:
    if spec.kind not in kinds:
        raise ValueError(f"{spec.name} is a {spec.kind} model; this loader takes {' or '.join(kinds)}")


@cache
def load_sentence_encoder(spec: ModelSpec) -> Any:
    """A SentenceTransformer on cuda when available, else cpu, warmed up by one encode."""
    _check_kind(spec, "sentence-transformers", "hf-encoder")
    local = _offline(spec)
    try:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(spec.path, device=device(), local_files_only=local)
    except (OSError, ValueError, ImportError) as exc:
        raise _unavailable(spec, exc) from exc
    # The first encode sets the fast tokenizer's padding and truncation (a mutation); done here, under the
    # load lock, threads that share the model afterwards only read them.
    model.encode(["warm-up"], show_progress_bar=False)
    return model


@cache
def load_tokenizer(spec: ModelSpec) -> Any:
    """The model's tokenizer alone (cheap; enough to tokenise or build idf weights); a GGUF model's from its
    plain export (:func:`gguf_export`)."""
    if spec.kind == "gguf-causal-lm":
        spec = dataclasses.replace(spec, path=str(gguf_export(spec)), gguf_file=None)
    local = _offline(spec)
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(spec.path, local_files_only=local, gguf_file=spec.gguf_file)
    except (OSError, ValueError, ImportError) as exc:
        raise _unavailable(spec, exc) from exc


def load_gguf_causal_lm(spec: ModelSpec) -> tuple[Any, Any]:
    """(tokenizer, model) read from the GGUF file itself: transformers parses and dequantises it (15.1 s on 2
    CPU cores for SmolLM2-135M, tokenizer included, against 2.4 s from the export), which is why the loaders read its export instead."""
    local = _offline(spec)
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        _quiet_gguf_progress()
        tokenizer = AutoTokenizer.from_pretrained(spec.path, local_files_only=local, gguf_file=spec.gguf_file)
        model = AutoModelForCausalLM.from_pretrained(spec.path, gguf_file=spec.gguf_file, local_files_only=local)
    except (OSError, ValueError, ImportError) as exc:
        raise _unavailable(spec, exc) from exc
    return _padded(tokenizer), model.eval()


def _quiet_gguf_progress() -> None:
    """No progress bar while transformers dequantises a GGUF file (its own tqdm, which transformers' switch for
    progress bars does not reach): a run's log is one line per stage."""
    import functools

    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    if not isinstance(gguf_utils.tqdm, functools.partial):
        gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)


def _padded(tokenizer: Any) -> Any:
    """``tokenizer`` with a pad token (its EOS when it ships none, as SmolLM2's GGUF does under transformers
    5.17): batched prompts are padded."""
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def gguf_export_folder(spec: ModelSpec) -> Path:
    """Where :func:`gguf_export` keeps ``spec``'s export: ``<cache_dir>/models/gguf-<hash>``, the hash of the model id
    and the GGUF file's path, size and time (the user's model name is not part of the path: it may hold ``/``
    or ``..``)."""
    import hashlib

    gguf = Path(spec.path) / (spec.gguf_file or "")
    try:
        stat = gguf.stat()
    except OSError as exc:
        raise _unavailable(spec, exc) from exc
    key = hashlib.sha256(f"{model_id(spec)}|{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return models_cache_dir() / f"gguf-{key.hexdigest()[:16]}"


def models_cache_dir() -> Path:
    """``<cache_dir>/models``: what is derived once from a model's files and read by every later load (a GGUF
    model's plain export, langid's model as arrays); the run's cache folder (:func:`tasks.settings.run_cache_dir`),
    so a worker keeps them where the run's plan says."""
    return run_cache_dir() / "models"


def gguf_export(spec: ModelSpec) -> Path:
    """A GGUF model as a plain Hugging Face folder (config, tokenizer, float32 safetensors: the dequantised
    weights, the same numbers) in ``<cache_dir>/models``, written once per GGUF file (its path, size and
    time) under a file lock, so processes side by side export it once; later loads read safetensors."""
    import fcntl

    folder = gguf_export_folder(spec)
    if export_complete(folder, spec):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be writing it: wait, then read its export
        return folder if export_complete(folder, spec) else write_export(spec, folder)


@cache
def load_model_config(spec: ModelSpec) -> Any:
    """The model's transformers config alone (cheap: no weights), e.g. for its number of layers."""
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(spec.path, local_files_only=_offline(spec))
    except (OSError, ValueError, ImportError) as exc:
        raise _unavailable(spec, exc) from exc


def _hf_model(spec: ModelSpec, auto_class: str) -> Any:
    """``transformers.<auto_class>.from_pretrained`` offline unless allowed, in eval mode on the device."""
    try:
        import transformers

        model = getattr(transformers, auto_class).from_pretrained(spec.path, local_files_only=_offline(spec))
    except (OSError, ValueError, ImportError) as exc:
        raise _unavailable(spec, exc) from exc
    return model.eval().to(device())


@cache
def load_token_encoder(spec: ModelSpec) -> tuple[Any, Any]:
    """(tokenizer, AutoModel in eval mode) for token embeddings."""
    _check_kind(spec, "hf-encoder", "sentence-transformers")
    return load_tokenizer(spec), _hf_model(spec, "AutoModel")


@cache
def load_pos_tagger(spec: ModelSpec) -> Any:
    """A spaCy pipeline that runs only tok2vec, tagger and attribute_ruler (token.tag_ and token.pos_);
    parser, NER and lemmatizer are excluded (about 3x faster)."""
    _check_kind(spec, "spacy")
    try:
        import spacy

        nlp = spacy.load(spec.path, exclude=["parser", "ner", "lemmatizer", "senter", "entity_ruler"])
    except (OSError, ValueError, ImportError) as exc:
        raise _unavailable(spec, exc) from exc
    for name in nlp.pipe_names:
        if name not in POS_COMPONENTS:
            nlp.disable_pipe(name)
    if "tagger" not in nlp.pipe_names:
        raise ModelUnavailable(f"model for role '{spec.role}': spaCy pipeline {spec.name} has no tagger; "
                               f"give one with a tagger via config models.{spec.role}: /path")
    return nlp


@cache
def load_causal_lm(spec: ModelSpec) -> tuple[Any, Any]:
    """(tokenizer, AutoModelForCausalLM in eval mode); a GGUF model is read from its plain export
    (:func:`gguf_export`; the first load dequantises the GGUF file, which needs the ``gguf`` package)."""
    _check_kind(spec, "hf-causal-lm", "gguf-causal-lm")
    tokenizer = _padded(load_tokenizer(spec))
    path = str(gguf_export(spec)) if spec.kind == "gguf-causal-lm" else spec.path
    local = _offline(spec)
    try:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=local)
    except (OSError, ValueError, ImportError) as exc:
        raise _unavailable(spec, exc) from exc
    return tokenizer, model.eval().to(device())


@cache
def load_seq2seq(spec: ModelSpec) -> tuple[Any, Any]:
    """(tokenizer, AutoModelForSeq2SeqLM in eval mode) for BART/Marian/mBART paraphrasers and translators."""
    _check_kind(spec, "hf-seq2seq")
    return load_tokenizer(spec), _hf_model(spec, "AutoModelForSeq2SeqLM")
