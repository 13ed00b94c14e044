"""The re-identification attack registry: every attack under every adversary setting, one summary row
each, and the worst case a privacy verdict must use.

An attack is one module in this package holding one class registered with :func:`register_attack` (its
name, its parameters, whether it needs a GPU, whether it returns evidence). The registry is what the CLI
choices, the config's validation, the flow's plan, the report and ``synthugc attacks`` read, so adding an
attack is adding one module here. Each attack has two steps:

- ``prepare(histories, setting, held_out)``: the adversary's side (author profiles, signed posts), built
  once per (histories, parameters, setting) and reused by every strategy and variant; an attack whose
  histories can be indexed once for every setting (``builds_index``) writes that index as a cached artifact
  of the flow (``index-histories[<attack>]``) and ``prepare`` reads it;
- ``run(prepared, timelines)``: attribute each synthetic timeline, returning the shared attribution output
  (:mod:`tasks.privacy.attribution`) with ``attack``, ``adversary`` and ``signature`` in its summary.

Settings: ``full`` and ``disjoint`` (:mod:`tasks.privacy.attribution`).
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any, ClassVar, NamedTuple, TypeVar, get_type_hints

import pandas as pd
from pydantic import TypeAdapter, ValidationError

from tasks.errors import STRICT_INPUT, ConfigError, key_path, shown, validation_line
from tasks.paths import segment_problem
from tasks.privacy.attribution import SETTINGS, Setting, check_setting, held_out_doc_ids
from tasks.privacy.audit import attack_timelines, reidentification_rows, summary_frame
from tasks.privacy.reidentify import HistorySource, ReidResult
from tasks.registry import import_package_modules, summary_line
from tasks.scores import variant_epsilons
from tasks.settings import get_settings

SUMMARY_FIELDS = ["attack", "adversary", "accuracy_at_1", "accuracy_at_1_ci_low", "accuracy_at_1_ci_high",
                  "accuracy_at_10", "accuracy_at_10_ci_low", "accuracy_at_10_ci_high", "mrr", "mrr_ci_low",
                  "mrr_ci_high", "risk", "risk_ci_low", "risk_ci_high", "chance", "chance_at_10",
                  "chance_mrr", "n_timelines", "n_no_history", "n_history_users", "n_history_posts", "signature",
                  "reason"]
CONFIG_ROOT = "privacy.reidentify.params."  # + the attack's name: where its parameters are set


class Attack(ABC):
    """A re-identification attack with validated parameters: prepare the adversary's side, then run."""

    name: ClassVar[str]
    params_model: ClassVar[type]
    needs_gpu: ClassVar[bool] = False
    returns_evidence: ClassVar[bool] = False
    #: ``build_index`` writes a setting-free index of the histories once per run (a flow stage of its own).
    builds_index: ClassVar[bool] = False
    #: A GPU attack still runs on CPU up to this many history posts (None: never), within the time a run's other
    #: attacks take (:meth:`skip_reason`).
    cpu_posts: ClassVar[int | None] = None

    @classmethod
    def skip_reason(cls, n_history_posts: int, gpu: bool) -> str | None:
        """Why ``all`` leaves this attack out on these histories and this hardware (None: it runs). On CPU a GPU
        attack runs up to its ``cpu_posts`` history posts, or ``SYNTHUGC_CPU_ATTACK_POSTS`` where set."""
        if not cls.needs_gpu or gpu:
            return None
        limit = get_settings().cpu_attack_posts
        limit = cls.cpu_posts if limit is None else limit
        if not limit:
            return "needs a GPU, and none is present"
        if n_history_posts > limit:
            return (f"needs a GPU for {n_history_posts:,} history posts (on CPU it runs up to {limit:,}), "
                    f"and none is present")
        return None

    def __init__(self, params: Any) -> None:
        self.params = params

    @property
    @abstractmethod
    def signature(self) -> str:
        """Everything the attack's numbers depend on (``reid_<attack>|...``)."""

    def build_index(self, histories: HistorySource, out_path: str | os.PathLike) -> None:
        """Write the setting-free index of the histories to ``out_path`` (only where ``builds_index``)."""
        raise NotImplementedError(f"attack '{self.name}' builds no index")

    @abstractmethod
    def prepare(self, histories: HistorySource, setting: Setting, held_out: frozenset[str] | None, *,
                index: str | None = None) -> Any:
        """The adversary's side for one setting (``held_out``: the history documents it lacks)."""

    @abstractmethod
    def run(self, prepared: Any, timelines: pd.DataFrame) -> ReidResult:
        """Attribute every timeline (group_id, author_id, text, doc_id) against the prepared side."""

    def evidence(self, prepared: Any, timelines: pd.DataFrame, top: int = 20, *,
                 authors: set[str] | None = None) -> pd.DataFrame:
        """Per timeline, the features that drove the decision for its true author (``returns_evidence``).
        ``authors``: the authors the evidence is fitted for (default: the timelines'); a caller asking round
        after round for subsets of one set passes that set, so every call scores against the same fit and a
        first call with no timelines fits it ahead."""
        raise NotImplementedError(f"attack '{self.name}' returns no evidence")

    def evidence_key(self, prepared: Any) -> Hashable:
        """What this attack's evidence is computed from: two attacks with one key give the same evidence rows, so
        a caller asking several attacks asks one of them (default: each attack and side its own)."""
        return (self.name, id(prepared))


