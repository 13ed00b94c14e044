"""What a protect run depends on, with its defaults: the one owner the loop, the CLI's help and the config's
``protect:`` section read (a light module: the CLI imports it to write its help)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tasks.budgets import Bound, parse_budget
from tasks.errors import ConfigError
from tasks.metrics.base import VERBATIM_MIN_CHARS
from tasks.protect.moves import DEFAULT_LADDER, LLM_ANONYMIZE, PSEUDONYMIZE, Move

if TYPE_CHECKING:
    from tasks.privacy.attacks import AttackPlan

ON_FAIL: tuple[str, ...] = ("drop", "keep", "error")
ADVERSARIES: tuple[str, ...] = ("full", "disjoint")
#: What protect's attack lists are written as when every registered attack is meant.
EVERY_ATTACK = "all"


AttackSpecs = tuple[tuple[str, Mapping[str, Any]], ...]


@dataclass(frozen=True)
class ProtectSettings:
    """Everything a protect run depends on, with its defaults (the CLI's help and the config's ``protect:``
    section read them here). The budget, ``max_rounds``, ``on_fail`` and ``decide_on`` decide when to stop and what
    to write, not what a round computes, so they are not in the rounds' cache key."""

    budget: str = "reidentification<=0.10"
    start: str = PSEUDONYMIZE
    ladder: tuple[Move, ...] = DEFAULT_LADDER
    max_rounds: int = 6
    meaning_floor: float = 0.80
    on_fail: str = "drop"
    decide_on: str = "bound"
    feedback: AttackSpecs = (("stylometric", {}),)
    #: None: every registered attack that can run on the histories here (and the feedback attacks, always).
    judge: AttackSpecs | None = None
    #: Parameters of the attacks the judge and the certificate run without being named (``privacy.reidentify.params``).
    attack_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    adversaries: tuple[str, ...] = ("disjoint",)
    timeline_posts: int | None = None
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
        if self.max_rounds < 0 or self.max_rounds > 100:
            raise ConfigError(f"max_rounds must be in [0, 100]; got {self.max_rounds}")
        if not 0.0 <= self.meaning_floor <= 1.0:
            raise ConfigError(f"meaning_floor must be in [0, 1]; got {self.meaning_floor}")
        if self.on_fail not in ON_FAIL:
            raise ConfigError(f"on_fail must be one of {', '.join(ON_FAIL)}; got {self.on_fail!r}")
        if self.docs_per_round is not None and self.docs_per_round < 1:
            raise ConfigError(f"docs_per_round must be at least 1 (or None: every document); got {self.docs_per_round}")
        if not 1 <= self.verbatim_chars <= 10_000:
            raise ConfigError(f"verbatim_chars must be in [1, 10000]; got {self.verbatim_chars}")
        if not self.feedback or (self.judge is not None and not self.judge):
            raise ConfigError("protect needs at least one feedback attack and one judge attack")
        object.__setattr__(self, "bounds", tuple(parse_budget(self.budget, "budget", protect=True)))

    def bounds_figure(self, figure: str) -> bool:
        """Whether the budget bounds ``figure`` (pii_leakage, verbatim and profiling change what is caught)."""
        return figure in {b.column for b in self.bounds}

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
        from tasks.privacy.attacks import plan_attacks

        asked = [EVERY_ATTACK] if self.judge is None else [n for n, _ in self.judge]
        return plan_attacks([*asked, *(n for n, _ in self.feedback)], n_history_posts, gpu=gpu, asked="--judge")

    def certificate_plan(self, n_history_posts: int, gpu: bool) -> AttackPlan:
        """The certificate's attacks: every registered attack that can run here, and any the judge or the feedback
        names besides."""
        from tasks.privacy.attacks import plan_attacks

        named = [n for n, _ in (*self.feedback, *(self.judge or ()))]
        return plan_attacks([EVERY_ATTACK, *named], n_history_posts, gpu=gpu, asked="--judge")

    def check_attacks(self, judge: AttackPlan, n_history_posts: int, gpu: bool) -> tuple[str, ...]:
        """The registered attacks a narrowed judge leaves out that could run here (what ``all`` would run):
        round 0 runs them on the judge's half for the judge-strength check."""
        from tasks.privacy.attacks import plan_attacks

        return tuple(n for n in plan_attacks(EVERY_ATTACK, n_history_posts, gpu=gpu).names if n not in judge.names)

    def round_key(self, judge: AttackPlan, check: tuple[str, ...]) -> dict[str, Any]:
        """What a round's output depends on besides the corpus and the histories (``judge``: the resolved
        judge; ``check``: the attacks round 0 also runs for the judge-strength check)."""
        return {"start": self.start, "ladder": [m.as_config() for m in self.ladder], "floor": self.meaning_floor,
                "feedback": [[n, dict(p)] for n, p in self.feedback],
                "judge": [[n, dict(p)] for n, p in self._specs(judge)], "check": list(check),
                "adversaries": list(self.adversaries), "timeline_posts": self.timeline_posts,
                "evidence_top": self.evidence_top, "docs_per_round": self.docs_per_round,
                "pii": self.pii, "verbatim": [self.verbatim_chars, self.bounds_figure("verbatim")],
                "pii_scope": self.pii_scope, "seed": self.seed,
                "profiling": {"feedback": dict(self.profiling_feedback), "judge": dict(self.profiling_judge)}
                if self.profiling else None,
                "llm": dict(self.llm) if any(m.name == LLM_ANONYMIZE for m in self.ladder) else {}}


