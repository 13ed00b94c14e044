"""Task metrics of the utility experiments (seed 000 §5): macro F1 (posts), SegWER/JointWER (dialogue acts)
and coverage precision/recall (moments of change in timelines).

**Macro F1** equals ``sklearn.metrics.f1_score(average='macro', zero_division=0)``: the unweighted mean
over the labels present in the truth or the predictions of each label's F1 = 2TP / (2TP + FP + FN).

**Dialogue acts** (Zhao & Kawahara 2018; 2019, Computer Speech & Language 57). A conversation is a
sequence of words; a *segment* is a run of consecutive words ``[start, end)`` with a dialogue-act label.
Segmentations are given as one tag per word: ``I`` inside a segment, and on the *last* word of each
segment its label (``E`` when the labels do not matter); a conversation that ends on ``I`` has its last
segment closed at the end with no label. With R the reference segments of all conversations and N the
number of words:

- ``DSER`` = #{r in R : no hypothesis segment has r's exact (start, end)} / |R|
- ``SegWER`` = sum of |r| over those r / N -- the segment error rate weighted by word count: the share of
  words whose reference segment is not predicted with both boundaries exactly right.
- ``DER`` = #{r in R : no hypothesis segment has r's exact (start, end, label)} / |R|
- ``JointWER`` = sum of |r| over those r / N -- both boundaries and the label must be right.

This is the definition in the daseg implementation used by Zelasko et al. (2021), whose setup the
article follows (an aligned span counts as correct only if identical; inserted hypothesis spans have no
reference words and add nothing; substituted and deleted reference spans add their word count). It is
*not* the per-word tag mismatch rate: one wrong boundary inside a 10-word segment costs 10 words, and a
spurious boundary splitting a reference segment costs the whole segment. Boundaries only count within
a conversation; every conversation's first segment starts at its first word.

**Coverage** (Tsakalidis et al. 2022, adapted from Arbelaez et al. 2011). For a class c (IS or IE) the
*regions* of a timeline are its maximal runs of consecutive posts labelled c. The coverage of a set of
regions S by a set T is ``C(S -> T) = sum_{s in S} |s| * max_{t in T} O(s, t) / sum_{s in S} |s|`` with
the overlap ``O(s, t) = |s & t| / |s | t|`` (Jaccard over post positions; 0 when T is empty). Regions
only meet regions of the same timeline. Coverage recall = C(gold -> predicted), coverage precision =
C(predicted -> gold). Two ways to combine timelines (``average``):

- ``timeline`` (default): as the task's public evaluation script (CLPsych 2022 / Tsakalidis et al. 2022,
  "run on each timeline independently"): C per timeline, then the mean over the timelines where it is
  defined. A timeline without gold regions of c has no recall (NaN, skipped), one without predicted
  regions no precision; a timeline with gold but no predicted regions has recall 0.
- ``pooled``: the sums run over all timelines at once, so a long region weighs more than a short one
  in another timeline (a different number; its signature says ``pooled``).

With no gold (predicted) regions of c anywhere, recall (precision) is NaN -- undefined rather than a
flattering 0 or 1.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from tasks.corpus.tags import INSIDE
from tasks.errors import InputError

END = "E"  #: tag of a segment end when labels do not matter


# ---------------------------------------------------------------------------------------------- macro F1


def macro_f1(y_true: Sequence[Hashable], y_pred: Sequence[Hashable],
             labels: Sequence[Hashable] | None = None) -> float:
    """Unweighted mean of per-label F1 over ``labels`` (default: every label in truth or predictions);
    a label never predicted nor present scores 0 (sklearn's ``zero_division=0``)."""
    y_true, y_pred = list(y_true), list(y_pred)
    if len(y_true) != len(y_pred):
        raise InputError(f"y_true and y_pred differ in length: {len(y_true)} vs {len(y_pred)}")
    if not y_true:
        raise InputError("macro F1 of an empty set is undefined")
    if labels is None:
        labels = sorted(set(y_true) | set(y_pred), key=lambda v: (str(type(v)), v))
    scores = []
    for lab in labels:
        tp = sum(t == lab and p == lab for t, p in zip(y_true, y_pred, strict=True))
        fp = sum(t != lab and p == lab for t, p in zip(y_true, y_pred, strict=True))
        fn = sum(t == lab and p != lab for t, p in zip(y_true, y_pred, strict=True))
        denom = 2 * tp + fp + fn
        scores.append(2 * tp / denom if denom else 0.0)
    return float(np.mean(scores))


def macro_f1_codes(rows: np.ndarray) -> float:
    """Macro-F1 of integer-coded (truth, prediction) rows over the labels present in either, as :func:`macro_f1`
    and sklearn (``zero_division=0``) compute it; fast enough to bootstrap."""
    y, p = rows[:, 0], rows[:, 1]
    size = int(rows.max()) + 1
    tp = np.bincount(y[y == p], minlength=size)
    support = np.bincount(y, minlength=size) + np.bincount(p, minlength=size)
    present = support > 0
    return float(np.mean(2 * tp[present] / support[present]))


# ---------------------------------------------------------------------------------------------- SegWER


@dataclass(frozen=True)
class Segment:
    """Words ``[start, end)`` of one conversation, with the label on its last word (None if unlabelled)."""

    start: int
    end: int
    label: str | None

    def __len__(self) -> int:
        return self.end - self.start


def tags_to_segments(tags: Sequence[str]) -> list[Segment]:
    """Segments of one conversation from its per-word tags (``I`` inside, label or ``E`` at the end)."""
    out: list[Segment] = []
    start = 0
    for i, tag in enumerate(tags):
        if tag != INSIDE:
            out.append(Segment(start, i + 1, str(tag)))
            start = i + 1
    if start < len(tags):  # trailing words without an end tag: closed by the end of the conversation
        out.append(Segment(start, len(tags), None))
    return out


@dataclass(frozen=True)
class DialogueActErrors:
    """Zhao & Kawahara error rates (lower is better) and the counts behind them."""

    dser: float
    seg_wer: float
    der: float
    joint_wer: float
    n_words: int
    n_segments: int

    def as_dict(self) -> dict[str, float]:
        return {"DSER": self.dser, "SegWER": self.seg_wer, "DER": self.der, "JointWER": self.joint_wer}


def dialogue_act_errors(reference: Sequence[Sequence[str]], hypothesis: Sequence[Sequence[str]]) -> DialogueActErrors:
    """DSER, SegWER, DER and JointWER over conversations (see the module docstring).

    ``reference`` and ``hypothesis`` hold one per-word tag sequence per conversation, in the same order
    and with the same number of words each (the words are the reference transcript's)."""
    if len(reference) != len(hypothesis):
        raise InputError(f"reference has {len(reference)} conversations, hypothesis {len(hypothesis)}")
    n_words = n_segs = seg_miss = seg_miss_w = joint_miss = joint_miss_w = 0
    for k, (ref, hyp) in enumerate(zip(reference, hypothesis, strict=True)):
        if len(ref) != len(hyp):
            raise InputError(f"conversation {k}: reference has {len(ref)} word tags, hypothesis {len(hyp)}")
        hyp_segs = tags_to_segments(hyp)
        spans = {(s.start, s.end) for s in hyp_segs}
        labelled = {(s.start, s.end, s.label) for s in hyp_segs}
        for seg in tags_to_segments(ref):
            n_segs += 1
            if (seg.start, seg.end) not in spans:
                seg_miss += 1
                seg_miss_w += len(seg)
            if (seg.start, seg.end, seg.label) not in labelled:
                joint_miss += 1
                joint_miss_w += len(seg)
        n_words += len(ref)
    if n_words == 0:
        raise InputError("no reference words: error rates are undefined")
    return DialogueActErrors(dser=seg_miss / n_segs, seg_wer=seg_miss_w / n_words, der=joint_miss / n_segs,
                             joint_wer=joint_miss_w / n_words, n_words=n_words, n_segments=n_segs)


def seg_wer(reference: Sequence[Sequence[str]], hypothesis: Sequence[Sequence[str]]) -> float:
    """Segmentation WER (labels ignored); see :func:`dialogue_act_errors`."""
    return dialogue_act_errors(reference, hypothesis).seg_wer


def joint_wer(reference: Sequence[Sequence[str]], hypothesis: Sequence[Sequence[str]]) -> float:
    """Joint (segmentation + act) WER; see :func:`dialogue_act_errors`."""
    return dialogue_act_errors(reference, hypothesis).joint_wer


# ---------------------------------------------------------------------------------------------- coverage


def regions(labels: Sequence[Hashable], cls: Hashable) -> list[tuple[int, int]]:
    """Maximal runs ``[start, end)`` of consecutive positions labelled ``cls``."""
    out: list[tuple[int, int]] = []
    start = None
    for i, lab in enumerate(labels):
        if lab == cls and start is None:
            start = i
        elif lab != cls and start is not None:
            out.append((start, i))
            start = None
    if start is not None:
        out.append((start, len(labels)))
    return out


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> float:
    inter = max(0, min(a[1], b[1]) - max(a[0], b[0]))
    union = (a[1] - a[0]) + (b[1] - b[0]) - inter
    return inter / union if union else 0.0


def _coverage_sums(source: list[tuple[int, int]], target: list[tuple[int, int]]) -> tuple[float, int]:
    """(sum |s| * max_t O(s, t), sum |s|) over the regions s of source."""
    covered = sum((s[1] - s[0]) * max((_overlap(s, t) for t in target), default=0.0) for s in source)
    return covered, sum(s[1] - s[0] for s in source)


#: How :func:`coverage` combines timelines: per timeline then averaged (the task's script), or pooled.
COVERAGE_AVERAGES: tuple[str, ...] = ("timeline", "pooled")


def coverage(gold: Sequence[Sequence[Hashable]], pred: Sequence[Sequence[Hashable]],
             classes: Sequence[Hashable] = ("IS", "IE"), *, average: str = "timeline") -> dict[str, dict[str, float]]:
    """Coverage precision and recall per class over timelines: ``{cls: {"precision", "recall"}}``.

    ``gold`` and ``pred`` hold one label sequence per timeline (posts in order), aligned post by post;
    ``average`` is ``timeline`` (mean of per-timeline coverage) or ``pooled`` (see the module docstring)."""
    if average not in COVERAGE_AVERAGES:
        raise InputError(f"coverage average must be one of {', '.join(COVERAGE_AVERAGES)}, got {average!r}")
    if len(gold) != len(pred):
        raise InputError(f"gold has {len(gold)} timelines, predictions {len(pred)}")
    out: dict[str, dict[str, float]] = {}
    for cls in classes:
        sums = {"recall": [0.0, 0.0], "precision": [0.0, 0.0]}  # pooled numerator, denominator
        per_timeline: dict[str, list[float]] = {"recall": [], "precision": []}
        for k, (g, p) in enumerate(zip(gold, pred, strict=True)):
            if len(g) != len(p):
                raise InputError(f"timeline {k}: {len(g)} gold labels, {len(p)} predictions")
            g_regions, p_regions = regions(g, cls), regions(p, cls)
            for name, (num, den) in (("recall", _coverage_sums(g_regions, p_regions)),
                                     ("precision", _coverage_sums(p_regions, g_regions))):
                sums[name][0] += num
                sums[name][1] += den
                if den:
                    per_timeline[name].append(num / den)

        if average == "pooled":
            combined = {name: num / den if den else float("nan") for name, (num, den) in sums.items()}
        else:
            combined = {name: float(np.mean(v)) if v else float("nan") for name, v in per_timeline.items()}
        out[str(cls)] = {"precision": combined["precision"], "recall": combined["recall"]}
    return out