A = TypeVar("A", bound=type[Attack])
P = TypeVar("P")


class HistoryMemo:
    """What an attack builds from a history file (its author profiles), computed once per process for each
    (file contents, parameters, held-out documents) and reused by every strategy and variant of a run.
    DataFrames are not remembered. Each attack keeps its own memo of the last ``kept`` results (2: full and
    disjoint, which every strategy of a run attacks), so two attacks never evict each other's."""

    def __init__(self, kept: int = 2) -> None:
        self.kept = kept
        self._results: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        _MEMOS.add(self)

    def forget(self, histories: str | os.PathLike) -> None:
        """Drop what was built from the history file ``histories`` (its memory is freed once nothing else holds it)."""
        path = os.path.realpath(os.fspath(histories))
        with self._lock:
            for key in [k for k in self._results if k[0] == path]:
                del self._results[key]

    def get(self, histories: HistorySource, params: Any, held_out: frozenset[str] | None,
            build: Callable[[HistorySource], P]) -> P:
        """``build(histories)``, or what it returned for the same (file contents, ``params``, ``held_out``) before."""
        if isinstance(histories, pd.DataFrame):
            return build(histories)
        path = os.fspath(histories)
        stat = os.stat(path)
        held = hashlib.sha256("\n".join(sorted(held_out)).encode()).hexdigest() if held_out is not None else None
        key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns, params, held)
        with self._lock:  # one thread builds; the others wait for its result instead of redoing it
            if key in self._results:
                self._results.move_to_end(key)
                return self._results[key]
            result = build(path)
            self._results[key] = result
            while len(self._results) > self.kept:
                self._results.popitem(last=False)
            return result


#: Every history memo of the process (each attack's and the evidence's), so a caller done with a history file
#: frees what was built from it (:func:`forget_histories`).
_MEMOS: weakref.WeakSet[HistoryMemo] = weakref.WeakSet()


def forget_histories(histories: str | os.PathLike) -> None:
    """Drop every attack's profiles of the history file ``histories`` from this process's memos."""
    for memo in list(_MEMOS):
        memo.forget(histories)


_REGISTRY: dict[str, type[Attack]] = {}
_LOADED = False


