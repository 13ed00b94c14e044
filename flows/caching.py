"""Cache keys for coarse Prefect stages, as docs/architecture.md says: the content fingerprints of the input
artifacts + the hash of the stage's config + the code version of its area.

Prefect's own policies miss two things this project needs: a ``Path`` input is hashed by its path
(a rewritten parquet would return a stale result), and TASK_SOURCE covers only the task's own lines
(a changed helper would not invalidate). Here every :class:`~tasks.store.ArtifactRef` parameter
contributes its sha256, every other parameter its canonical JSON, and the stage's code areas their
source hash.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from tasks.protect.files import ROUND_CODE
from tasks.store import ArtifactRef, cache_key, code_version, fingerprint_config

#: Source areas each stage's result depends on (besides the stage layer itself).
STAGE_AREAS: dict[str, tuple[str, ...]] = {
    "ingest": ("tasks/corpus", "tasks/store.py"),
    "split": ("tasks/corpus", "tasks/store.py"),
    "pseudonymize": ("tasks/generate/pseudonymize.py", "tasks/models/pii.py", "tasks/store.py"),
    "generate": ("tasks/generate", "tasks/models", "tasks/corpus/schema.py", "tasks/signatures.py", "tasks/store.py"),
    "metrics": ("tasks/metrics", "tasks/models", "tasks/corpus/schema.py", "tasks/scores.py", "tasks/signatures.py", "tasks/store.py"),
    "metaeval": ("tasks/metrics", "tasks/models", "tasks/corpus/schema.py", "tasks/scores.py", "tasks/signatures.py", "tasks/store.py"),
    "privacy": ("tasks/privacy", "tasks/training", "tasks/models", "tasks/corpus/schema.py", "tasks/signatures.py",
                "tasks/scores.py", "tasks/store.py"),
    "index-histories": ("tasks/privacy", "tasks/store.py"),
    "reidentify": ("tasks/privacy", "tasks/models", "tasks/signatures.py", "tasks/corpus/schema.py",
                   "tasks/scores.py", "tasks/store.py"),
    "llm-profile": ("tasks/privacy/llm_profiling.py", "tasks/privacy/audit.py", "tasks/models", "tasks/corpus/schema.py",
                    "tasks/signatures.py", "tasks/scores.py", "tasks/store.py"),
    "audit-dp": ("tasks/privacy/dp_audit.py", "tasks/generate", "tasks/models", "tasks/store.py"),
    "utility": ("tasks/training", "tasks/corpus", "tasks/models", "tasks/signatures.py", "tasks/scores.py",
                "tasks/store.py"),
    "protect": (*ROUND_CODE, "tasks/models", "tasks/corpus/schema.py", "tasks/store.py"),
    "report": ("tasks/report", "tasks/budgets.py", "tasks/protect/files.py", "tasks/metrics/suite.py", "tasks/metrics/catalogue.py", "tasks/metrics/metaeval.py",
               "tasks/training/utility.py", "tasks/corpus/schema.py", "tasks/scores.py", "tasks/store.py"),
}
_STAGE_LAYER = ("flows/stages.py", "flows/caching.py", "tasks/layout.py")


@functools.cache
def stage_code_version(stage: str) -> str:
    """Source hash of a stage's areas (computed once per process)."""
    return code_version(*STAGE_AREAS[stage], *_STAGE_LAYER)


def _split_refs(value: Any, refs: list[ArtifactRef]) -> Any:
    """Replace ArtifactRefs by placeholders (collecting them) so the rest hashes as config."""
    if isinstance(value, ArtifactRef):
        refs.append(value)
        return "<artifact>"
    if isinstance(value, dict):
        return {k: _split_refs(v, refs) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_split_refs(v, refs) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # field by field: nested refs count
        return {f.name: _split_refs(getattr(value, f.name), refs) for f in dataclasses.fields(value)
                if f.metadata.get("cache_key", True)}  # a field marked out changes no result (RunPlace.llm_cache)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def stage_cache_key(stage: str, parameters: dict[str, Any]) -> str:
    """The cache key of one stage call from its parameters."""
    refs: list[ArtifactRef] = []
    config_part = _split_refs(parameters, refs)
    return cache_key(stage, refs, fingerprint_config(config_part), stage_code_version(stage))


def key_fn_for(stage: str):
    """A Prefect ``cache_key_fn`` for the given stage."""

    def _key(_context: Any, parameters: dict[str, Any]) -> str:
        return f"{stage}-{stage_cache_key(stage, parameters)}"

    _key.__name__ = f"{stage}_cache_key"
    return _key
