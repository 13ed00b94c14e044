"""The strategy registry and the one function that turns a strategy's outputs into a synthetic table.

A strategy is a class with a ``name``, a pydantic params model and a ``generate`` method that
returns one output per input text: a string, or an Exception for a row that failed. Strategies
register themselves with :func:`register_strategy` in a module of :mod:`tasks.generate`, which the registry
imports on first use (so adding a strategy is adding one module); the config names them and
:func:`build_strategy` validates their params, so a typo in the config fails up front with the key
path (``strategies.backtranslate.pivots: ...``) instead of halfway through a run.

:func:`generate_synthetic` never loses a row: whatever the strategy does (a failed row, an empty
output, an exception for the whole batch), the table has one row per input row, with ``status``
and ``reason`` saying what happened.

Several outputs per input (variants): a strategy lists the variant names it emits in ``variants``
(default ``[self.variant]``) and returns, per input, a list with one output per variant in that
order (the LLM strategy's ``first``/``second``). The table then has one row per (input, variant),
input-major; a variant the strategy gave no output for is a failed row saying so.

Per-row metadata: an output may be a :class:`Generated` (text + ``meta``); each meta key becomes an
extra column (after the ``attr_*`` columns), null on rows that did not set it. Conventions:

- ``truncated`` (bool): the strategy cut the input to its model's context before rewriting (see
  :func:`truncate_tokens`); the column is present whenever any row sets it, False on the other ok rows.
- DP strategies report ``epsilon_token`` / ``epsilon_doc`` (floats) and a ``caveat`` (str).

Every table has an ``unchanged`` column (:func:`is_unchanged`): True on an ok row whose text still is its
source (up to whitespace, or the whole source copied into it), i.e.
the strategy returned its input (no rule applied, a script it cannot handle), so a user sees that this text
was not rewritten and a release leaves it out; null on failed rows.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import pandas as pd
from pydantic import BaseModel, ValidationError

from tasks.corpus.schema import CARRIED_COLUMNS, STATUS_FAILED, STATUS_OK, SYNTHETIC_COLUMNS, attr_columns
from tasks.errors import ConfigError, ModelUnavailable, SynthUGCError, key_path, shown, validation_line
from tasks.registry import import_package_modules

CONFIG_ROOT = "strategies"
DEFAULT_VARIANT = "first"
TRUNCATED = "truncated"  # meta key (bool): the input was cut to the model's context
ORDINALS: tuple[str, ...] = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
                             "ninth", "tenth")

MetaValue = float | int | str | bool


@dataclass(frozen=True)
class Generated:
    """One output text with per-row metadata; each ``meta`` key becomes a column of the synthetic table."""

    text: str
    meta: Mapping[str, MetaValue] = field(default_factory=dict)


#: What ``generate`` returns per input and variant: the text, a text with metadata, or the row's failure.
Output = str | Generated | BaseException


class Strategy(ABC):
    """A rewriting strategy: validated params in, one output per input text and variant out."""

    name: ClassVar[str]
    params_model: ClassVar[type[BaseModel]]
    #: The params field holding ``llm_backend_for`` settings of the ``llm`` role (None: uses no LLM).
    llm_settings_field: ClassVar[str | None] = None

    def __init__(self, params: BaseModel) -> None:
        self.params = params

    @classmethod
    def uses_llm(cls, params: BaseModel) -> bool:
        """Whether these params make the strategy call the ``llm`` role (an LLM-bound stage)."""
        return cls.llm_settings_field is not None

    @property
    def variant(self) -> str:
        """The variant name this strategy's outputs get unless the caller names one."""
        return DEFAULT_VARIANT

    @property
    def variants(self) -> list[str]:
        """The variants emitted per input, in the order ``generate`` returns them (default: one)."""
        return [self.variant]

    def fit(self, corpus: pd.DataFrame) -> Strategy:
        """Learn what the strategy needs from the whole corpus (e.g. corpus-wide averages) before any
        shard is generated, so outputs do not depend on how the corpus was sharded. Default: nothing."""
        return self

    @abstractmethod
    def generate(self, batch: pd.DataFrame, *, seed: int) -> Sequence[Output | Sequence[Output]]:
        """One entry per row of ``batch`` (in order): the new text (str or :class:`Generated`) or an Exception
        if that row failed; with several ``variants``, a list of those, one per variant in order (a single
        Exception fails every variant of the row)."""


S = TypeVar("S", bound=type[Strategy])

_REGISTRY: dict[str, type[Strategy]] = {}
_LOADED = False


def _registry() -> dict[str, type[Strategy]]:
    """The registry, with every module of :mod:`tasks.generate` imported (each registers its strategies)."""
    global _LOADED
    if not _LOADED:
        import_package_modules("tasks.generate")
        _LOADED = True
    return _REGISTRY


