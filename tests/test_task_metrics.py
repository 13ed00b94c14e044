"""Task metrics on hand-worked examples (the working is in the comments) and macro F1 against sklearn."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from sklearn.metrics import f1_score

from tasks.corpus.tags import segment_tags
from tasks.errors import InputError
from tasks.training.task_metrics import (
    Segment,
    coverage,
    dialogue_act_errors,
    joint_wer,
    macro_f1,
    regions,
    seg_wer,
    tags_to_segments,
)


def test_macro_f1_hand_worked():
    # a: TP 1 (pos 0), FP 1 (pos 4), FN 1 (pos 1) -> 2/(2+1+1) = .5
    # b: TP 2 (pos 2, 3), FP 1 (pos 1), FN 0     -> 4/(4+1)   = .8
    # c: TP 0, FP 0, FN 1 (pos 4)                -> 0
    # macro = (.5 + .8 + 0) / 3 = .4333...
    y_true = ["a", "a", "b", "b", "c"]
    y_pred = ["a", "b", "b", "b", "a"]
    assert macro_f1(y_true, y_pred) == pytest.approx(1.3 / 3)


@pytest.mark.parametrize("seed", range(5))
def test_macro_f1_equals_sklearn(seed):
    rng = random.Random(seed)
    labels = ["x", "y", "z", "w"][: rng.randint(2, 4)]
    y_true = [rng.choice(labels) for _ in range(40)]
    y_pred = [rng.choice(labels[:-1]) for _ in range(40)]  # one class never predicted: zero_division matters
    assert macro_f1(y_true, y_pred) == pytest.approx(f1_score(y_true, y_pred, average="macro", zero_division=0))


def test_macro_f1_rejects_bad_input():
    with pytest.raises(InputError, match="differ in length"):
        macro_f1(["a"], ["a", "b"])
    with pytest.raises(InputError, match="empty"):
        macro_f1([], [])


def test_tags_to_segments_and_back():
    tags = ["I", "I", "sd", "qy", "I"]
    assert tags_to_segments(tags) == [Segment(0, 3, "sd"), Segment(3, 4, "qy"), Segment(4, 5, None)]
    assert segment_tags([3, 1, 0, 2], ["sd", "qy", "x", "b"]) == ["I", "I", "sd", "qy", "I", "b"]


# Conversation 1 (10 words):
#   ref  I I sd I qy b I I I sv
#        segments [0,3) sd, [3,5) qy, [5,6) b, [6,10) sv          (4 segments)
#   hyp  I I sd qy I b I I I sd
#        segments [0,3) sd, [3,4) qy, [4,6) b, [6,10) sd
#   boundaries: [0,3) ok, [3,5) missed, [5,6) missed, [6,10) ok -> 2 segments, 2 + 1 = 3 words wrong
#   joint:      [0,3) ok, [3,5) x, [5,6) x, [6,10) label sv != sd -> 3 segments, 2 + 1 + 4 = 7 words wrong
# Conversation 2 (2 words): ref I b -> [0,2) b; hyp I I -> [0,2) unlabelled (closed by the end)
#   boundaries ok; joint wrong (label None != b) -> 1 segment, 2 words
# Pooled: N = 12 words, |R| = 5 segments
#   SegWER = 3/12 = .25, DSER = 2/5 = .4, JointWER = (7 + 2)/12 = .75, DER = (3 + 1)/5 = .8
# (A per-word tag mismatch rate would give E/I errors 2/12 and joint tag errors 4/12 instead.)
REF = [["I", "I", "sd", "I", "qy", "b", "I", "I", "I", "sv"], ["I", "b"]]
HYP = [["I", "I", "sd", "qy", "I", "b", "I", "I", "I", "sd"], ["I", "I"]]


def test_segwer_jointwer_hand_worked():
    errors = dialogue_act_errors(REF, HYP)
    assert errors.seg_wer == pytest.approx(0.25)
    assert errors.dser == pytest.approx(0.4)
    assert errors.joint_wer == pytest.approx(0.75)
    assert errors.der == pytest.approx(0.8)
    assert (errors.n_words, errors.n_segments) == (12, 5)
    assert seg_wer(REF[:1], HYP[:1]) == pytest.approx(0.3)
    assert joint_wer(REF[:1], HYP[:1]) == pytest.approx(0.7)
    assert dialogue_act_errors(REF, REF).as_dict() == {"DSER": 0.0, "SegWER": 0.0, "DER": 0.0, "JointWER": 0.0}


def test_spurious_boundary_costs_the_whole_segment():
    # ref one 5-word segment [0,5) qw; hyp splits it at word 2 -> the reference segment is lost: 5/5 words
    assert seg_wer([["I", "I", "I", "I", "qw"]], [["I", "qw", "I", "I", "qw"]]) == pytest.approx(1.0)


def test_segwer_rejects_misaligned():
    with pytest.raises(InputError, match="conversation 0"):
        seg_wer([["I", "sd"]], [["sd"]])
    with pytest.raises(InputError, match="conversations"):
        seg_wer([["sd"]], [])


def test_regions():
    assert regions(["O", "IS", "IS", "O", "IS"], "IS") == [(1, 3), (4, 5)]
    assert regions(["O", "O"], "IS") == []


def test_coverage_hand_worked():
    # Timeline A  gold O IS IS O IE IE IE O ; pred O IS O O O IE IE IE
    #   IS: gold [1,3), pred [1,2): O = 1/2. recall part 2 * .5 = 1 (of 2); precision part 1 * .5 = .5 (of 1)
    #   IE: gold [4,7), pred [5,8): |&| = 2, |u| = 4, O = .5. recall 3 * .5 = 1.5 (of 3); precision 1.5 (of 3)
    # Timeline B  gold O O IS O ; pred IS O O IE
    #   IS: gold [2,3), pred [0,1): O = 0. recall 0 (of 1); precision 0 (of 1)
    #   IE: no gold region; pred [3,4) covers nothing: precision 0 (of 1)
    # Per timeline, then averaged (the default, as the task's script):
    # IS: recall mean(1/2, 0/1) = .25, precision mean(.5/1, 0/1) = .25
    # IE: recall A only (B has no gold IE: undefined, skipped) = 1.5/3 = .5; precision mean(1.5/3, 0/1) = .25
    # Pooled (sums over both timelines):
    # IS: recall (1 + 0)/(2 + 1) = 1/3, precision (.5 + 0)/(1 + 1) = .25
    # IE: recall 1.5/3 = .5, precision (1.5 + 0)/(3 + 1) = .375
    gold = [["O", "IS", "IS", "O", "IE", "IE", "IE", "O"], ["O", "O", "IS", "O"]]
    pred = [["O", "IS", "O", "O", "O", "IE", "IE", "IE"], ["IS", "O", "O", "IE"]]
    cov = coverage(gold, pred)
    assert cov["IS"]["recall"] == pytest.approx(0.25)
    assert cov["IS"]["precision"] == pytest.approx(0.25)
    assert cov["IE"]["recall"] == pytest.approx(0.5)
    assert cov["IE"]["precision"] == pytest.approx(0.25)
    pooled = coverage(gold, pred, average="pooled")
    assert pooled["IS"]["recall"] == pytest.approx(1 / 3)
    assert pooled["IS"]["precision"] == pytest.approx(0.25)
    assert pooled["IE"]["recall"] == pytest.approx(0.5)
    assert pooled["IE"]["precision"] == pytest.approx(0.375)
    with pytest.raises(InputError, match="average"):
        coverage(gold, pred, average="micro")


# The CLPsych 2022 moments-of-change evaluation script (Tsakalidis et al. 2022) computes coverage "on each
# timeline independently": regions are runs of consecutive indices of the class (np.where, then split where
# the gap is not 1); each region's best intersection-over-union with the other side's regions, weighted by
# its length; NaN when the timeline has no region on the side being covered. Written here from that logic
# (index sets, not our interval arithmetic) as the reference; the per-timeline values are averaged over the
# timelines where they are defined (nan-mean).
def _script_regions(labels, cls):
    idx = [i for i, lab in enumerate(labels) if lab == cls]
    out, current = [], idx[:1]
    for prev, i in itertools.pairwise(idx):
        if i - prev == 1:
            current.append(i)
        else:
            out.append(current)
            current = [i]
    if current:
        out.append(current)
    return out


def _script_coverage(covered, by, cls):
    """get_coverage_recall(actual=covered, predicted=by) / get_coverage_precision with the roles swapped."""
    source, target = _script_regions(covered, cls), _script_regions(by, cls)
    if not source:
        return float("nan")
    total = denom = 0.0
    for region in source:
        a = set(region)
        best = max((len(a & set(t)) / len(a | set(t)) for t in target), default=0.0)
        total += len(a) * best
        denom += len(a)
    return total / denom


def test_coverage_matches_the_task_script_per_timeline():
    import numpy as np

    rng = random.Random(7)
    for _ in range(40):
        n_lines = rng.randint(1, 6)
        gold = [[rng.choice(["O", "O", "O", "IS", "IE"]) for _ in range(rng.randint(1, 30))] for _ in range(n_lines)]
        pred = [[lab if rng.random() < 0.6 else rng.choice(["O", "IS", "IE"]) for lab in g] for g in gold]
        cov = coverage(gold, pred, classes=("IS", "IE"))
        for cls in ("IS", "IE"):
            rec = [_script_coverage(g, p, cls) for g, p in zip(gold, pred, strict=True)]
            prec = [_script_coverage(p, g, cls) for g, p in zip(gold, pred, strict=True)]
            for ours, script in ((cov[cls]["recall"], rec), (cov[cls]["precision"], prec)):
                defined = [v for v in script if not math.isnan(v)]
                if defined:
                    assert ours == pytest.approx(float(np.mean(defined)), abs=1e-12)
                else:
                    assert math.isnan(ours)


def test_coverage_takes_best_overlapping_region():
    # gold [0,4); pred [0,1) and [2,4): overlaps 1/4 and 2/4 -> recall = 4 * .5 / 4 = .5
    # precision: [0,1) 1 * 1/4 + [2,4) 2 * 2/4 = 1.25 over 3 posts = .41666...
    cov = coverage([["IS"] * 4], [["IS", "O", "IS", "IS"]], classes=("IS",))
    assert cov["IS"]["recall"] == pytest.approx(0.5)
    assert cov["IS"]["precision"] == pytest.approx(1.25 / 3)


def test_coverage_undefined_without_regions():
    cov = coverage([["O", "O"]], [["O", "IE"]], classes=("IS", "IE"))
    assert math.isnan(cov["IS"]["recall"]) and math.isnan(cov["IS"]["precision"])
    assert math.isnan(cov["IE"]["recall"]) and cov["IE"]["precision"] == 0.0
    with pytest.raises(InputError, match="timeline 0"):
        coverage([["O"]], [["O", "O"]])
