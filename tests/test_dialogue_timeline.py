"""Dialogue-act tagger (SegWER/JointWER) and moments-of-change model (coverage) on small synthetic fixtures
they can learn: act labels and segment ends marked by keywords; IS/IE regions marked by keywords."""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest

from tasks.training.dialogue import DialogueActTagger, conversations, dialogue_evaluator, hashing_embedder
from tasks.training.timeline import MomentsOfChangeModel, focal_loss, timelines
from tasks.training.utility import run_utility

ACTS = {"qy": ["do you like {}", "is it {}", "are you into {}"],
        "sd": ["i think {} is fine", "we have {} at home", "my sister likes {}"],
        "b": ["uh-huh", "yeah", "right"]}
TOPICS = ["cats", "rain", "football", "music", "cooking", "trains"]


def dialogues(n_conv: int, seed: int, rows: int = 6) -> pd.DataFrame:
    """Turns of one or two segments; seg_tags hold the gold word tags (I inside, act on a segment end)."""
    rng = random.Random(seed)
    out = []
    for c in range(n_conv):
        for p in range(rows):
            segs = []
            for _ in range(rng.choice([1, 1, 2])):
                act = rng.choice(sorted(ACTS))
                segs.append((act, rng.choice(ACTS[act]).format(rng.choice(TOPICS))))
            tags = []
            for act, text in segs:
                tags += ["I"] * (len(text.split()) - 1) + [act]
            out.append({"doc_id": f"c{seed}-{c}-{p}", "text": " ".join(t for _, t in segs),
                        "author_id": f"{c}:{'AB'[p % 2]}", "group_id": f"c{seed}-{c}", "position": p,
                        "label": segs[-1][0], "seg_tags": " ".join(tags), "split": "train"})
    return pd.DataFrame(out)


def test_conversations_order_and_gold_tags():
    df = pd.DataFrame({"doc_id": ["b", "a", "z"], "text": ["yeah right", "is it rain", "solo"],
                       "author_id": ["x", "y", "q"], "group_id": ["g", "g", None], "position": [1, 0, 0],
                       "label": ["b", "qy", None], "seg_tags": ["b b", None, None]})
    convs = {c.group: c for c in conversations(df)}
    g = convs["g"]
    assert g.words == ["is", "it", "rain", "yeah", "right"]  # position order
    assert g.tags == ["I", "I", "qy", "b", "b"]  # label -> one segment; seg_tags used when lengths match
    assert g.features[:, 2].tolist() == [0, 0, 0, 1, 0]  # the second row starts a new speaker
    assert convs["doc:z"].tags == [None]  # no label: context only


@pytest.mark.slow  # ~2 s of training, plus ~4 s for torch's first optimizer import on a loaded machine
def test_dialogue_tagger_learns_segments_and_acts():
    train, val, test = dialogues(20, 0), dialogues(4, 1), dialogues(6, 2)
    tagger = DialogueActTagger(embed=hashing_embedder(16), word_dim=16, sent_dim=8, hidden=16, epochs=12,
                               lr=1e-2, batch_size=4, seed=0).fit(train, val)
    errors = tagger.evaluate(test)
    # one segment per turn with its last act is what a turn-level classifier can do at best:
    # every two-segment turn loses both its segments
    convs = conversations(test)
    turn_level = {c.group: [t for row in _row_tags(c) for t in row] for c in convs}
    from tasks.training.task_metrics import dialogue_act_errors

    ceiling = dialogue_act_errors([[t or "I" for t in c.tags] for c in convs], [turn_level[c.group] for c in convs])
    assert ceiling.seg_wer > 0.3
    # measured SegWER = JointWER = .03 (seed 0; .10 and .15 with seeds 1 and 2)
    assert errors["SegWER"] < min(0.2, ceiling.seg_wer / 2) and errors["JointWER"] < 0.25
    assert tagger.best_epoch_ is not None and len(tagger.history_) == 12
    preds = tagger.predict_tags(test)
    assert set(preds) == {c.group for c in convs} and all(len(preds[c.group]) == len(c.words) for c in convs)


def _row_tags(conv) -> list[list[str]]:
    rows: dict[int, list[str]] = {}
    for r, tag in zip(conv.row_of_word, conv.tags, strict=True):
        rows.setdefault(r, []).append(tag)
    return [["I"] * (len(t) - 1) + [t[-1]] for _, t in sorted(rows.items())]


def test_dialogue_evaluator_in_the_utility_runner():
    corpus = pd.concat([dialogues(6, 0).assign(split="train"), dialogues(2, 1).assign(split="val"),
                        dialogues(3, 2).assign(split="test")], ignore_index=True)
    syn = pd.DataFrame({"doc_id": corpus["doc_id"], "strategy": "copy", "variant": "first",
                        "text": corpus["text"], "status": "ok"})
    results = run_utility(corpus, {"copy": syn}, dialogue_evaluator(epochs=2, hidden=8, word_dim=8),
                          settings=("substitution",), fractions=(1.0,), seeds=(0,))
    assert (results["status"] == "ok").all(), results["reason"].tolist()
    assert {"SegWER", "JointWER", "DSER", "DER"} <= set(results.columns)
    assert results[["SegWER", "JointWER"]].stack().between(0, 1).all()