def register_strategy(name: str, *, params: type[BaseModel]) -> Callable[[S], S]:
    """Class decorator: register a Strategy subclass under ``name`` with its params model."""

    def decorate(cls: S) -> S:
        if not cls.__module__.startswith("tasks.generate."):  # a strategy from elsewhere: the built-ins come first,
            _registry()                                        # so a name clash with one is caught here
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"strategy '{name}' is registered twice ({_REGISTRY[name].__qualname__}, {cls.__qualname__})")
        cls.name = name
        cls.params_model = params
        _REGISTRY[name] = cls
        return cls

    return decorate


def with_llm_settings(name: str, params: Mapping[str, Any], llm: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the run's ``llm`` role settings (endpoint, model) under the strategy's LLM settings
    field, unless the params set them themselves; unchanged for a strategy that uses no LLM."""
    cls = _registry()[name]
    params = dict(params)
    if not llm or cls.llm_settings_field is None or not cls.uses_llm(validate_params(name, params)):
        return params
    own = dict(params.get(cls.llm_settings_field) or {})
    params[cls.llm_settings_field] = {**dict(llm), **own}
    return params


def strategy_uses_llm(name: str, params: Mapping[str, Any]) -> bool:
    """Whether a configured strategy calls the ``llm`` role (its stages are LLM-bound)."""
    return _registry()[name].uses_llm(validate_params(name, params))


def strategy_class(name: str) -> type[Strategy]:
    """The class registered as ``name`` (KeyError for an unknown one)."""
    return _registry()[name]


def available_strategies() -> list[str]:
    """Names of the registered strategies, sorted."""
    return sorted(_registry())


def validate_params(name: str, params: Mapping[str, Any] | None, *, root: str = CONFIG_ROOT) -> BaseModel:
    """Validate a strategy's params; raise ConfigError naming the key path (under ``root``: a config key path,
    or a CLI flag such as ``--set``) on any problem."""
    prefix = root if root.startswith("--") else key_path([root, name])
    if name not in _registry():
        raise ConfigError(f"{prefix}: unknown strategy {shown(name)} (available: {', '.join(available_strategies())})")
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"{prefix}: params must be a mapping, got {type(params).__name__}")
    try:
        return _registry()[name].params_model.model_validate(dict(params))
    except ValidationError as exc:
        raise ConfigError(validation_line(exc, prefix)) from None


def build_strategy(name: str, params: Mapping[str, Any] | None = None, *, root: str = CONFIG_ROOT) -> Strategy:
    """Validate params and construct the strategy named ``name``.

    Raises ConfigError (key path named) for an unknown name or bad params, and ModelUnavailable
    when the strategy's model or tool is missing (strategies check that up front).
    """
    validated = validate_params(name, params, root=root)
    return _registry()[name](validated)


def stable_hash(text: str) -> int:
    """A 64-bit hash of a text that is the same in every process (``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def one_line(exc: BaseException) -> str:
    """An exception as one line: ``Type: message`` (just the message for SynthUGC errors)."""
    msg = " ".join(str(exc).split())
    if isinstance(exc, SynthUGCError):
        return msg or type(exc).__name__
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def truncate_tokens(tokenizer: Any, text: str, max_tokens: int) -> tuple[str, bool]:
    """``text`` cut to its first ``max_tokens`` tokens (decoded back to text) and whether it was cut.

    Strategies call this before handing a text to a model with a bounded context and record
    ``meta={"truncated": True}`` on the row, so an over-long input is rewritten in part, visibly, instead
    of failing or being silently cut by the model."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) <= max_tokens:
        return text, False
    return tokenizer.decode(ids[:max_tokens], skip_special_tokens=True), True


def is_unchanged(source: Any, output: str) -> bool:
    """Whether ``output`` still is the user's own text: the source up to whitespace (runs of spaces/newlines,
    leading/trailing), or a source of more than 20 characters copied whole into it (a full stop or a sentence
    added: the user's words, verbatim)."""
    if not isinstance(source, str):
        return False
    spaced, out = " ".join(source.split()), " ".join(output.split())
    return spaced == out or (len(spaced) > 20 and spaced in out)


def _column(batch: pd.DataFrame, col: str, dtype: str) -> pd.Series:
    if col in batch.columns:
        return batch[col].astype(dtype).reset_index(drop=True)
    return pd.Series(pd.NA, index=range(len(batch)), dtype=dtype)


def _per_variant(out: Any, variants: list[str], name: str) -> list[Any]:
    """One entry per variant from one input's output (see Strategy.generate)."""
    k = len(variants)
    if isinstance(out, (list, tuple)):
        items = list(out)[:k]
        got = len(out)
    elif isinstance(out, BaseException):
        return [out] * k
    else:
        items, got = [out], 1
    for j in range(len(items), k):
        items.append(RuntimeError(f"strategy {name} gave no output for variant '{variants[j]}' "
                                  f"({got} output(s) for {k} variant(s))"))
    return items


def _meta_series(values: list[Any], name: str) -> pd.Series:
    """A meta column with a nullable dtype: boolean, Float64 or string."""
    present = [v for v in values if v is not None]
    if name == TRUNCATED:
        return pd.Series([bool(v) if v is not None else pd.NA for v in values], dtype="boolean")
    if present and all(isinstance(v, bool) for v in present):
        return pd.Series([pd.NA if v is None else v for v in values], dtype="boolean")
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pd.Series([pd.NA if v is None else float(v) for v in values], dtype="Float64")
    return pd.Series([pd.NA if v is None else str(v) for v in values], dtype="string")


def synthetic_table(rows: pd.DataFrame, strategy: str, variants: Sequence[str], texts: Sequence[str | None],
                    reasons: Sequence[str | None]) -> pd.DataFrame:
    """The synthetic table's columns (SYNTHETIC_COLUMNS, then the ``attr_*`` columns of ``rows``), one row per source
    row of ``rows`` (repeated once per variant) with its ``variant``, output text and failure reason (None: ok).
    Carried-over columns are copied (null where ``rows`` lacks them); ``unchanged`` compares each ok output with its
    source's ``text``. Generation and the protect loop both build their tables here."""
    n = len(rows)
    table = pd.DataFrame({
        "doc_id": pd.Series(_column(rows, "doc_id", "string").to_numpy(), dtype="string"),
        "strategy": pd.Series([strategy] * n, dtype="string"),
        "variant": pd.Series(list(variants), dtype="string"),
        "text": pd.Series(list(texts), dtype="string"),
    })
    for col in CARRIED_COLUMNS:
        dtype = "Int64" if col == "position" else "string"
        table[col] = pd.Series(_column(rows, col, dtype).to_numpy(), dtype=dtype)
    table["status"] = pd.Series([STATUS_OK if r is None else STATUS_FAILED for r in reasons], dtype="string")
    table["reason"] = pd.Series(list(reasons), dtype="string")
    sources = rows["text"].tolist() if "text" in rows.columns else [None] * n
    table["unchanged"] = pd.Series([pd.NA if r is not None else is_unchanged(src, t)
                                    for src, t, r in zip(sources, texts, reasons, strict=True)], dtype="boolean")
    for col in attr_columns(rows):
        table[col] = pd.Series(_column(rows, col, "string").to_numpy(), dtype="string")
    return table


def generate_synthetic(strategy: Strategy, batch: pd.DataFrame, *, seed: int,
                       variant: str | None = None) -> pd.DataFrame:
    """Run ``strategy`` on ``batch`` (corpus rows) and return the synthetic table.

    Columns: SYNTHETIC_COLUMNS, then the batch's ``attr_*`` columns, then the meta columns the outputs
    set (:class:`Generated`). One row per (input row, variant), input-major, in order; carried-over columns
    are copied. A row is ``failed`` (text null, reason set) when the strategy returned an Exception for it,
    returned an empty or non-string output, gave no output for that variant, or raised for the whole batch.
    ModelUnavailable is not caught: a missing model is a setup problem to report once, not a reason on
    every row. ``variant`` renames the variant of a single-variant strategy (default: the strategy's own,
    ``first`` unless it names one, e.g. backtranslate's ``pivot-spa``); a multi-variant strategy's names
    cannot be overridden.
    """
    n = len(batch)
    variants = list(strategy.variants)
    if variant is not None:
        if len(variants) != 1:
            raise ValueError(f"strategy {strategy.name} emits variants {variants}; variant= cannot rename them")
        variants = [variant]
    k = len(variants)
    try:
        outputs: list[Any] = list(strategy.generate(batch.reset_index(drop=True), seed=seed))
        if len(outputs) != n:
            err = RuntimeError(f"strategy {strategy.name} returned {len(outputs)} outputs for {n} inputs")
            outputs = [err] * n
    except ModelUnavailable:
        raise
    except Exception as exc:
        outputs = [exc] * n

    reserved = {*SYNTHETIC_COLUMNS, *attr_columns(batch)}
    texts: list[str | None] = []
    reasons: list[str | None] = []
    metas: list[Mapping[str, Any]] = []
    for out in outputs:
        for item in _per_variant(out, variants, strategy.name):
            meta: Mapping[str, Any] = {}
            if isinstance(item, Generated):
                meta, item = dict(item.meta), item.text
                clash = sorted(set(meta) & reserved)
                if clash:
                    item = ValueError(f"meta key(s) {clash} collide with synthetic-table columns")
                    meta = {}
            metas.append(meta)
            if isinstance(item, BaseException):
                texts.append(None)
                reasons.append(one_line(item))
            elif not isinstance(item, str):
                texts.append(None)
                reasons.append(f"output is not a string ({type(item).__name__})")
            elif not item.strip():
                texts.append(None)
                reasons.append("empty output")
            else:
                texts.append(item)
                reasons.append(None)

    rows = batch.iloc[[i for i in range(n) for _ in range(k)]]
    table = synthetic_table(rows, strategy.name, variants * n, texts, reasons)
    meta_cols = list(dict.fromkeys(key for meta in metas for key in meta))
    for key in meta_cols:
        values = [meta.get(key) for meta in metas]
        if key == TRUNCATED:
            values = [False if v is None and r is None else v for v, r in zip(values, reasons, strict=True)]
        table[key] = _meta_series(values, key)
    return table[[*SYNTHETIC_COLUMNS, *attr_columns(batch), *meta_cols]]