def register_attack(name: str, *, params: type, needs_gpu: bool = False, returns_evidence: bool = False,
                    builds_index: bool = False, cpu_posts: int | None = None) -> Callable[[A], A]:
    """Class decorator: register an Attack subclass under ``name`` with its parameters (a dataclass whose
    fields have defaults) and what it needs and gives. The name becomes a folder (its history index), so it is
    a path segment like every other name that does."""
    if problem := segment_problem(name):
        raise ValueError(f"attack name {name!r}: {problem}")
    if not is_dataclass(params):
        raise TypeError(f"attack '{name}': params must be a dataclass, got {params!r}")

    def decorate(cls: A) -> A:
        if not cls.__module__.startswith(f"{__name__}."):  # an attack from elsewhere: the built-ins come first,
            _registry()                                    # so a name clash with one is caught here
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"attack '{name}' is registered twice ({_REGISTRY[name].__qualname__}, {cls.__qualname__})")
        if not summary_line(cls):
            raise TypeError(f"attack '{name}' needs a docstring: its first line is its description")
        cls.name, cls.params_model = name, params
        cls.needs_gpu, cls.returns_evidence, cls.builds_index = needs_gpu, returns_evidence, builds_index
        cls.cpu_posts = cpu_posts
        _REGISTRY[name] = cls
        return cls

    return decorate


class Prepared(NamedTuple):
    """A profiling attack's side for one setting: the profiles and what they were built from."""

    profiles: Any
    setting: Setting
    histories: HistorySource
    held_out: frozenset[str] | None


class ProfilingAttack(Attack):
    """An attack whose adversary side is a profile per history author, built once per process for each (file
    contents, parameters, held-out documents) by :meth:`profile` (its own :class:`HistoryMemo`: both settings
    kept) and scored against every strategy's timelines by :meth:`attribute`. Its parameters carry its
    signature."""

    _memo: ClassVar[HistoryMemo]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._memo = HistoryMemo()

    @property
    def signature(self) -> str:
        return self.params.signature

    @abstractmethod
    def profile(self, histories: HistorySource, held_out: frozenset[str] | None) -> Any:
        """Every history author's profile, without the held-out documents."""

    @abstractmethod
    def attribute(self, profiles: Any, timelines: pd.DataFrame, setting: Setting) -> ReidResult:
        """Attribute every timeline against the profiles built for ``setting``."""

    def prepare(self, histories: HistorySource, setting: Setting, held_out: frozenset[str] | None, *,
                index: str | None = None) -> Prepared:
        """The profiles for this setting (remembered), with what they were built from (for the evidence)."""
        profiles = self._memo.get(histories, self.params, held_out, lambda source: self.profile(source, held_out))
        return Prepared(profiles, setting, histories, held_out)

    def run(self, prepared: Prepared, timelines: pd.DataFrame) -> ReidResult:
        return self.attribute(prepared.profiles, timelines, prepared.setting)


def _registry() -> dict[str, type[Attack]]:
    """The registry, with every attack module of this package imported (each registers itself)."""
    global _LOADED
    if not _LOADED:
        import_package_modules(__name__)
        _LOADED = True
    return _REGISTRY


def available_attacks() -> list[str]:
    """Names of the registered attacks, sorted."""
    return sorted(_registry())


def attack_class(name: str, *, root: str = CONFIG_ROOT) -> type[Attack]:
    """The attack registered as ``name``; ConfigError naming the known ones otherwise."""
    registry = _registry()
    if name not in registry:
        raise ConfigError(f"{root.rstrip('. ')}: unknown attack {shown(name)} (available: {', '.join(sorted(registry))})")
    return registry[name]


def param_defaults(cls: type[Attack]) -> dict[str, Any]:
    """The attack's parameters with their defaults."""
    return {f.name: (f.default if f.default is not MISSING else None) for f in fields(cls.params_model)}


