"""The experiment configuration read and validated: a YAML file (read with size, alias and depth limits) checked
against the sections of flows/config_sections.py.

Unknown keys and bad values are rejected with their key path (``generate.strategies.0.params.pivots``);
``--set key.path=value`` overrides are applied before validation.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from flows.config_sections import ExperimentConfig, ReidentifyConfig
from tasks.errors import ConfigError, key_path, shown, validation_line
from tasks.generate.base import available_strategies, validate_params
from tasks.models.registry import looks_like_path
from tasks.paths import absolute

#: A config file larger than this is refused before it is parsed (the demo config is 3 KB).
MAX_CONFIG_BYTES = 1_000_000
#: What a YAML text may expand to with its aliases followed, counted as scalar characters plus one per node:
#: twice the byte limit, so only aliases reach it (a billion-laughs document expands to 10^9 nodes).
MAX_YAML_EXPANSION = 2 * MAX_CONFIG_BYTES
#: How deep YAML collections may nest: a config nests a few levels; the parser recurses per level.
MAX_YAML_DEPTH = 100


class _Expansion(Exception):
    """A YAML document expands (through its aliases) past MAX_YAML_EXPANSION, nests past MAX_YAML_DEPTH, or
    refers to itself."""


class _BoundedLoader(yaml.SafeLoader):
    """A SafeLoader that adds up, while it composes the document, what each node expands to with its aliases
    followed, and stops past MAX_YAML_EXPANSION (or MAX_YAML_DEPTH) before anything is constructed from it."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._sizes: dict[int, int] = {}  # id(node) -> its expanded size (nodes stay alive in the tree)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        alias = self.check_event(yaml.AliasEvent)
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise _Expansion(f"collections nest deeper than {MAX_YAML_DEPTH} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if alias:  # the anchored node itself: its size is known unless the alias sits inside it
            if id(node) not in self._sizes:
                raise _Expansion("an alias refers to a node that contains it (a recursive document)")
            return node
        if isinstance(node, yaml.ScalarNode):
            size = 1 + len(node.value)
        elif isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._sizes[id(child)] for child in node.value)
        else:
            size = 1 + sum(self._sizes[id(key)] + self._sizes[id(value)] for key, value in node.value)
        if size > MAX_YAML_EXPANSION:
            raise _Expansion(f"its aliases expand it past {MAX_YAML_EXPANSION} characters (an alias bomb?); "
                             f"write the values out instead")
        self._sizes[id(node)] = size
        return node


# YAML 1.2 exponent floats (1e-5, 1.5e3, .5E2) and signed ones without a leading digit (-.5): PyYAML (YAML 1.1)
# reads them as strings, which strict numbers refuse; read them as the numbers they are.
_BoundedLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$|^[-+]\.[0-9_]+$"),
    list("-+0123456789."))


