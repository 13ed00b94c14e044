"""The experiment configuration's sections: one pydantic model per YAML section, ``ExperimentConfig`` the whole.

Unknown keys and bad values are rejected with their key path (``generate.strategies.0.params.pivots``); each
section checks its own values here. Reading a YAML file, applying ``--set`` overrides and the checks that span
sections are in flows/config.py; the task options derived from a validated config in flows/config_options.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tasks.budgets import PROTECT_FIGURES, parse_budget
from tasks.errors import STRICT_INPUT, ConfigError, shown
from tasks.intervals import N_RESAMPLES
from tasks.limits import (
    MAX_DOCS,
    MAX_EXAMPLES,
    MAX_LAYER,
    MAX_REPEATS,
    MAX_SEED,
    MAX_SHARD,
    MAX_TEXT_CHARS,
    MAX_TOKENS,
    MAX_UTILITY_SEEDS,
)
from tasks.metrics.base import VERBATIM_MIN_CHARS
from tasks.metrics.suite import DEFAULT_METRICS, check_metric_names
from tasks.models.pii import DEFAULT_ENTITIES as DEFAULT_PII_ENTITIES
from tasks.models.pii import check_entities
from tasks.models.registry import ROLES
from tasks.paths import segment_problem
from tasks.protect.moves import LLM_RUNGS, parse_ladder
from tasks.protect.settings import ProtectSettings
from tasks.report.goals import parse_goal


class Section(BaseModel):
    """A config section: unknown keys refused, numbers strict and finite (``STRICT_INPUT``)."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)


def _path_segment(value: str | None) -> str | None:
    """A name that becomes a path segment (experiment, strategy, label, attribute): checked in tasks/paths.py."""
    if value is not None and (problem := segment_problem(value)):
        raise ValueError(problem.replace(f"'{value}'", shown(value), 1) if isinstance(value, str) else problem)
    return value


class DataConfig(Section):
    """Where the corpus comes from: a public dataset by name or a corpus file in the schema."""

    dataset: str | None = Field(None, description="Public dataset name (synthugc datasets list).")
    path: str | None = Field(None, description="Corpus file (parquet/csv/jsonl) already in the schema.")
    max_chars: int = Field(20_000, gt=0, le=MAX_TEXT_CHARS,
                           description="Texts longer than this become failure records.")
    max_docs: int | None = Field(None, gt=0, le=MAX_DOCS,
                                 description="Keep at most this many documents (whole groups, seeded).")

    @model_validator(mode="after")
    def _one_source(self) -> DataConfig:
        if (self.dataset is None) == (self.path is None):
            raise ValueError("give exactly one of data.dataset or data.path")
        return self


class SplitConfig(Section):
    """Splits by group and undersampling of the training split."""

    train: float = Field(0.8, ge=0, le=1)
    val: float = Field(0.1, ge=0, le=1)
    test: float = Field(0.1, ge=0, le=1)
    train_fraction: float = Field(1.0, gt=0, le=1, description="Undersample the training split (1.0, 0.5, 0.1).")

    @model_validator(mode="after")
    def _sums_to_one(self) -> SplitConfig:
        if abs(self.train + self.val + self.test - 1.0) > 1e-6:
            raise ValueError("split.train + split.val + split.test must be 1")
        return self


class StrategyConfig(Section):
    """One generation strategy with its parameters; ``label`` names it in outputs (default: the name)."""

    name: str
    label: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    pseudonymize: bool = Field(True, description="Rewrite the pseudonymised corpus when generate.pseudonymize is "
                                                  "set (false: this strategy rewrites the original texts).")

    @field_validator("name", "label")
    @classmethod
    def _path_safe(cls, value: str | None) -> str | None:
        return _path_segment(value)

    @property
    def key(self) -> str:
        return self.label or self.name