def build_attack(name: str, params: Mapping[str, Any] | None = None, *, root: str = CONFIG_ROOT) -> Attack:
    """Validate ``params`` against the attack's declared parameters and construct it; ConfigError naming
    the key path on an unknown attack, an unknown parameter or a bad value."""
    cls = attack_class(name, root=root)
    prefix = f"{root}{name}"
    params = dict(params or {})
    known = {f.name for f in fields(cls.params_model)}
    unknown = sorted(set(params) - known, key=str)
    if unknown:
        raise ConfigError(f"{key_path([prefix, unknown[0]])}: unknown parameter (known: {', '.join(sorted(known))})")
    hints = get_type_hints(cls.params_model)
    values = {}
    for key, value in params.items():  # strict: no "5" for 5, no true for 1, no inf
        try:
            values[key] = TypeAdapter(hints[key], config=STRICT_INPUT).validate_python(value)
        except ValidationError as exc:
            raise ConfigError(validation_line(exc, f"{prefix}.{key}")) from None
    try:
        validated = cls.params_model(**values)
    except ValueError as exc:  # the dataclass's own checks (__post_init__)
        raise ConfigError(f"{prefix}: {exc}") from None
    return cls(validated)


#: Device files of a GPU torch can drive (NVIDIA's, AMD's ROCm): without any, CUDA cannot be present.
_GPU_DEVICES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def gpu_present() -> bool:
    """Whether CUDA is present (the GPU attacks then run at any size). Where no GPU device file exists, torch is
    not imported to ask (1.5 s of a cached rerun)."""
    if not any(os.path.exists(device) for device in _GPU_DEVICES):
        return False
    try:
        import torch  # heavy: deferred on purpose, only where a GPU device exists

        return bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover - torch is a dependency
        return False


ALL = "all"


@dataclass(frozen=True)
class AttackPlan:
    """Which registered attacks run (in order) and, for every other registered attack, why not."""

    names: tuple[str, ...]
    left_out: Mapping[str, str]

    def lines(self) -> list[str]:
        """One line per attack left out: ``embedding: needs a GPU for ...``."""
        return [f"{name}: {why}" for name, why in sorted(self.left_out.items())]


def plan_attacks(requested: str | Sequence[str], n_history_posts: int, *, gpu: bool | None = None,
                 asked: str = "--attack") -> AttackPlan:
    """The attacks to run: ``all`` (every registered attack that can run on these histories and this hardware:
    :meth:`Attack.skip_reason`), or the named ones (each registered; ValueError naming the known ones), which
    run as asked. Every registered attack not run is named with its reason."""
    registry = _registry()
    gpu = gpu_present() if gpu is None else gpu
    names = [requested] if isinstance(requested, str) else list(requested)
    run: list[str] = []
    left_out: dict[str, str] = {}
    for name in names:
        if name == ALL:
            for known in sorted(registry):
                if (why := registry[known].skip_reason(n_history_posts, gpu)) is None:
                    run.append(known)
                else:
                    left_out[known] = why
        elif name not in registry:
            raise ValueError(f"attack must be one of {', '.join(sorted(registry))} or {ALL}; got {shown(name)}")
        else:
            run.append(name)
    run = list(dict.fromkeys(run))
    for known in sorted(registry):
        if known not in run and known not in left_out:
            left_out[known] = f"not asked for ({asked} {','.join(dict.fromkeys(names))})"
    return AttackPlan(tuple(run), {k: v for k, v in left_out.items() if k not in run})


def attack_names(attack: str, n_history_posts: int = 0) -> list[str]:
    """The attacks ``--attack`` names: a registered attack, or ``all`` (:func:`plan_attacks`)."""
    return list(plan_attacks(attack, n_history_posts).names)


def setting_names(setting: str) -> list[Setting]:
    """The settings ``--adversary`` names: full, disjoint or both."""
    return list(SETTINGS) if setting == "both" else [check_setting(setting)]


def run_attacks(histories: HistorySource, timelines: pd.DataFrame, attacks: Sequence[Attack],
                settings: Sequence[str], *, indexes: Mapping[str, str] | None = None) -> list[ReidResult]:
    """One result per (attack, setting), in that order; ``indexes`` maps an attack's name to the index
    its ``build_index`` wrote, where the caller has one."""
    results = []
    for attack in attacks:
        for setting in settings:
            adversary = check_setting(setting)
            prepared = attack.prepare(histories, adversary, held_out_doc_ids(timelines, adversary),
                                      index=(indexes or {}).get(attack.name))
            result = attack.run(prepared, timelines)
            result.summary.update(attack=attack.name, adversary=adversary, signature=attack.signature)
            results.append(result)
    return results