def test_focal_loss_hand_worked():
    import torch

    # two classes, equal logits: p_t = .5 -> -(1 - .5)^2 * log .5 = .25 * .693147 = .173287
    logits = torch.zeros((1, 2))
    assert float(focal_loss(logits, torch.tensor([0]))) == pytest.approx(0.25 * math.log(2))
    # gamma 0 is cross-entropy; ignored targets are left out of the mean
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.1, 0.2, 0.3], [1.0, 1.0, 1.0]])
    target = torch.tensor([0, 2, -100])
    ce = torch.nn.functional.cross_entropy(logits[:2], target[:2])
    assert float(focal_loss(logits, target, gamma=0.0)) == pytest.approx(float(ce))
    assert float(focal_loss(logits, target)) < float(ce)  # down-weighted


NEUTRAL = ["went to work today", "had lunch with a friend", "watching a film tonight", "the weather is mild"]
SWITCH = ["suddenly everything collapsed devastated", "out of nowhere i feel devastated"]
ESCALATION = ["things keep getting worse", "getting worse every day now"]


def moc(n: int, seed: int, length: int = 10) -> pd.DataFrame:
    """Timelines with one IS post early and a 3-post IE run later, marked by their words."""
    rng = random.Random(seed)
    rows = []
    for t in range(n):
        labels = ["O"] * length
        s = rng.randrange(0, 4)
        labels[s] = "IS"
        e = rng.randrange(s + 2, length - 2)
        labels[e:e + 3] = ["IE"] * 3
        for p, lab in enumerate(labels):
            text = rng.choice({"O": NEUTRAL, "IS": SWITCH, "IE": ESCALATION}[lab])
            rows.append({"doc_id": f"t{seed}-{t}-{p}", "text": text, "group_id": f"t{seed}-{t}",
                         "author_id": f"u{seed}-{t}", "position": p, "label": lab})
    return pd.DataFrame(rows)


def test_timelines_grouping():
    df = pd.DataFrame({"doc_id": ["x2", "x1", "y"], "text": ["b", "a", "c"], "group_id": ["x", "x", None],
                       "position": [2, 1, 0], "label": ["IS", "O", None]})
    lines = {tl.group: tl for tl in timelines(df)}
    assert lines["x"].texts == ["a", "b"] and lines["x"].labels == ["O", "IS"]
    assert lines["doc:y"].labels == [None]


def test_moments_of_change_model_learns_regions():
    train, val, test = moc(16, 0), moc(4, 1), moc(6, 2)
    model = MomentsOfChangeModel(embed=hashing_embedder(32), post_hidden=16, post_epochs=5, lstm_hidden=16,
                                 lr=1e-2, post_lr=1e-2, batch_size=4, epochs=20, patience=5, seed=0)
    scores = model.fit(train, val).evaluate(test)
    assert set(scores) == {"IE_Cp", "IE_Cr", "IS_Cp", "IS_Cr"}
    assert all(v > 0.8 for v in scores.values()), scores
    pred = model.predict(test)
    assert set(pred.index) == set(test["doc_id"]) and set(pred) <= {"O", "IE", "IS"}
    # an untrained sequence layer (0 epochs) predicts no useful regions
    blind = MomentsOfChangeModel(embed=hashing_embedder(32), post_hidden=16, post_epochs=0, lstm_hidden=16,
                                 epochs=0, seed=0).fit(train)
    assert np.nansum(list(blind.evaluate(test).values())) < sum(scores.values()) / 2


def test_moments_of_change_needs_two_classes():
    df = moc(2, 0).assign(label="O")
    with pytest.raises(ValueError, match="at least two"):
        MomentsOfChangeModel(embed=hashing_embedder(8)).fit(df)


@pytest.mark.slow
def test_moments_of_change_with_the_shared_sentence_encoder(tmp_path):
    from tasks.models.embeddings import EmbeddingCache
    from tasks.training.dialogue import sentence_embedder

    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    train, val, test = moc(16, 0), moc(4, 1), moc(6, 2)
    model = MomentsOfChangeModel(embed=sentence_embedder(cache=cache), post_hidden=16, post_epochs=5,
                                 lstm_hidden=16, lr=1e-2, post_lr=1e-2, batch_size=4, epochs=20, seed=0)
    scores = model.fit(train, val).evaluate(test)
    assert all(v > 0.8 for v in scores.values()), scores
    assert len(cache) == len(set(pd.concat([train, val, test])["text"]))  # each distinct post encoded once


