"""The strategy registry and the one function that turns a strategy's outputs into a synthetic table.

A strategy is a class with a ``name``, a pydantic params model and a ``generate`` method that
returns one output per input text: a string, or an Exception for a row that failed. Strategies
register themselves with :func:`register_strategy`; the config names them and
:func:`build_strategy` validates their params, so a typo in the config fails up front with the key
path (``strategies.backtranslate.pivots: ...``) instead of halfway through a run.

:func:`generate_synthetic` never loses a row: whatever the strategy does (a failed row, an empty
output, an exception for the whole batch), the table has one row per input row, with ``status``
and ``reason`` saying what happened.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import pandas as pd
from pydantic import BaseModel, ValidationError

from tasks.corpus.schema import CARRIED_COLUMNS, STATUS_FAILED, STATUS_OK, SYNTHETIC_COLUMNS, attr_columns
from tasks.errors import ConfigError, ModelUnavailable, SynthUGCError

CONFIG_ROOT = "strategies"
DEFAULT_VARIANT = "first"


class Strategy(ABC):
    """A rewriting strategy: validated params in, one output per input text out."""

    name: ClassVar[str]
    params_model: ClassVar[type[BaseModel]]

    def __init__(self, params: BaseModel) -> None:
        self.params = params

    @property
    def variant(self) -> str:
        """The variant name this strategy's outputs get unless the caller names one."""
        return DEFAULT_VARIANT

    def fit(self, corpus: pd.DataFrame) -> Strategy:
        """Learn what the strategy needs from the whole corpus (e.g. corpus-wide averages) before any
        shard is generated, so outputs do not depend on how the corpus was sharded. Default: nothing."""
        return self

    @abstractmethod
    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[str | Exception]:
        """One output per row of ``batch`` (in order): the new text, or an Exception if that row failed."""


S = TypeVar("S", bound=type[Strategy])

_REGISTRY: dict[str, type[Strategy]] = {}


def register_strategy(name: str, *, params: type[BaseModel]) -> Callable[[S], S]:
    """Class decorator: register a Strategy subclass under ``name`` with its params model."""

    def decorate(cls: S) -> S:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"strategy '{name}' is registered twice ({_REGISTRY[name].__qualname__}, {cls.__qualname__})")
        cls.name = name
        cls.params_model = params
        _REGISTRY[name] = cls
        return cls

    return decorate


def available_strategies() -> list[str]:
    """Names of the registered strategies, sorted."""
    return sorted(_REGISTRY)


def _validation_line(exc: ValidationError, prefix: str) -> str:
    """A pydantic ValidationError as one line, each problem prefixed with its key path."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        where = f"{prefix}.{loc}" if loc else prefix
        msg = err["msg"]
        if err["type"] not in ("missing", "extra_forbidden") and "input" in err:
            msg += f" (got {err['input']!r})"
        parts.append(f"{where}: {msg}")
    return "; ".join(parts)


def validate_params(name: str, params: Mapping[str, Any] | None, *, root: str = CONFIG_ROOT) -> BaseModel:
    """Validate a strategy's params; raise ConfigError naming the key path on any problem."""
    prefix = f"{root}.{name}"
    if name not in _REGISTRY:
        raise ConfigError(f"{prefix}: unknown strategy '{name}' (available: {', '.join(available_strategies())})")
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"{prefix}: params must be a mapping, got {type(params).__name__}")
    try:
        return _REGISTRY[name].params_model.model_validate(dict(params))
    except ValidationError as exc:
        raise ConfigError(_validation_line(exc, prefix)) from None


def build_strategy(name: str, params: Mapping[str, Any] | None = None, *, root: str = CONFIG_ROOT) -> Strategy:
    """Validate params and construct the strategy named ``name``.

    Raises ConfigError (key path named) for an unknown name or bad params, and ModelUnavailable
    when the strategy's model or tool is missing (strategies check that up front).
    """
    validated = validate_params(name, params, root=root)
    return _REGISTRY[name](validated)


def stable_hash(text: str) -> int:
    """A 64-bit hash of a text that is the same in every process (``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def one_line(exc: BaseException) -> str:
    """An exception as one line: ``Type: message`` (just the message for SynthUGC errors)."""
    msg = " ".join(str(exc).split())
    if isinstance(exc, SynthUGCError):
        return msg or type(exc).__name__
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _column(batch: pd.DataFrame, col: str, dtype: str) -> pd.Series:
    if col in batch.columns:
        return batch[col].astype(dtype).reset_index(drop=True)
    return pd.Series(pd.NA, index=range(len(batch)), dtype=dtype)


def generate_synthetic(strategy: Strategy, batch: pd.DataFrame, *, seed: int,
                       variant: str | None = None) -> pd.DataFrame:
    """Run ``strategy`` on ``batch`` (corpus rows) and return the synthetic table.

    Columns: SYNTHETIC_COLUMNS, then the batch's ``attr_*`` columns. One row per input row, in
    order; carried-over columns are copied. A row is ``failed`` (text null, reason set) when the
    strategy returned an Exception for it, returned an empty or non-string output, or raised for
    the whole batch. ModelUnavailable is not caught: a missing model is a setup problem to report
    once, not a reason on every row. ``variant`` defaults to the strategy's own (``first`` unless
    the strategy names its variant, e.g. backtranslate's ``pivot-spa``).
    """
    n = len(batch)
    variant = strategy.variant if variant is None else variant
    try:
        outputs: list[Any] = list(strategy.generate(batch.reset_index(drop=True), seed=seed))
        if len(outputs) != n:
            err = RuntimeError(f"strategy {strategy.name} returned {len(outputs)} outputs for {n} inputs")
            outputs = [err] * n
    except ModelUnavailable:
        raise
    except Exception as exc:
        outputs = [exc] * n

    texts: list[str | None] = []
    reasons: list[str | None] = []
    for out in outputs:
        if isinstance(out, BaseException):
            texts.append(None)
            reasons.append(one_line(out))
        elif not isinstance(out, str):
            texts.append(None)
            reasons.append(f"output is not a string ({type(out).__name__})")
        elif not out.strip():
            texts.append(None)
            reasons.append("empty output")
        else:
            texts.append(out)
            reasons.append(None)

    table = pd.DataFrame({
        "doc_id": _column(batch, "doc_id", "string"),
        "strategy": pd.Series([strategy.name] * n, dtype="string"),
        "variant": pd.Series([variant] * n, dtype="string"),
        "text": pd.Series(texts, dtype="string"),
    })
    for col in CARRIED_COLUMNS:
        table[col] = _column(batch, col, "Int64" if col == "position" else "string")
    table["status"] = pd.Series([STATUS_OK if r is None else STATUS_FAILED for r in reasons], dtype="string")
    table["reason"] = pd.Series(reasons, dtype="string")
    for col in attr_columns(batch):
        table[col] = _column(batch, col, "string")
    return table[[*SYNTHETIC_COLUMNS, *attr_columns(batch)]]