@dataclass
class AttackTables:
    """One strategy's attack results: per-timeline attributions, the long score rows, the raw summaries."""

    per_timeline: pd.DataFrame
    scores: pd.DataFrame
    summaries: list[dict[str, Any]]


def attack_synthetic(histories: HistorySource, synthetic: pd.DataFrame, label: str, attacks: Sequence[Attack],
                     settings: Sequence[str], *, indexes: Mapping[str, str] | None = None,
                     timeline_posts: int | None = None, left_out: Mapping[str, str] | None = None) -> AttackTables:
    """Every attack under every setting against each variant of one strategy's synthetic table (ok rows
    with a known author, grouped into timelines, split into runs of ``timeline_posts`` posts when given);
    the scores are the declared long score table. ``left_out``: registered attacks that did not run, by name,
    with why: each gets its score rows without a value and with the reason, so the report names it."""
    per_timeline, rows, summaries = [], [], []
    for variant, part in synthetic.groupby("variant", sort=True):
        epsilon = variant_epsilons(part).get(str(variant))
        timelines = attack_timelines(part, timeline_posts)
        for result in run_attacks(histories, timelines, attacks, settings, indexes=indexes):
            summary = result.summary
            per_timeline.append(result.per_timeline.assign(strategy=label, variant=str(variant),
                                                           attack=summary["attack"], adversary=summary["adversary"]))
            rows += reidentification_rows(summary, label, str(variant), str(summary.get("signature", "")),
                                          attack=summary["attack"], adversary=summary["adversary"], epsilon=epsilon)
            summaries.append({"strategy": label, "variant": str(variant), **summary})
        for name, why in sorted((left_out or {}).items()):
            for setting in settings:
                skipped = {"reason": f"not run: {why}", "n_timelines": 0}
                rows += [r for r in reidentification_rows(skipped, label, str(variant), "", attack=name,
                                                          adversary=str(setting), epsilon=epsilon)
                         if r["strategy"] == label and r["metric"] in ("reid_accuracy", "reid_residual_risk")]
    return AttackTables(pd.concat(per_timeline, ignore_index=True) if per_timeline else pd.DataFrame(),
                        summary_frame(rows), summaries)


def summary_table(summaries: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per (attack, adversary) with real columns (SUMMARY_FIELDS)."""
    rows = [{f: s.get(f) for f in SUMMARY_FIELDS} for s in summaries]
    table = pd.DataFrame(rows, columns=SUMMARY_FIELDS)
    table["reason"] = table["reason"].astype("string")
    return table


def worst_case(rows: pd.DataFrame, metric: str = "accuracy_at_1", by: Sequence[str] = ("strategy",)) -> pd.DataFrame:
    """Per ``by`` group, the (attack, adversary) with the highest ``metric`` (the verdict a user must
    read: the strongest attack wins); rows whose value is nan never win. Ties go to the first in
    (attack, adversary) order. Columns: by..., attack, adversary, metric value, n_attacks."""
    keys = list(by)
    valid = rows[rows[metric].notna()].sort_values([*keys, "attack", "adversary"], kind="stable")
    if valid.empty:
        return pd.DataFrame(columns=[*keys, "attack", "adversary", metric, "n_attacks"])
    best = valid.loc[valid.groupby(keys, sort=True)[metric].idxmax()]
    counts = valid.groupby(keys, sort=True).size().rename("n_attacks").reset_index()
    return best[[*keys, "attack", "adversary", metric]].merge(counts, on=keys).reset_index(drop=True)


def catalogue_rows() -> list[dict[str, Any]]:
    """Every registered attack: name, parameters with defaults, GPU or not, evidence or not, description."""
    return [{"name": name, "params": param_defaults(cls), "needs_gpu": cls.needs_gpu,
             "returns_evidence": cls.returns_evidence, "description": summary_line(cls)}
            for name, cls in sorted(_registry().items())]