class PseudonymizeConfig(Section):
    """Replace direct identifiers by consistent surrogates before any strategy (tasks/generate/pseudonymize.py)."""

    entities: list[str] = Field(default_factory=lambda: list(DEFAULT_PII_ENTITIES),
                                description="PII types (Presidio names plus SOCIAL_HANDLE).")
    scope: Literal["document", "group", "author"] = Field(
        "document", description="Same surrogate for the same value within a document, group or author.")

    @field_validator("entities")
    @classmethod
    def _known_entities(cls, value: list[str]) -> list[str]:
        if list(value) == list(DEFAULT_PII_ENTITIES):
            return value  # known without loading the detector

        return list(check_entities(value))


class GenerateConfig(Section):
    shard_size: int = Field(250, gt=0, le=MAX_SHARD,
                            description="Documents per generation shard (the unit of resume).")
    strategies: list[StrategyConfig] = Field(min_length=1)
    pseudonymize: PseudonymizeConfig | None = Field(
        None, description="Pseudonymise the corpus before every strategy (off when absent).")

    @field_validator("strategies")
    @classmethod
    def _unique_labels(cls, value: list[StrategyConfig]) -> list[StrategyConfig]:
        keys = [s.key for s in value]
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise ValueError(f"strategy labels must be unique, repeated: {', '.join(sorted(dup))}")
        return value


class BertScoreConfig(Section):
    layer: int | None = Field(None, ge=0, le=MAX_LAYER,
                              description="Token encoder layer (default: the model's BERTScore layer).")
    idf: bool = False
    baseline: str | None = Field(None, description="bert_score baseline CSV for rescaling.")


class TransferConfig(Section):
    """Style transfer intensity (STI) and content preservation (CPS), seed 002."""

    classifier: str = Field("subjectivity", description="subjectivity | vader | a sequence-classifier folder or hub id.")
    target: str | None = Field(None, description="Target style class (default: objective / neutral / class 0).")
    cps_mask: Literal["pad", "remove"] | None = Field(None, description="Mask style words before CPS.")
    cps_threshold: float = Field(0.3, gt=0, le=1, description="Attribution share masked when cps_mask is set.")


class FbdConfig(Section):
    """FBD (Xiang et al. 2021): which token-encoder layer and pooling give the text vectors."""

    layer: int | None = Field(None, ge=0, le=MAX_LAYER, description="Hidden layer (default: the last, as Xiang et al.).")
    pooling: Literal["cls", "mean", "mean-all"] = Field("cls", description="cls (Xiang et al.), mean (content "
                                                        "tokens) or mean-all (every token).")


class VerbatimConfig(Section):
    """The ``verbatim`` figure: the share of outputs that still hold a run of their own source."""

    min_chars: int = Field(VERBATIM_MIN_CHARS, ge=1, le=MAX_TEXT_CHARS,
                           description="Shortest run of its source (characters, whitespace runs collapsed, case "
                                       "folded) that makes an output verbatim.")


class MetaevalConfig(Section):
    """Check the run's distribution- and bag-level metrics themselves on manipulated bags of the real corpus
    (seed 003 §4.2); off by default (minutes on CPU), on in the demo."""

    enabled: bool = False
    bag_size: int = Field(100, ge=4, le=MAX_REPEATS, description="Texts per reference bag (100: the seed's cap).")
    bags: int = Field(1, ge=1, le=MAX_REPEATS, description="Reference bags to average over.")


class MetricsConfig(Section):
    """Which intrinsic metrics to compute (all of them by default) and how."""

    names: list[str] = Field(default_factory=lambda: list(DEFAULT_METRICS),
                             description="Metric names (synthugc metrics lists them).")
    shard_size: int = Field(2000, gt=0, le=MAX_SHARD, description="Pairs per Dask shard for sample-level metrics.")
    bag_group: str = Field("group_id", description="Column forming bags for bag-level metrics (group_id, author_id).")
    bertscore: BertScoreConfig = Field(default_factory=BertScoreConfig)
    fbd: FbdConfig = Field(default_factory=FbdConfig)
    transfer: TransferConfig = Field(default_factory=TransferConfig)
    metaeval: MetaevalConfig = Field(default_factory=MetaevalConfig)
    verbatim: VerbatimConfig = Field(default_factory=VerbatimConfig)
    n_bootstrap: int = Field(N_RESAMPLES, ge=10, le=MAX_REPEATS,
                             description="Resamples of the 95% interval of each mean score (bootstrap over documents).")

    @field_validator("names")
    @classmethod
    def _known_metrics(cls, value: list[str]) -> list[str]:
        return check_metric_names(value)