def test_timeline_evaluator_in_the_utility_runner():
    from tasks.training.timeline import timeline_evaluator

    corpus = pd.concat([moc(8, 0).assign(split="train"), moc(2, 1).assign(split="val"),
                        moc(3, 2).assign(split="test")], ignore_index=True)
    syn = pd.DataFrame({"doc_id": corpus["doc_id"], "strategy": "copy", "variant": "first",
                        "text": corpus["text"], "status": "ok"})
    evaluator = timeline_evaluator(embed=hashing_embedder(16), post_hidden=8, post_epochs=1, lstm_hidden=8,
                                   lstm_layers=1, epochs=2)
    results = run_utility(corpus, {"copy": syn}, evaluator, settings=("augmentation",), fractions=(0.5, 1.0),
                          seeds=(0,))
    assert (results["status"] == "ok").all(), results["reason"].tolist()
    assert {"IE_Cp", "IE_Cr", "IS_Cp", "IS_Cr"} <= set(results.columns)
    aug = results[results["setting"] == "augmentation"].set_index("fraction")["n_train"]
    base = results[results["setting"] == "baseline"].set_index("fraction")["n_train"]
    assert (aug == 2 * base).all()  # one synthetic post per real one; whole timelines kept by undersampling


def test_seg_tags_survive_corpus_validation():
    from tasks.corpus.schema import validate_corpus

    raw = dialogues(2, 0).head(4)
    raw.loc[raw.index[1], "seg_tags"] = "  "  # a blank cell is a null, as in every optional column
    valid = validate_corpus(raw, "d.csv").corpus
    assert valid["seg_tags"].tolist()[0] == raw["seg_tags"].iloc[0] and pd.isna(valid["seg_tags"].iloc[1])
    assert "seg_tags" not in validate_corpus(raw.drop(columns=["seg_tags"]), "d.csv").corpus.columns


@pytest.mark.slow  # the flow (temporary Prefect server, stymask, MiniLM embeddings): ~1 min on a loaded machine
def test_flow_and_cli_give_the_same_dialogue_act_numbers(tmp_path, monkeypatch):
    """The flow's utility stage and ``synthugc utility`` score SegWER/JointWER against the same word-level
    gold: ``seg_tags`` is kept through ingest, so both see the two-segment turns (before, the flow dropped
    the column and scored against one segment per turn)."""
    import subprocess
    import sys
    from pathlib import Path

    from flows.experiment import experiment_from_mapping

    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    corpus = pd.concat([dialogues(5, 0).assign(split="train"), dialogues(2, 1).assign(split="val"),
                        dialogues(3, 2).assign(split="test")], ignore_index=True)
    path = tmp_path / "dialogues.parquet"
    corpus.to_parquet(path)
    root = tmp_path / "runs"
    experiment_from_mapping({
        "experiment": "d", "seed": 1, "storage_root": str(root), "data": {"path": str(path)},
        "generate": {"shard_size": 100, "strategies": [{"name": "stymask"}]},
        "metrics": {"names": ["bleu_divergence"]}, "privacy": {"enabled": False},
        "utility": {"task": "dialogue", "settings": ["substitution"], "fractions": [1.0], "seeds": [0]}})
    split = pd.read_parquet(root / "d" / "split" / "corpus.parquet")
    assert split.set_index("doc_id")["seg_tags"].to_dict() == corpus.set_index("doc_id")["seg_tags"].to_dict()
    flow_runs = pd.concat([pd.read_parquet(p) for p in sorted((root / "d" / "utility").glob("*/*.parquet"))],
                          ignore_index=True)
    synthetic = pd.concat([pd.read_parquet(p) for p in sorted((root / "d" / "generate").rglob("*.parquet"))
                           if "failures" not in p.name], ignore_index=True)
    synthetic.to_parquet(tmp_path / "synthetic.parquet")
    out = tmp_path / "cli"
    cli = Path(sys.executable).parent / "synthugc"
    proc = subprocess.run([str(cli), "utility", "--corpus", str(root / "d" / "split" / "corpus.parquet"),
                           "--synthetic", str(tmp_path / "synthetic.parquet"), "--out", str(out), "--task", "dialogue",
                           "--scheme", "substitution", "--fractions", "1.0", "--seeds", "0"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cli_runs = pd.read_parquet(out / "utility_runs.parquet")
    keys = ["setting", "strategy", "variant", "fraction", "seed"]
    metrics = ["SegWER", "JointWER", "DSER", "DER"]
    flow_part = flow_runs.sort_values(keys)[keys + metrics].reset_index(drop=True)
    cli_part = cli_runs.sort_values(keys)[keys + metrics].reset_index(drop=True)
    assert len(flow_part) == 2 and flow_part[metrics].notna().all().all()
    pd.testing.assert_frame_equal(flow_part, cli_part, check_dtype=False, atol=1e-9)
