"""Generation strategies: the registry (base) and one module per strategy family.

The registry imports every module of this package on first use (each registers its strategies), so
``build_strategy("stymask", {...})`` works and a new strategy is one module here.
"""

from tasks.generate.base import (
    Generated,
    Strategy,
    available_strategies,
    build_strategy,
    generate_synthetic,
    register_strategy,
    validate_params,
)

__all__ = [
    "Generated",
    "Strategy",
    "available_strategies",
    "build_strategy",
    "generate_synthetic",
    "register_strategy",
    "validate_params",
]
