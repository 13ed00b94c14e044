"""Generation strategies: the registry (base) and one module per strategy family.

Importing this package registers every strategy, so ``build_strategy("stymask", {...})`` works.
"""

from tasks.generate import backtranslate, dp, llm, paraphrase, stymask
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
    "backtranslate",
    "build_strategy",
    "dp",
    "generate_synthetic",
    "llm",
    "paraphrase",
    "register_strategy",
    "stymask",
    "validate_params",
]
from tasks.generate import syntax  # noqa: F401  (registers synsim, syndiff, synorig, syntr)
