"""Model registry (role -> model), offline loaders and the shared embedding cache."""

from tasks.models.registry import ROLES, ModelSpec, default_models, model_id, production_models, resolve_model

__all__ = ["ROLES", "ModelSpec", "default_models", "model_id", "production_models", "resolve_model"]
