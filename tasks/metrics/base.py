"""What every metric takes (the suite's options) and returns: scores, each with its signature
(:func:`tasks.signatures.make_signature`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import pandas as pd

from tasks.intervals import N_RESAMPLES
from tasks.models.registry import ModelSpec

#: The shortest run of its own source (characters) that makes an output verbatim (tasks/metrics/verbatim.py).
VERBATIM_MIN_CHARS = 30


@dataclass(frozen=True)
class MetricOptions:
    """Every choice the metrics take from the config (models, layers, classifiers, bags). A registered metric
    declares which of these it reads (:class:`tasks.metrics.catalogue.Metric` ``options``)."""

    token_encoder: ModelSpec | None = None
    sentence_encoder: ModelSpec | None = None
    style_encoder: str | None = None  # a value for tasks.models.style_encoders.load_style_encoder
    pos_tagger: ModelSpec | None = None
    bertscore_layer: int | None = None
    fbd_layer: int | None = None  # None: the token encoder's last layer (Xiang et al.)
    fbd_pooling: str = "cls"
    bertscore_idf: bool = False
    bertscore_baseline: str | None = None
    transfer_classifier: str = "subjectivity"  # subjectivity | vader | a sequence classifier folder or hub id
    transfer_target: str | None = None  # default: objective (subjectivity), neutral (vader), class 0 (others)
    cps_mask: str | None = None
    cps_threshold: float = 0.3
    bag_group: str = "group_id"
    seed: int = 0
    shard_size: int = 2000
    n_bootstrap: int = N_RESAMPLES  # resamples of the 95% interval of each sample mean (over documents)
    verbatim_min_chars: int = VERBATIM_MIN_CHARS  # the shortest run of its source that makes an output verbatim
    fluency_lm: str | None = None  # config models.fluency_lm (None: the role's offline default), resolved when used


#: The names a metric may declare as options it reads.
OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(MetricOptions))


@dataclass
class MetricResult:
    """Sample-level scores (one row per input pair, one column per metric output name) and the
    signature of each output column."""

    scores: pd.DataFrame
    signatures: dict[str, str] = field(default_factory=dict)


@dataclass
class DistributionScore:
    """One distribution-level (or bag-level) number with its signature.

    ``value`` is NaN when the inputs cannot define it (one-item bag, empty text set, ...), and
    ``reason`` then says why; ``distributions`` keeps arrays worth plotting (e.g. FCSD's cosine
    scores of the real and synthetic sets)."""

    metric: str
    value: float
    signature: str
    reason: str | None = None
    distributions: dict[str, list[float]] = field(default_factory=dict)


def reason_column(metric: str) -> str:
    """Name of the column that says why a sample-level score is NaN (null when the score is defined)."""
    return f"{metric}_reason"
