"""Surface divergence: how far a synthetic text moved from its source in n-grams.

``bleu_divergence = 1 - BLEU(hypothesis=synthetic, references=[source]) / 100`` with sacrebleu's
``sentence_bleu`` defaults (13a tokeniser, exp smoothing, effective order, mixed case): 0 for a copy,
1 for no shared n-gram.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pandas as pd

from tasks.metrics.base import MetricResult, make_signature


@lru_cache(maxsize=1)
def _bleu() -> object:
    """One sacrebleu BLEU object, set up as ``sacrebleu.sentence_bleu`` sets up its own."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(effective_order=True)
    bleu.sentence_score("a", ["a"])  # fixes nrefs=1 so the signature is available before any real score
    return bleu


def bleu_signature() -> str:
    """Our prefix plus every field of sacrebleu's own BLEU signature (its version as ``sacrebleu``)."""
    info = dict(_bleu().get_signature().info)
    sacrebleu_version = info.pop("version", None)
    fields = {k: v for k, v in info.items() if v is not None}
    return make_signature("bleu_divergence", **fields, sacrebleu=sacrebleu_version)


def bleu_divergence(sources: Sequence[str], synthetic: Sequence[str]) -> MetricResult:
    """Per pair ``1 - sentence BLEU(synthetic, [source]) / 100`` (column ``bleu_divergence``)."""
    sources, synthetic = list(sources), list(synthetic)
    if len(sources) != len(synthetic):
        raise ValueError(f"bleu_divergence: {len(sources)} sources but {len(synthetic)} synthetic texts")
    bleu = _bleu()
    values = np.array([1.0 - bleu.sentence_score(hyp, [src]).score / 100.0
                       for src, hyp in zip(sources, synthetic, strict=True)], dtype=np.float64)
    return MetricResult(scores=pd.DataFrame({"bleu_divergence": values}),
                        signatures={"bleu_divergence": bleu_signature()})
