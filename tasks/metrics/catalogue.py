"""The metric catalogue: every measure a run reports, registered once (like the strategy registry).

A :class:`Metric` says what a measure is (name, level, aspect), which way is better (direction, target),
how the report names it (label), which suite options it reads, and the function that computes it (which
also builds the number's signature: the signature names what the computation used, nothing else lists
it). The suite's dispatch, ``flows/config_sections.py``'s name check, the report's columns, marks and notes and
the recommendations' aspects all read this module; nothing else lists metric names or directions.
``synthugc metrics`` prints it.

Adding a metric = one module of this package holding its function and one :func:`register` call: the
catalogue imports every module of the package once its own registrations (the built-ins, in the article's
order) are in, so nothing else is edited. At every level, metrics that share a
compute function are computed by one call (BERTScore's P/R/F1, the two self-BLEU numbers, the bag
metrics, whose corpus-level IDF needs one call, the two PII numbers), which returns every one of them;
``options`` is the suite's :class:`~tasks.metrics.base.MetricOptions` and ``cache`` the shared
:class:`~tasks.models.embeddings.EmbeddingCache`. Compute conventions per level:

- ``sample``: ``compute(sources, outputs, options, cache) -> MetricResult``, a column per metric of the
  function, one row per (source, output) pair, and ``<metric>_reason`` or ``<function>_reason`` for NaNs;
- ``variant``: ``compute(outputs_by_input, options, cache) -> MetricResult``, one row per input (diversity
  among the variants of one input), reasons as for ``sample``;
- ``distribution``: ``compute(real, synthetic, options, cache) -> DistributionScore`` (one metric a call);
- ``bag``: ``compute(reference, generated, names, options, cache) -> frame`` of the two frames' bags (groups
  of ``options.bag_group``): one row per (group, metric) with ``metric, value, signature, reason``, the
  group column first;
- ``pair``: ``compute(pairs, names, options, cache) -> (per-pair frame, long rows)`` over a strategy's aligned
  (source, output) pairs as a whole; its long rows may break the number down by a structure column (PII:
  ``entity``) and land in the privacy table (PII, ``verbatim``);
- ``utility`` and ``privacy``: measures the utility and privacy stages write (no compute here); they are
  registered for their direction, label and aspect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tasks.errors import ConfigError, shown
from tasks.metrics import bags as bag_metrics
from tasks.metrics.base import OPTION_NAMES, reason_column
from tasks.metrics.divergence import bleu_divergence, char_jsd, self_bleu
from tasks.metrics.fluency import fluency
from tasks.metrics.frechet import fbd, fbd_sbert, fcsd
from tasks.metrics.meaning import bertscore
from tasks.metrics.pii import ALL_ENTITIES, distribution_rows, pii_counts, sample_scores
from tasks.metrics.style import pos_jaccard, pos_jsd, style_cosine, style_frechet
from tasks.metrics.transfer import HFSequenceClassifier, SubjectivityClassifier, VaderClassifier, cps, sti
from tasks.metrics.verbatim import verbatim_scores
from tasks.models.pii import PiiDetector
from tasks.models.registry import resolve_model
from tasks.models.style_encoders import load_style_encoder
from tasks.registry import import_package_modules

if TYPE_CHECKING:
    import pandas as pd

    from tasks.metrics.base import DistributionScore, MetricOptions, MetricResult
    from tasks.models.embeddings import EmbeddingCache

Level = Literal["sample", "variant", "distribution", "bag", "pair", "utility", "privacy"]
LEVELS: tuple[str, ...] = ("sample", "variant", "distribution", "bag", "pair", "utility", "privacy")
#: The levels the metric suite computes (each metric of them registers its compute function).
COMPUTED_LEVELS: tuple[str, ...] = ("sample", "variant", "distribution", "bag", "pair")
#: The summary level a catalogue level's numbers carry in the long score table.
SUMMARY_LEVEL: dict[str, str] = {"sample": "sample-mean", "variant": "sample-mean", "distribution": "distribution",
                                 "bag": "bag-mean", "pair": "privacy", "utility": "utility", "privacy": "privacy"}
ASPECTS: tuple[str, ...] = ("meaning", "fluency", "style", "divergence", "diversity", "similarity", "utility",
                            "privacy")


@dataclass(frozen=True)
class Metric:
    """One registered measure. ``direction`` +1: higher is better, -1: lower is better; ``target``: best
    at this value (membership AUC: 0.5), ranked by distance to it. ``options``: the suite options
    (:data:`~tasks.metrics.base.OPTION_NAMES`) its compute function reads, so the suite loads their models
    before a fan-out. ``closer_is_higher`` (distribution and bag metrics): does a higher value mean the
    synthetic set is closer to the real one (the meta-evaluation's sense, which differs from ``direction``
    for divergence)? ``scans_pii``: its compute reads the PII detector's spans (the suite loads the detector
    once per worker and scans the texts before the metrics run). ``in_tables``: shown as a column of the
    report's article tables."""

    name: str
    level: Level
    aspect: str
    direction: int
    label: str
    description: str
    options: tuple[str, ...] = ()
    compute: Callable[..., Any] | None = None
    closer_is_higher: bool | None = None
    target: float | None = None
    scans_pii: bool = False
    in_tables: bool = True
    suffix: bool = False  # a family of task metrics named ``<class><name>`` (timeline coverage: IE_Cr)
    headline: bool = False  # stands for its aspect in the recommendations (seed 000 §7: BSc, Idio, POS, Div)
    #: computed when a run lists no metrics; fluency is not (a causal LM's pass over every text and source costs
    #: minutes on CPU), so a run asks for it by name, and protect computes it where it decides something
    by_default: bool = True

    @property
    def better(self) -> str:
        """``higher is better``, ``lower is better`` or ``closest to X is better``."""
        if self.target is not None:
            return f"closest to {self.target:g} is better"
        return "higher is better" if self.direction > 0 else "lower is better"

    @property
    def arrow(self) -> str:
        """The header arrow of the report's tables: ↑, ↓ or →target."""
        if self.target is not None:
            return f"→{self.target:g}"
        return "↑" if self.direction > 0 else "↓"

    def rank(self, value: float) -> float:
        """How good ``value`` is, higher = better: minus its distance to ``target``, else ``direction * value``."""
        return -abs(value - self.target) if self.target is not None else self.direction * value

    @property
    def note(self) -> str:
        """A header tip: what it measures and its arrow."""
        return f"{self.description} {self.arrow}"

    def matches(self, name: str) -> bool:
        """Whether a written measure name is this metric (for a suffix family: ends with it, after a class)."""
        return name.endswith(self.name) and name != self.name if self.suffix else name == self.name


