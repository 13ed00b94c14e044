"""Export a GGUF causal LM (the offline SmolLM2) as a plain Hugging Face folder.

Why: ``transformers serve`` and any other server that calls ``from_pretrained(folder)`` want config.json,
tokenizer files and safetensors weights. A GGUF-loaded model cannot ``save_pretrained`` itself (its
quantisation metadata gets in the way), but a fresh model built from its config and loaded with its
dequantised state dict can. The folder is written once (temp dir + rename) and reused while its marker
names the same model id.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tasks.errors import ModelUnavailable
from tasks.models.registry import ModelSpec, model_id

MARKER = "synthugc_export.json"
_REQUIRED = ("config.json", "model.safetensors", "tokenizer_config.json")


def export_complete(out_dir: Path, spec: ModelSpec) -> bool:
    """True when ``out_dir`` holds a finished export of ``spec`` (marker names the same model id)."""
    try:
        marker = json.loads((out_dir / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("model_id") == model_id(spec) and all((out_dir / name).is_file() for name in _REQUIRED)


def export_hf_folder(spec: ModelSpec, out_dir: str | Path, *, dtype: str = "float32") -> Path:
    """Write ``spec`` (a gguf-causal-lm or hf-causal-lm) to ``out_dir`` as config + tokenizer + safetensors;
    returns ``out_dir``. Skips the work when a complete export of the same model id is already there; a GGUF
    model in float32 is copied from the loaders' export (:func:`tasks.models.loaders.gguf_export`)."""
    out = Path(out_dir).expanduser().resolve()
    if export_complete(out, spec):
        return out
    if spec.kind not in ("gguf-causal-lm", "hf-causal-lm"):
        raise ModelUnavailable(f"model for role '{spec.role}': {spec.name} is a {spec.kind} model; "
                               f"only causal LMs can be exported for an OpenAI-compatible server")
    if spec.kind == "gguf-causal-lm" and dtype == "float32":
        from tasks.models.loaders import gguf_export  # deferred: loaders imports this module at its top

        cached = gguf_export(spec)
        with _folder_written(out) as tmp:
            shutil.copytree(cached, tmp, dirs_exist_ok=True)
        return out
    return write_export(spec, out, dtype=dtype)


@contextmanager
def _folder_written(out: Path) -> Iterator[Path]:
    """A temp folder beside ``out`` to fill; on success it replaces ``out`` (an incomplete or stale export), on
    failure it is removed, so ``out`` is never half-written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    os.chmod(tmp, 0o755)
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_export(spec: ModelSpec, out: Path, *, dtype: str = "float32") -> Path:
    """Load ``spec`` (a GGUF file dequantised by transformers) and save it to ``out`` (temp dir + rename)."""
    import torch
    from transformers import AutoModelForCausalLM

    # deferred: looked up at call time, so a replaced loader is the one used
    from tasks.models.loaders import load_causal_lm, load_gguf_causal_lm

    tokenizer, loaded = load_gguf_causal_lm(spec) if spec.kind == "gguf-causal-lm" else load_causal_lm(spec)
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):  # the GGUF marker would make from_pretrained look for a .gguf
        del config.quantization_config
    config.dtype = dtype
    fresh = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embeddings
    if missing or unexpected:
        raise ModelUnavailable(f"model for role '{spec.role}': cannot export {spec.name}: state dict mismatch "
                               f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    fresh.generation_config = loaded.generation_config
    with _folder_written(out) as tmp:
        fresh.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / MARKER).write_text(json.dumps({"model_id": model_id(spec), "source": spec.source,
                                              "gguf_file": spec.gguf_file, "dtype": dtype}))
    return out