def parse_yaml(text: str, source: str) -> Any:
    """YAML text as Python values, refused (ConfigError naming ``source``) when it is over MAX_CONFIG_BYTES,
    invalid, or expands through aliases past MAX_YAML_EXPANSION, before that expansion is built."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES} characters")
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except _Expansion as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{source}:{line} is not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    finally:
        loader.dispose()


def _apply_override(raw: dict, assignment: str, flag: str) -> None:
    if "=" not in assignment:
        raise ConfigError(f"{flag} {shown(assignment)}: not key.path=value")
    path, value = assignment.split("=", 1)
    node: Any = raw
    keys = path.split(".")
    parsed = parse_yaml(value, f"{flag} {key_path([path])}") if value else None
    try:
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list):
            node[int(keys[-1])] = parsed
        else:
            node[keys[-1]] = parsed
    except (ValueError, IndexError, TypeError, AttributeError):
        raise ConfigError(f"{flag} {shown(assignment)}: {key_path([path])} does not name a settable key") from None


#: A strategy's params are checked under ``generate.strategies.N.params.<strategy name>``; overrides omit the name.
_STRATEGY_PARAMS = re.compile(r"^(generate\.strategies\.\d+\.params)\.[^.]+")


def _origin(source: str, line: str, overrides: list[str], flag: str) -> str:
    """Who gave the value an error line (``key.path: problem``) is about: the last override whose key path covers
    it or lies under it (named by its flag and assignment), else the config file."""
    where = _STRATEGY_PARAMS.sub(r"\1", line.split(": ", 1)[0])
    for assignment in reversed(overrides):
        path = assignment.split("=", 1)[0]
        if where == path or where.startswith(path + ".") or path.startswith(where + "."):
            return f"{flag} {shown(assignment)}"
    return source


def parse_config(raw: dict, source: str = "config", overrides: list[str] | None = None, *,
                 flag: str = "--set") -> ExperimentConfig:
    """Validate a config mapping (after overrides); errors name the key path and where the value came from (the
    file ``source``, or the override and its ``flag``), and echo values cut to a few words
    (:func:`tasks.errors.shown`)."""
    raw = copy.deepcopy(raw)
    overrides = list(overrides or [])
    for assignment in overrides:
        _apply_override(raw, assignment, flag)
    try:
        cfg = ExperimentConfig.model_validate(raw)
        for i, strategy in enumerate(cfg.generate.strategies):
            if strategy.name not in available_strategies():
                raise ConfigError(f"generate.strategies.{i}.name: unknown strategy {shown(strategy.name)}; "
                                  f"available: {', '.join(available_strategies())}")
            validate_params(strategy.name, strategy.params, root=f"generate.strategies.{i}.params")
        _check_attacks(cfg.privacy.reidentify)
    except ValidationError as exc:
        line = validation_line(exc)
        raise ConfigError(f"{_origin(source, line, overrides, flag)}: {line}") from None
    except ConfigError as exc:
        raise ConfigError(f"{_origin(source, str(exc), overrides, flag)}: {exc}") from None
    return with_absolute_paths(cfg)


#: Strategy parameters that name files or folders (a model folder, a local weights folder).
_PATH_PARAMS = ("model", "model_dir")


def with_absolute_paths(cfg: ExperimentConfig) -> ExperimentConfig:
    """The config with every local path made absolute here, where the run is planned (fsspec URLs, short model
    names and hub ids stay as they are), so a stage on a worker started in another folder reads the same files."""
    def model(name: str) -> str:
        return absolute(name) if looks_like_path(name) else name

    strategies = [s.model_copy(update={"params": {k: model(v) if k in _PATH_PARAMS and isinstance(v, str) else v
                                                  for k, v in s.params.items()}})
                  for s in cfg.generate.strategies]
    reid = cfg.privacy.reidentify
    return cfg.model_copy(update={
        "storage_root": absolute(cfg.storage_root) if cfg.storage_root else None,
        "data": cfg.data.model_copy(update={"path": absolute(cfg.data.path) if cfg.data.path else None}),
        "models": {role: model(name) for role, name in cfg.models.items()},
        "generate": cfg.generate.model_copy(update={"strategies": strategies}),
        "privacy": cfg.privacy.model_copy(update={"reidentify": reid.model_copy(update={
            "histories": absolute(reid.histories) if reid.histories else None})}),
    })


def _check_attacks(reid: ReidentifyConfig) -> None:
    """Every configured attack is registered and its parameters are the ones it declares."""
    # deferred: loads llvmlite, numba only when this runs
    from tasks.privacy.attacks import attack_class, build_attack

    for i, name in enumerate(reid.attacks):
        if name != "all":
            attack_class(name, root=f"privacy.reidentify.attacks.{i}")
    for name, params in reid.params.items():
        if name not in reid.attack_names():
            raise ConfigError(f"privacy.reidentify.params.{name}: attack '{name}' is not in "
                              f"privacy.reidentify.attacks ({', '.join(reid.attacks)})")
        build_attack(name, params)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A config file's mapping, read safely: the file is checked (exists, a file, at most MAX_CONFIG_BYTES)
    before it is read, and its YAML is parsed by :func:`parse_yaml`; ConfigError naming the file otherwise."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a folder, not a file")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    with path.open("rb") as handle:  # read at most one byte past the limit, whatever stat says
        data = handle.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; a config is a few kilobytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    raw = parse_yaml(text, str(path))
    if raw is None:
        raise ConfigError(f"{path}: the file is empty; a config is a mapping of settings (experiment, data, "
                          f"generate ...)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of settings (experiment, data, generate ...); "
                          f"got {type(raw).__name__}")
    return raw


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read and validate an experiment YAML file."""
    return parse_config(read_config_file(path), source=str(path), overrides=overrides)