CATALOGUE: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add ``metric`` to the catalogue: its name must be new, its level and aspect known, its direction +1 or
    -1, its options suite options (ConfigError naming the metric and the option), and a computed level's
    metric needs its compute function."""
    if metric.name in CATALOGUE:
        raise ValueError(f"metric {metric.name!r} is already registered")
    if metric.level not in LEVELS:
        raise ValueError(f"metric {metric.name!r}: level must be one of {', '.join(LEVELS)}, got {metric.level!r}")
    if metric.aspect not in ASPECTS:
        raise ValueError(f"metric {metric.name!r}: aspect must be one of {', '.join(ASPECTS)}, got {metric.aspect!r}")
    if metric.direction not in (-1, 1):
        raise ValueError(f"metric {metric.name!r}: direction must be +1 or -1, got {metric.direction!r}")
    unknown = [o for o in metric.options if o not in OPTION_NAMES]
    if unknown:
        raise ConfigError(f"metric {metric.name!r}: unknown option {unknown[0]!r}; the suite's options: "
                          f"{', '.join(OPTION_NAMES)}")
    if metric.level in COMPUTED_LEVELS and not callable(metric.compute):
        raise ValueError(f"metric {metric.name!r}: a {metric.level}-level metric needs its compute function")
    CATALOGUE[metric.name] = metric
    return metric


def unregister(name: str) -> None:
    """Remove a registration (tests that register a toy metric clean up with this)."""
    CATALOGUE.pop(name, None)


def metrics(*levels: str, aspect: str | None = None) -> list[Metric]:
    """Registered metrics of these levels (all when none given), in registration order."""
    return [m for m in CATALOGUE.values() if (not levels or m.level in levels) and (aspect is None or m.aspect == aspect)]


def names(*levels: str) -> tuple[str, ...]:
    """Names of the registered metrics of these levels (the suite computes the four intrinsic levels)."""
    return tuple(m.name for m in metrics(*levels))


def headline_metrics(aspect: str, *levels: str) -> list[Metric]:
    """The metrics that stand for ``aspect`` (meaning, style, divergence) in the recommendations (of ``levels``
    only, when given), in registration order."""
    return [m for m in CATALOGUE.values() if m.headline and m.aspect == aspect and (not levels or m.level in levels)]


def lookup(name: str) -> Metric | None:
    """The registration of a measure by its name (a timeline coverage column by its suffix), or None."""
    if name in CATALOGUE:
        return CATALOGUE[name]
    return next((m for m in CATALOGUE.values() if m.suffix and m.matches(name)), None)


def direction(name: str) -> int:
    """+1 higher is better, -1 lower is better (an unregistered name: +1, the report's default)."""
    metric = lookup(name)
    return metric.direction if metric is not None else 1


def rank(name: str, value: float) -> float:
    """How good a value of measure ``name`` is, higher = better (:meth:`Metric.rank`; unregistered: the value)."""
    metric = lookup(name)
    return metric.rank(value) if metric is not None else value


def label(name: str) -> str:
    """The name a table shows for a measure; a suffix family keeps its class (``IS coverage recall``)."""
    metric = lookup(name)
    if metric is None:
        return name
    if metric.suffix:
        return f"{name.removesuffix(metric.name)} {metric.label}"
    return metric.label


def check_names(requested: Sequence[str], levels: Iterable[str] = COMPUTED_LEVELS) -> list[str]:
    """The requested names, deduplicated, each a registered metric of ``levels`` (ValueError naming the
    first unknown one and the known ones)."""
    known = names(*levels)
    unknown = [n for n in requested if n not in known]
    if unknown:
        raise ValueError(f"unknown metric {shown(unknown[0])}; known: {', '.join(known)}")
    return list(dict.fromkeys(requested))


# ---------------------------------------------------------------------------------- compute functions
#: STI's target style per offline classifier: the neutral end (privacy-oriented rewriting removes style).
DEFAULT_TRANSFER_TARGETS: dict[str, str] = {"subjectivity": "objective", "vader": "neutral"}


def transfer_classifier(name: str) -> Any:
    """The style classifier STI and CPS masking use: offline lexicon models or a sequence classifier."""
    if name == "subjectivity":
        return SubjectivityClassifier()
    if name == "vader":
        return VaderClassifier()
    return HFSequenceClassifier(name)


def style_encoder(options: Any) -> Any:
    """The style encoder of ``options.style_encoder`` (tagger from ``options.pos_tagger``)."""
    return load_style_encoder(options.style_encoder, tagger=options.pos_tagger)


def _bertscore(sources: list[str], outputs: list[str], options: Any, cache: EmbeddingCache) -> MetricResult:
    return bertscore(outputs, sources, spec=options.token_encoder, layer=options.bertscore_layer,
                     idf=options.bertscore_idf, baseline_path=options.bertscore_baseline, cache=cache)


def _fluency(sources: list[str], outputs: list[str], options: Any, cache: EmbeddingCache) -> MetricResult:
    return fluency(sources, outputs, spec=fluency_model(options), cache=cache)


def fluency_model(options: Any) -> Any:
    """The fluency LM the options name (config ``models.fluency_lm``), else the role's offline default."""
    return resolve_model("fluency_lm", options.fluency_lm)


def _bleu_divergence(sources: list[str], outputs: list[str], options: Any, cache: EmbeddingCache) -> MetricResult:
    return bleu_divergence(sources, outputs)


def _style_cosine(sources: list[str], outputs: list[str], options: Any, cache: EmbeddingCache) -> MetricResult:
    return style_cosine(sources, outputs, encoder=style_encoder(options), cache=cache)


def _pos_jaccard(sources: list[str], outputs: list[str], options: Any, cache: EmbeddingCache) -> MetricResult:
    return pos_jaccard(sources, outputs, tagger=options.pos_tagger, cache=cache)


def _sti(sources: list[str], outputs: list[str], options: Any, cache: EmbeddingCache) -> MetricResult:
    target = options.transfer_target or DEFAULT_TRANSFER_TARGETS.get(options.transfer_classifier, 0)
    return sti(sources, outputs, classifier=transfer_classifier(options.transfer_classifier), target_class=target)


def _cps(sources: list[str], outputs: list[str], options: Any, cache: EmbeddingCache) -> MetricResult:
    classifier = transfer_classifier(options.transfer_classifier) if options.cps_mask else None
    return cps(sources, outputs, spec=options.sentence_encoder, cache=cache, mask=options.cps_mask,
               threshold=options.cps_threshold, classifier=classifier)


def _self_bleu(outputs_by_input: list[list[str]], options: MetricOptions, cache: EmbeddingCache) -> MetricResult:
    return self_bleu(outputs_by_input)


def _fbd(real: list[str], synthetic: list[str], options: Any, cache: EmbeddingCache) -> DistributionScore:
    return fbd(real, synthetic, spec=options.token_encoder, layer=options.fbd_layer, pooling=options.fbd_pooling,
               cache=cache)


def _fbd_sbert(real: list[str], synthetic: list[str], options: Any, cache: EmbeddingCache) -> DistributionScore:
    return fbd_sbert(real, synthetic, spec=options.sentence_encoder, cache=cache)


def _fcsd(real: list[str], synthetic: list[str], options: Any, cache: EmbeddingCache) -> DistributionScore:
    return fcsd(real, synthetic, spec=options.sentence_encoder, cache=cache)


def _style_frechet(real: list[str], synthetic: list[str], options: Any, cache: EmbeddingCache) -> DistributionScore:
    return style_frechet(real, synthetic, encoder=style_encoder(options), cache=cache)


def _pos_jsd(real: list[str], synthetic: list[str], options: Any, cache: EmbeddingCache) -> DistributionScore:
    return pos_jsd(real, synthetic, tagger=options.pos_tagger, cache=cache)


def _char_jsd(real: list[str], synthetic: list[str], options: Any, cache: EmbeddingCache) -> DistributionScore:
    return char_jsd(real, synthetic)


def _bag_scores(reference: pd.DataFrame, generated: pd.DataFrame, names: Sequence[str], options: MetricOptions,
                cache: EmbeddingCache) -> pd.DataFrame:
    return bag_metrics.bag_scores(reference, generated, group_col=options.bag_group, metrics=list(names),
                                  sentence_spec=options.sentence_encoder, cache=cache, seed=options.seed)


def _pii(pairs: pd.DataFrame, names: Sequence[str], options: MetricOptions,
         cache: EmbeddingCache) -> tuple[pd.DataFrame, pd.DataFrame]:
    """pii_leakage / pii_invented per pair (entity ``all``) and per strategy, overall and per entity type."""
    detector = PiiDetector()
    counts = pii_counts(pairs, detector, cache)
    per_pair = sample_scores(counts)
    per_pair = per_pair[per_pair["entity"] == ALL_ENTITIES]
    rows = distribution_rows(counts, detector)
    return (per_pair[["doc_id", "variant", *names, *(reason_column(m) for m in names)]],
            rows[rows["metric"].isin(names)])


def _verbatim(pairs: pd.DataFrame, names: Sequence[str], options: MetricOptions,
              cache: EmbeddingCache) -> tuple[pd.DataFrame, pd.DataFrame]:
    """verbatim per pair (1/0) and per strategy variant (the share, Wilson interval) (tasks/metrics/verbatim.py)."""
    return verbatim_scores(pairs, options.verbatim_min_chars)


def reads_pii(names: Iterable[str]) -> bool:
    """Whether any of the named metrics scans texts for PII (declared ``scans_pii``)."""
    return any((metric := lookup(n)) is not None and metric.scans_pii for n in names)


# ------------------------------------------------------------------------------------- registrations
_BSC = ("token_encoder", "bertscore_layer", "bertscore_idf", "bertscore_baseline")
_STI = ("transfer_classifier", "transfer_target")

# Sample level, in the order of the article's Table 4 (BSc, Idio, POS, Div), then the rest.
register(Metric("bertscore_f1", "sample", "meaning", 1, "BSc", "BERTScore F1", _BSC, _bertscore, headline=True))
register(Metric("bertscore_p", "sample", "meaning", 1, "BSc-P", "BERTScore precision", _BSC, _bertscore))
register(Metric("bertscore_r", "sample", "meaning", 1, "BSc-R", "BERTScore recall", _BSC, _bertscore))
register(Metric("fluency", "sample", "fluency", 1, "Flu", "fluency against the source (SLOR difference, nats/word)",
                ("fluency_lm",), _fluency, by_default=False))
register(Metric("style_cosine", "sample", "style", 1, "Style", "style-embedding cosine",
                ("style_encoder", "pos_tagger"), _style_cosine, headline=True))
register(Metric("pos_jaccard", "sample", "style", 1, "POS", "POS Jaccard", ("pos_tagger",), _pos_jaccard,
                headline=True))
register(Metric("bleu_divergence", "sample", "divergence", 1, "Div", "1 − BLEU against the source", (),
                _bleu_divergence, headline=True))
register(Metric("cps", "sample", "meaning", 1, "CPS", "content preserved",
                ("sentence_encoder", "cps_mask", "cps_threshold", "transfer_classifier"), _cps))
register(Metric("sti", "sample", "style", 1, "STI", "style transfer intensity toward target", _STI, _sti))
register(Metric("sti_pct", "sample", "style", 1, "STI %", "% of possible style gain", _STI, _sti))
# Variant level: diversity among the variants of one input.
register(Metric("self_bleu_diversity", "variant", "diversity", 1, "Self-Div", "diversity among variants", (),
                _self_bleu))
register(Metric("self_bleu", "variant", "diversity", -1, "Self-BLEU", "self-BLEU among variants", (), _self_bleu))
# Distribution level, in the order of the article's Table 13 (BFD, IFD, POS, Div), then the rest.
register(Metric("fbd", "distribution", "meaning", -1, "BFD", "meaning distance",
                ("token_encoder", "fbd_layer", "fbd_pooling"), _fbd, closer_is_higher=False))
register(Metric("style_frechet", "distribution", "style", -1, "IFD", "style distance",
                ("style_encoder", "pos_tagger"), _style_frechet, closer_is_higher=False))
register(Metric("pos_jsd", "distribution", "style", -1, "POS", "syntax divergence", ("pos_tagger",), _pos_jsd,
                closer_is_higher=False))
register(Metric("char_jsd", "distribution", "divergence", 1, "Div", "character-trigram divergence", (), _char_jsd,
                closer_is_higher=False))
register(Metric("fbd_sbert", "distribution", "meaning", -1, "BFD-SBERT", "meaning distance (SBERT)",
                ("sentence_encoder",), _fbd_sbert, closer_is_higher=False))
register(Metric("fcsd", "distribution", "meaning", -1, "FCSD", "cosine-to-real-mean distance", ("sentence_encoder",),
                _fcsd, closer_is_higher=False))
# Bag level (seed 003): similarities between the real and the synthetic bag of each group.
for _name in bag_metrics.ALL_METRICS:
    register(Metric(_name, "bag", "meaning" if _name.endswith("sbert") else "similarity", 1, _name,
                    "bag similarity to the real bag",
                    ("bag_group", "seed", *(("sentence_encoder",) if _name.endswith("sbert") else ())),
                    _bag_scores, closer_is_higher=True))
# Utility: the downstream task metrics (seed 000 §5) the utility runs record, one column each.
register(Metric("macro_f1", "utility", "utility", 1, "macro_f1", "macro-F1 of post classification"))
for _name, _what in (("DSER", "dialogue segment error rate"), ("SegWER", "segment word error rate"),
                     ("DER", "dialogue-act error rate"), ("JointWER", "joint segment+label word error rate")):
    register(Metric(_name, "utility", "utility", -1, _name, _what))
register(Metric("_Cp", "utility", "utility", 1, "coverage precision", "moments-of-change coverage precision",
                suffix=True))
register(Metric("_Cr", "utility", "utility", 1, "coverage recall", "moments-of-change coverage recall", suffix=True))
# Privacy: attack success (lower = more private), in the order of the article's Table 6.
register(Metric("profiling_accuracy", "privacy", "privacy", -1, "Profiling",
                "attribute profiling accuracy of a classifier trained on real text"))
register(Metric("llm_profiling_accuracy", "privacy", "privacy", -1, "LLM profiling",
                "zero-shot LLM attribute profiling accuracy"))
register(Metric("reid_accuracy", "privacy", "privacy", -1, "Re-identified users", "share of users re-identified"))
register(Metric("membership_auc", "privacy", "privacy", -1, "Membership AUC",
                "membership inference AUC (0.5 = blind)", target=0.5))
register(Metric("profiling_reduction", "privacy", "privacy", 1, "Profiling reduction",
                "profiling accuracy lost on synthetic text", in_tables=False))
register(Metric("llm_profiling_success", "privacy", "privacy", -1, "LLM profiling success",
                "share of dialogues with every attribute profiled right", in_tables=False))
register(Metric("reid_accuracy_at_10", "privacy", "privacy", -1, "Re-identified in top 10",
                "share of timelines whose author is among the attack's 10 best guesses", in_tables=False))
register(Metric("reid_mrr", "privacy", "privacy", -1, "Re-identification MRR",
                "mean reciprocal rank of the true author", in_tables=False))
register(Metric("reid_residual_risk", "privacy", "privacy", -1, "Re-identification residual risk",
                "(attack - control) / (1 - control), Anonymeter's residual risk over chance", in_tables=False))
register(Metric("profiling_advantage", "privacy", "privacy", -1, "Profiling advantage",
                "(accuracy - majority class) / (1 - majority class): the residual risk over a constant guess",
                in_tables=False))
register(Metric("profiling_macro_f1", "privacy", "privacy", -1, "Profiling macro-F1",
                "attribute profiling macro-F1", in_tables=False))
register(Metric("reid_candidate_recall", "privacy", "privacy", -1, "Re-identification candidate recall",
                "share of synthetic posts whose author is among the LSH candidates", in_tables=False))
# Pair level: direct identifiers (seed 000 §3.4) that survive each strategy (tasks/metrics/pii.py).
register(Metric("pii_leakage", "pair", "privacy", -1, "PII leaked", "share of the source's PII spans copied verbatim",
                (), _pii, scans_pii=True))
register(Metric("pii_invented", "pair", "privacy", -1, "PII new", "PII-like spans in outputs not in their source",
                (), _pii, scans_pii=True))
# Pair level: outputs that still hold a long run of their own source (found by pasting it into a search engine).
register(Metric("verbatim", "pair", "privacy", -1, "Verbatim",
                "share of outputs holding a run of 30+ characters (metrics.verbatim.min_chars) of their source",
                ("verbatim_min_chars",), _verbatim))

# Metrics registered by the other modules of this package (each module's register call runs on its import).
import_package_modules(__package__)
