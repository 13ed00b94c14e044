"""What a protect run depends on, with its defaults: the one owner the loop, the CLI's help and the config's
``protect:`` section read (a light module: the CLI imports it to write its help)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tasks.budgets import Bound, parse_budget
from tasks.errors import ConfigError
from tasks.metrics.base import VERBATIM_MIN_CHARS
from tasks.protect.moves import DEFAULT_LADDER, LLM_ANONYMIZE, PSEUDONYMIZE, Move

if TYPE_CHECKING:
    from tasks.privacy.attacks import AttackPlan

ON_FAIL: tuple[str, ...] = ("drop", "keep", "error")
ADVERSARIES: tuple[str, ...] = ("full", "disjoint")
#: What the output exposes to an adversary, and so what the loop and the certificate attack: an author's documents
#: together (``timeline``, while authors or groups stay linked) or each document alone (``post``: a release drops
#: the author and group pseudonyms and shuffles the rows).
UNITS: tuple[str, ...] = ("timeline", "post")
#: What the frontier's chosen point favours among the points that meet the budget: the most meaning handed out in all
#: (``balanced``: rows released times their mean meaning, so neither a few perfect rows nor many poor ones win), the
#: most meaning kept per row (``meaning``: the highest floor) or the most rows released (``rows``); ties: the higher
#: floor.
PREFER: tuple[str, ...] = ("balanced", "meaning", "rows")
#: Verbatim is always in the loop: release leaves out every row holding a run of its source, so protect works on those
#: rows too; a budget that names no verbatim bound gets this one, and ``verbatim<=1`` lifts it by name.
VERBATIM = "verbatim"
DEFAULT_VERBATIM = "verbatim<=0.05"
DEFAULT_BUDGET = f"reidentification<=0.10,{DEFAULT_VERBATIM}"
#: Budget figures that are shares of documents: a bound at 1 bounds nothing.
SHARES = frozenset({VERBATIM, "pii_leakage"})
#: The default fluency floor: a candidate may read at most this much worse than its source (SLOR difference,
#: nats per word, :mod:`tasks.metrics.fluency`). A single doubled word or swapped pair costs 0.3-1.5 on a
#: sentence, a garbled round trip 2-4.5 (tests/test_fluency.py's fixtures).
FLUENCY_FLOOR = -1.0
#: What protect's attack lists are written as when every registered attack is meant.
EVERY_ATTACK = "all"


AttackSpecs = tuple[tuple[str, Mapping[str, Any]], ...]

#: The default feedback: the stylometric and classifier attacks, whose evidence the moves mask and generalize, and
#: the embedding attack, which catches what speakers talk about (no evidence: the moves that need none act on what
#: it catches); each where it can run on the histories here (the embedding attack needs a GPU on large ones).
#: benchmarks/frontier.py compares it with stylometric feedback alone: ``frontier`` in docs/performance.md.
DEFAULT_FEEDBACK: AttackSpecs = (("stylometric", {}), ("classifier", {}), ("embedding", {}))


@dataclass(frozen=True)
class ProtectSettings:
    """Everything a protect run depends on, with its defaults (the CLI's help and the config's ``protect:`` section
    read them here). The budget, ``max_rounds``, ``on_fail``, ``decide_on`` and ``prefer`` decide when to stop and
    what to write, not what a round computes: they are not in the rounds' cache key."""

    budget: str = DEFAULT_BUDGET
    start: str = PSEUDONYMIZE
    ladder: tuple[Move, ...] = DEFAULT_LADDER
    max_rounds: int = 6
    meaning_floors: tuple[float, ...] = (0.80,)  # a kept move's least BERTScore F1; several make a frontier
    fluency_floor: float | None = FLUENCY_FLOOR  # a kept move's least fluency against its source (None: no floor)
    prefer: str = "balanced"
    on_fail: str = "drop"
    decide_on: str = "bound"
    feedback: AttackSpecs = DEFAULT_FEEDBACK
    #: None: every registered attack that can run on the histories here (and the feedback attacks, always).
    judge: AttackSpecs | None = None
    #: Parameters of the attacks the judge and the certificate run without being named (``privacy.reidentify.params``).
    attack_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    adversaries: tuple[str, ...] = ("disjoint",)
    timeline_posts: int | None = None
    unit: str = "timeline"
    evidence_top: int = 20
    #: Per caught timeline and round, the documents carrying the most feedback evidence that are moved (None:
    #: every document of the timeline); documents carrying none are not moved for re-identification.
    docs_per_round: int | None = None
    #: A document holding a run of at least this many characters of its source is verbatim.
    verbatim_chars: int = VERBATIM_MIN_CHARS
    pii_scope: str = "author"
    seed: int = 0
    llm: Mapping[str, Any] = field(default_factory=dict)  # the llm role's settings (endpoint, model) for llm-anonymize
    #: The profiling classifiers' LinearTextClassifier parameters. Feedback: tasks/privacy/profiling.py's own model
    #: (logistic regression on word 1-2-grams, C=1), whose per-class weights are the masking evidence. Judge (and
    #: certificate): a linear SVM (squared hinge) on sublinear TF-IDF word 1-3-grams, C and class weighting chosen
    #: by cross-validation: another loss, n-gram range and regularisation, so what the masking of the feedback's
    #: words leaves still counts. Both read word tokens: LinearTextClassifier has no character n-grams.
    profiling_feedback: Mapping[str, Any] = field(default_factory=dict)
    profiling_judge: Mapping[str, Any] = field(default_factory=lambda: {
        "loss": "hinge", "ngram_range": (1, 3), "sublinear_tf": True, "C": "auto", "class_weight": "auto"})
    #: The budget's bounds, read once from ``budget``.
    bounds: tuple[Bound, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check(self)
        object.__setattr__(self, "budget", with_verbatim(self.budget))
        object.__setattr__(self, "bounds", tuple(parse_budget(self.budget, "budget", protect=True)))

    @property
    def meaning_floor(self) -> float:
        """The floor of a single protect point (a frontier's settings are split by :meth:`at_floor` first)."""
        if len(self.meaning_floors) != 1:
            raise ValueError(f"settings with several floors ({list(self.meaning_floors)}): take one with at_floor()")
        return self.meaning_floors[0]

    @property
    def floors(self) -> tuple[float, ...]:
        """The frontier's floors, highest (most meaning kept) first."""
        return tuple(sorted(self.meaning_floors, reverse=True))

    def at_floor(self, floor: float) -> ProtectSettings:
        """The settings of one frontier point."""
        return replace(self, meaning_floors=(floor,))

    @property
    def attack_posts(self) -> int | None:
        """Posts per attacked unit: one at ``post`` unit, else ``timeline_posts`` (None: whole timelines)."""
        return 1 if self.unit == "post" else self.timeline_posts

    def bounds_figure(self, figure: str) -> bool:
        """Whether the budget bounds ``figure`` (pii_leakage, verbatim and profiling change what is caught); a share
        bounded at 1 or more is not bounded (``verbatim<=1`` lifts the default verbatim bound)."""
        return any(b.column == figure and not (figure in SHARES and b.limit >= 1) for b in self.bounds)

    @property
    def pii(self) -> bool:
        """Whether the budget bounds PII leakage (documents still leaking are then caught)."""
        return self.bounds_figure("pii_leakage")

    @property
    def profiling(self) -> bool:
        """Whether the budget bounds profiling (its classifiers then run and catch)."""
        return self.bounds_figure("profiling")

    def params_of(self, name: str) -> Mapping[str, Any]:
        """An attack's parameters: as the feedback or judge names it, else ``attack_params``."""
        for specs in (self.feedback, self.judge or ()):
            for given, params in specs:
                if given == name:
                    return params
        return self.attack_params.get(name, {})

    def _specs(self, plan: AttackPlan) -> AttackSpecs:
        return tuple((name, self.params_of(name)) for name in plan.names)

    def judge_plan(self, n_history_posts: int, gpu: bool) -> AttackPlan:
        """The judge's attacks: the ones named (every registered attack that can run here, by default) and the
        feedback attacks; the registered ones left out, with why."""
        # deferred: loads fsspec, llvmlite, numba, pyarrow, yaml only when this runs
        from tasks.privacy.attacks import plan_attacks

        asked = [EVERY_ATTACK] if self.judge is None else [n for n, _ in self.judge]
        return plan_attacks([*asked, *(n for n, _ in self.feedback)], n_history_posts, gpu=gpu, asked="--judge")

    def certificate_plan(self, n_history_posts: int, gpu: bool) -> AttackPlan:
        """The certificate's attacks: every registered attack that can run here, and any the judge or the feedback
        names besides."""
        # deferred: loads fsspec, llvmlite, numba, pyarrow, yaml only when this runs
        from tasks.privacy.attacks import plan_attacks

        named = [n for n, _ in (*self.feedback, *(self.judge or ()))]
        return plan_attacks([EVERY_ATTACK, *named], n_history_posts, gpu=gpu, asked="--judge")

    def runnable_feedback(self, n_history_posts: int, gpu: bool) -> tuple[ProtectSettings, dict[str, str]]:
        """The settings with the default feedback narrowed to the attacks that can run here, and those left out
        with why (feedback the user names runs as named)."""
        # deferred: loads fsspec, llvmlite, numba, pyarrow, yaml only when this runs
        from tasks.privacy.attacks import attack_class

        if [n for n, _ in self.feedback] != [n for n, _ in DEFAULT_FEEDBACK]:
            return self, {}
        left_out = {n: why for n, _ in self.feedback
                    if (why := attack_class(n).skip_reason(n_history_posts, gpu)) is not None}
        return replace(self, feedback=tuple(f for f in self.feedback if f[0] not in left_out)), left_out

    def check_attacks(self, judge: AttackPlan, n_history_posts: int, gpu: bool) -> tuple[str, ...]:
        """The registered attacks a narrowed judge leaves out that could run here (what ``all`` would run):
        round 0 runs them on the judge's half for the judge-strength check."""
        # deferred: loads fsspec, llvmlite, numba, pyarrow, yaml only when this runs
        from tasks.privacy.attacks import plan_attacks

        return tuple(n for n in plan_attacks(EVERY_ATTACK, n_history_posts, gpu=gpu).names if n not in judge.names)

    def round_key(self, judge: AttackPlan, check: tuple[str, ...], *, floor: bool = True) -> dict[str, Any]:
        """What a round's output depends on besides the corpus and the histories (``judge``: the resolved
        judge; ``check``: the attacks round 0 also runs for the judge-strength check; without ``floor``: what
        round 0 depends on, which keeps every document's starting move whatever its meaning, so the points of a
        frontier share it)."""
        return {"start": self.start, "ladder": [m.as_config() for m in self.ladder],
                "floor": self.meaning_floor if floor else None,
                "fluency_floor": self.fluency_floor if floor else None,
                "feedback": [[n, dict(p)] for n, p in self.feedback],
                "judge": [[n, dict(p)] for n, p in self._specs(judge)], "check": list(check),
                "adversaries": list(self.adversaries), "timeline_posts": self.timeline_posts,
                "unit": self.unit,
                "evidence_top": self.evidence_top, "docs_per_round": self.docs_per_round,
                "pii": self.pii, "verbatim": [self.verbatim_chars, self.bounds_figure("verbatim")],
                "pii_scope": self.pii_scope, "seed": self.seed,
                "profiling": {"feedback": dict(self.profiling_feedback), "judge": dict(self.profiling_judge)}
                if self.profiling else None,
                "llm": dict(self.llm) if any(m.name == LLM_ANONYMIZE for m in self.ladder) else {}}


def with_verbatim(budget: str) -> str:
    """``budget`` with the default verbatim bound where it names none (verbatim is always in the loop unless a budget
    lifts it by name: ``verbatim<=1``)."""
    named = {b.column for b in parse_budget(budget, "budget", protect=True)}
    return budget if VERBATIM in named else f"{budget},{DEFAULT_VERBATIM}"


def _check(settings: ProtectSettings) -> None:
    """ConfigError for a setting out of its range (the budget is checked as it is read)."""
    if settings.max_rounds < 0 or settings.max_rounds > 100:
        raise ConfigError(f"max_rounds must be in [0, 100]; got {settings.max_rounds}")
    if not settings.meaning_floors or not all(0.0 <= f <= 1.0 for f in settings.meaning_floors):
        raise ConfigError(f"meaning_floor must be one or more floors in [0, 1]; got {list(settings.meaning_floors)}")
    if len(set(settings.meaning_floors)) != len(settings.meaning_floors):
        raise ConfigError(f"meaning_floor names a floor twice: {list(settings.meaning_floors)}")
    if settings.fluency_floor is not None and not -20.0 <= settings.fluency_floor <= 0.0:
        raise ConfigError(f"fluency_floor must be in [-20, 0] (nats per word against the source) or off; got "
                          f"{settings.fluency_floor}")
    if settings.prefer not in PREFER:
        raise ConfigError(f"prefer must be one of {', '.join(PREFER)}; got {settings.prefer!r}")
    if settings.unit not in UNITS:
        raise ConfigError(f"unit must be one of {', '.join(UNITS)}; got {settings.unit!r}")
    if settings.on_fail not in ON_FAIL:
        raise ConfigError(f"on_fail must be one of {', '.join(ON_FAIL)}; got {settings.on_fail!r}")
    if settings.docs_per_round is not None and settings.docs_per_round < 1:
        raise ConfigError(f"docs_per_round must be at least 1 (or None: every document); got {settings.docs_per_round}")
    if not 1 <= settings.verbatim_chars <= 10_000:
        raise ConfigError(f"verbatim_chars must be in [1, 10000]; got {settings.verbatim_chars}")
    if not settings.feedback or (settings.judge is not None and not settings.judge):
        raise ConfigError("protect needs at least one feedback attack and one judge attack")