class ProfilingConfig(Section):
    """Attribute profiling by trained classifiers (seed 000 §5.1.2)."""

    attributes: list[str] | None = Field(None, description="Attribute names (without attr_); default: all.")
    models: list[Literal["linear", "encoder"]] = Field(default_factory=lambda: ["linear"])
    level: Literal["post", "author"] = "post"

    @field_validator("attributes")
    @classmethod
    def _path_safe(cls, values: list[str] | None) -> list[str] | None:
        for value in values or []:
            _path_segment(value)
        return values


class MembershipConfig(Section):
    """Distance-to-closest-record membership audit (train docs released, test docs held out)."""

    enabled: bool = True
    embed: Literal["tfidf", "sbert"] = "tfidf"
    n_bootstrap: int = Field(N_RESAMPLES, ge=10, le=MAX_REPEATS,
                             description="Resamples of every privacy bootstrap interval (membership AUC, profiling "
                                         "macro-F1).")


class ReidentifyConfig(Section):
    """Re-identification (seed 000 §5.3.2) against the adversary's posting histories: every attack under every
    adversary setting; the verdicts use the worst case."""

    enabled: bool = True
    attacks: list[str] = Field(
        default_factory=lambda: ["all"], min_length=1,
        description="Registered attacks (`synthugc attacks` lists them with their parameters), or all (the default): "
                    "every registered attack that can run on the histories and this hardware (the embedding attack "
                    "needs a GPU above a few thousand history posts); one left out is named, with why, in the log "
                    "and the report. The verdicts take the worst case over those run.")
    adversaries: list[Literal["full", "disjoint"]] = Field(
        default_factory=lambda: ["full", "disjoint"], min_length=1,
        description="full: the histories hold the rewritten originals (the article's setting); disjoint: only "
                    "the users' other posts.")
    params: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-attack parameters, e.g. {stylometric: {mode: exact}, minhash: {k: 64, "
                                          "bands: 8, rows: 8}}; a seed left out is the run's seed.")
    histories: str | None = Field(None, description="Histories parquet (author_id, text); default: the "
                                                     "corpus's own documents, i.e. the adversary holds the originals.")
    timeline_posts: int | None = Field(
        None, gt=0, description="Split each attacked timeline (an author's posts in one group) into runs of at most "
                                "this many consecutive posts, each attacked on its own: more trials, so a budget can "
                                "be decided on the 95% interval (10 timelines can never show a 0.10 budget met), "
                                "each with less text to go on. Default: whole timelines.")

    def attack_names(self) -> list[str]:
        """The configured attacks, ``all`` read as every registered attack."""
        # deferred: loads llvmlite, numba only when this runs
        from tasks.privacy.attacks import ALL, available_attacks

        return list(dict.fromkeys(n for name in self.attacks for n in (available_attacks() if name == ALL else [name])))

    def optional_attacks(self) -> tuple[str, ...]:
        """The attacks only ``all`` asks for: left out (with why) where they cannot run on the histories."""
        return tuple(n for n in self.attack_names() if n not in self.attacks)

    def attack_params(self, seed: int) -> list[tuple[str, dict[str, Any]]]:
        """(attack, parameters) per configured attack, the run's seed where the attack takes one and the
        config does not set it."""
        # deferred: loads llvmlite, numba only when this runs
        from tasks.privacy.attacks import attack_class, param_defaults

        return [(name, {**({"seed": seed} if "seed" in param_defaults(attack_class(name)) else {}),
                        **self.params.get(name, {})}) for name in self.attack_names()]


class LLMProfilingConfig(Section):
    """Zero-shot LLM profiling (seed 000 §5.2.2, A.5); off by default (slow without a GPU server)."""

    enabled: bool = False
    max_tokens: int = Field(512, gt=0, le=MAX_TOKENS)
    n: int | None = Field(None, gt=0, le=MAX_DOCS, description="Dialogues per stratum (default: the rarest class size).")


class AuditDPConfig(Section):
    """The empirical DP audit (tasks/privacy/dp_audit.py, as ``synthugc audit-dp``) of every strategy with a privacy
    mechanism: stage ``audit-dp[<label>]``, nominal against audited epsilon in the report; off by default (it
    replays the strategy's generation on the audited documents, then scores each against its neighbours)."""

    enabled: bool = False
    neighbours: int = Field(3, ge=1, le=MAX_REPEATS, description="Neighbouring documents each output is compared "
                                                                 "with (DP-Prompt) or drawn from (DP-BART).")
    trials: int = Field(1000, ge=2, le=MAX_REPEATS, description="Releases per document in DP-BART's "
                                                                "distinguishing game.")
    max_docs: int = Field(50, gt=0, le=MAX_DOCS, description="Audit the first this many documents (by doc_id) "
                                                              "the strategy rewrote.")


class PrivacyConfig(Section):
    enabled: bool = True
    profiling: ProfilingConfig = Field(default_factory=ProfilingConfig)
    membership: MembershipConfig = Field(default_factory=MembershipConfig)
    reidentify: ReidentifyConfig = Field(default_factory=ReidentifyConfig)
    llm_profiling: LLMProfilingConfig = Field(default_factory=LLMProfilingConfig)
    audit_dp: AuditDPConfig = Field(default_factory=AuditDPConfig)


class UtilityConfig(Section):
    """Train on synthetic, test on real (seed 000 §5): substitution and augmentation against the baseline."""

    enabled: bool = True
    task: Literal["post", "dialogue", "timeline"] = "post"
    settings: list[Literal["substitution", "augmentation"]] = Field(
        default_factory=lambda: ["substitution", "augmentation"])
    fractions: list[float] = Field(default_factory=lambda: [0.1, 0.5, 1.0])
    seeds: list[Annotated[int, Field(ge=0, le=MAX_SEED)]] = Field(
        default_factory=lambda: [0, 1, 2, 3, 4], min_length=1, max_length=MAX_UTILITY_SEEDS,
        description="Repeats (5 in the article's configuration).")
    model: Literal["linear", "encoder"] = "linear"
    label: str = Field("label", description="Task label column (e.g. label, attr_party).")
    coverage: Literal["timeline", "pooled"] = Field(
        "timeline", description="Timeline coverage Cp/Cr: per timeline then averaged (the task's evaluation "
                                "script), or pooled over all timelines.")
    n_bootstrap: int = Field(N_RESAMPLES, ge=10, le=MAX_REPEATS,
                             description="Resamples of the 95% interval of each utility score (bootstrap over "
                                         "the real test documents).")

    @field_validator("fractions")
    @classmethod
    def _fractions(cls, value: list[float]) -> list[float]:
        if not value or any(not 0 < f <= 1 for f in value):
            raise ValueError("fractions must be in (0, 1]")
        return value


class ReportConfig(Section):
    """What the report shows besides the numbers: the goals to rank strategies for, and example outputs."""

    title: str | None = None
    goals: list[str] = Field(default_factory=lambda: ["augment", "share-model", "share-data"],
                             description="Goals to rank the strategies for (seed 000 §7): a preset (augment, "
                                         "augment-longitudinal, share-model, share-model-dp, share-data, share-data-dp) "
                                         "or use_case[,dp][,longitudinal].")
    examples: int = Field(0, ge=0, le=MAX_EXAMPLES, description="Example outputs per strategy (Appendix A.3); 0 = "
                                                                 "off, since they show real text.")
    require: str | None = Field(None, validation_alias="budget",
                                description="A budget (the key report.budget), e.g. reidentification<=0.10,"
                                            "utility>=0.90: the report lists the strategies that meet it under the "
                                            "worst-case attack. Kept as ``require`` in the recorded config (a run's "
                                            "manifest), where the report rebuild and release read it.")
    renamed_require: None = Field(None, validation_alias="require", exclude=True,
                                  description="The key's former name: refused, naming report.budget.")
    decide_on: Literal["bound", "point"] = Field(
        "bound", description="Decide the budget on the 95% interval's bound (a risk's upper bound, utility's and "
                             "meaning's lower bound; a straddled budget is 'undecided') or on the point estimate "
                             "alone.")
    adversaries: list[Literal["full", "disjoint"]] | None = Field(
        None, min_length=1,
        description="The threat model the budget is stated against: the adversary settings whose worst case its "
                    "re-identification figures take (default: every setting the run measured). For sharing data, "
                    "disjoint (the adversary holds the users' other posts); full assumes the originals leaked. The "
                    "report still shows every setting.")

    @field_validator("require")
    @classmethod
    def _budget(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_budget(value, where="")  # pydantic names the key: report.budget
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("renamed_require", mode="before")
    @classmethod
    def _renamed(cls, value: object) -> None:
        raise ValueError("renamed: write the budget as report.budget (the same syntax)")

    @field_validator("goals")
    @classmethod
    def _known_goals(cls, value: list[str]) -> list[str]:
        for text in value:
            parse_goal(text)  # raises ValueError naming the bad part
        return value


_PROTECT = ProtectSettings()  # the defaults of the protect: section (the CLI's help states the same)


class ProtectConfig(Section):
    """Protect (``synthugc protect``; tasks/protect/loop.py): rewrite the corpus until the judge attacks the loop
    never saw fail at the budget, keeping meaning, then certify the output with every registered attack on the full
    histories; the protected output joins the run as the strategy ``protect``. Defaults: tasks/protect/settings.py."""

    enabled: bool = False
    budget: str = Field(_PROTECT.budget, description=f"Bounds on {', '.join(PROTECT_FIGURES)} (reidentification: "
                        "the worst attack's accuracy@1; profiling: the worst attribute classifier's advantage over the "
                        "majority class, per attr_ column, the histories need the columns; verbatim: the share of "
                        "documents holding a run of their source), joined by commas, e.g. "
                        "reidentification<=0.10,pii_leakage<=0,verbatim<=0,profiling<=0.05. Decided by the "
                        "certificate: every registered attack on the full histories.")
    start: str = Field(_PROTECT.start, description="Round 0's move on every document: pseudonymize or a strategy.")
    ladder: list[str | dict[str, Any]] | None = Field(
        None, description="Moves tried in order on documents still caught: pseudonymize, mask-evidence or a strategy "
                          "(name, or {name, params}), or llm-anonymize. Default: "
                          f"{', '.join(m.label for m in _PROTECT.ladder)}; with an LLM endpoint set (SYNTHUGC_LLM_ENDPOINT_LLM), "
                          f"then {', '.join(m.label for m in LLM_RUNGS)}.")
    max_rounds: int = Field(_PROTECT.max_rounds, ge=0, le=100, description="Rounds after round 0.")
    meaning_floor: float | list[float] = Field(
        _PROTECT.meaning_floor, description="A move is kept only if BERTScore F1 against the source stays at or above "
        "this; a list of floors (e.g. [0.9, 0.8, 0.7]) makes a frontier, one certified point per floor, and the "
        "output is the highest floor that meets the budget.")
    fluency_floor: float | None = Field(_PROTECT.fluency_floor, ge=-20.0, le=0.0, description="A move is kept only "
                                        "if its fluency against the source (SLOR difference, nats per word) stays at "
                                        "or above this; null: no fluency floor.")
    prefer: Literal["balanced", "meaning", "rows"] = Field(
        _PROTECT.prefer, description="Among the frontier's points that meet the budget, the one that hands out the "
        "most meaning in all (balanced: rows released times their mean meaning), keeps the most meaning per row (the "
        "highest floor) or releases the most rows.")
    unit: Literal["timeline", "post"] = Field(_PROTECT.unit, description="What the output exposes and what the loop "
                                              "and the certificate attack: an author's documents together "
                                              "(timeline), or each post alone (post: a release drops author and "
                                              "group and shuffles the rows).")
    on_fail: Literal["drop", "keep", "error"] = Field(_PROTECT.on_fail, description="Documents that cannot meet budget "
                                                      "and floor: left out (drop), kept with a flag (keep), or stop "
                                                      "(error).")
    decide_on: Literal["bound", "point"] = Field(_PROTECT.decide_on, description="Budget decided on the 95% upper "
                                                 "bound or the value.")
    feedback: list[str] = Field(default_factory=lambda: [n for n, _ in _PROTECT.feedback], min_length=1,
                                description="Attacks that catch the documents to move and whose evidence steers the "
                                            "rewriting (profiles: one half of each author's history). The default "
                                            "runs each where it can on the histories here.")
    judge: list[str] | None = Field(None, min_length=1,
                                    description="Attacks that decide when the loop stops and never give feedback (the "
                                                "other half). Default: every registered attack that can run on the "
                                                "histories here, the feedback attacks among them.")
    adversaries: list[Literal["full", "disjoint"]] = Field(
        default_factory=lambda: list(_PROTECT.adversaries), min_length=1,
        description="Adversary settings of every attack (disjoint: the users' other posts only; full: the histories "
                    "hold the originals too).")
    timeline_posts: int | None = Field(None, gt=0, description="Default: privacy.reidentify.timeline_posts.")
    docs_per_round: int | None = Field(_PROTECT.docs_per_round, gt=0, description="Per timeline still caught, the "
                                       "documents carrying the most feedback evidence that a round moves (documents "
                                       "carrying none are not moved): faster rounds, more of them, more documents "
                                       "left caught when they run out. Default (null): every document of the "
                                       "timeline.")
    verbatim_chars: int = Field(_PROTECT.verbatim_chars, ge=1, le=10_000, description="A document holding a run of "
                                "this many characters of its source is verbatim.")
    split: Literal["train", "val", "test"] | None = Field(
        None, description="Protect (and so share) only this split's documents; the disjoint adversary then holds "
                          "the users' other documents of the corpus. Default: every document.")

    @field_validator("budget")
    @classmethod
    def _protect_budget(cls, value: str) -> str:
        try:
            parse_budget(value, where="", protect=True)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("ladder")
    @classmethod
    def _moves(cls, value: list[Any] | None) -> list[Any] | None:
        if value is not None:
            try:
                parse_ladder(value, "")
            except ConfigError as exc:
                raise ValueError(str(exc).removeprefix(": ")) from None
        return value


class ExperimentConfig(Section):
    """The whole experiment: what data, how to split, which strategies, which metrics."""

    experiment: str = Field(description="Run name: artifacts go to <root>/<experiment> (see tasks/paths.py).")
    seed: int = Field(13, ge=0, le=MAX_SEED)
    storage_root: str | None = Field(None, description="Path or fsspec URL; default SYNTHUGC_STORAGE_ROOT or ./runs.")
    data: DataConfig
    split: SplitConfig = Field(default_factory=SplitConfig)
    models: dict[str, str] = Field(default_factory=dict, description="role -> short name, local folder or hub id.")
    generate: GenerateConfig
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    utility: UtilityConfig = Field(default_factory=UtilityConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    protect: ProtectConfig = Field(default_factory=ProtectConfig)

    @field_validator("experiment")
    @classmethod
    def _path_safe(cls, value: str) -> str:
        return _path_segment(value)

    @field_validator("models")
    @classmethod
    def _known_roles(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown model role {shown(unknown[0])}; roles: {', '.join(ROLES)}")
        return value
