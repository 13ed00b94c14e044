"""Moments of change in timelines (seed 000 §5.3.1): post-level model with focal loss, then a BiLSTM over
the timeline, scored with coverage precision/recall per class (:func:`tasks.training.task_metrics.coverage`,
per timeline then averaged by default, as the task's evaluation script; ``pooled`` on request).

Following the best system of Tsakalidis et al. (2022) on CPU budgets:

1. Post level: frozen sentence embeddings of each post (the shared :func:`~tasks.training.dialogue.sentence_embedder`;
   the article fine-tunes BERT) -> a one-hidden-layer MLP trained on the post labels with focal loss
   (gamma 2: ``-(1 - p_t)^gamma log p_t``, which down-weights easy, mostly ``O`` posts). Adam, lr 1e-3 (a
   head on frozen features; the article's 2e-5 is for fine-tuning BERT), dropout .25, batch 8.
2. Timeline level: each post's hidden activation from step 1 (its "embedding from the post-level model")
   -> a 2-layer BiLSTM with a dense softmax layer over the posts of a timeline, cross-entropy, Adam lr
   1e-3, dropout .25, batch 16 timelines, up to 100 epochs with early stopping on the validation loss
   (patience 5) when a validation set is given (Table 14).

Timelines are rows grouped by ``group_id`` ordered by ``position`` (a row without a group is a timeline
of one post). The article reports 5-fold cross-validation; here train/val/test come from the corpus
split (the flow can run folds as splits). Labels are O/IE/IS by default; any label set works.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tasks.models.loaders import TORCH_RNG_LOCK
from tasks.training.dialogue import (
    Embedder,
    sentence_embedder,
    sequence_step,
    split_rows,
    state_snapshot,
    torch_threads,
)
from tasks.training.task_metrics import COVERAGE_AVERAGES, coverage

CLASSES: tuple[str, ...] = ("O", "IE", "IS")
IGNORE = -100


def focal_loss(logits: Any, target: Any, gamma: float = 2.0, ignore_index: int = IGNORE) -> Any:
    """Mean focal loss ``-(1 - p_t)^gamma * log p_t`` over targets != ``ignore_index`` (Lin et al. 2017;
    gamma 0 is cross-entropy)."""
    import torch

    keep = target != ignore_index
    if not bool(keep.any()):
        return logits.sum() * 0.0
    logp = torch.log_softmax(logits[keep], dim=-1).gather(1, target[keep].unsqueeze(1)).squeeze(1)
    return (-((1 - logp.exp()) ** gamma) * logp).mean()


@dataclass
class Timeline:
    """One timeline: its doc ids and texts in order, and gold labels (None where unknown)."""

    group: str
    doc_ids: list[str]
    texts: list[str]
    labels: list[str | None]


def timelines(df: pd.DataFrame) -> list[Timeline]:
    """Rows grouped by ``group_id`` (a row without one is its own timeline), ordered by position, doc_id."""
    df = df.reset_index(drop=True)
    group = df["group_id"].astype("string") if "group_id" in df.columns else pd.Series(pd.NA, index=df.index)
    key = group.fillna("doc:" + df["doc_id"].astype(str))
    position = df["position"] if "position" in df.columns else pd.Series(0, index=df.index)
    frame = pd.DataFrame({"key": key, "pos": pd.to_numeric(position, errors="coerce").fillna(0),
                          "doc": df["doc_id"].astype(str), "i": range(len(df))})
    label = df["label"] if "label" in df.columns else pd.Series(None, index=df.index, dtype=object)
    out = []
    for name, part in frame.sort_values(["key", "pos", "doc"], kind="stable").groupby("key", sort=False):
        idx = part["i"].to_list()
        labs = [None if pd.isna(label.iloc[i]) else str(label.iloc[i]) for i in idx]
        out.append(Timeline(str(name), part["doc"].to_list(), [str(df["text"].iloc[i]) for i in idx], labs))
    return out


def build_networks(dim: int, n: int, *, post_hidden: int, lstm_hidden: int, lstm_layers: int,
                   dropout: float) -> tuple[Any, Any]:
    """(post model, timeline model), freshly initialised in that order: the post-level MLP (``dim`` ->
    ``post_hidden`` -> ReLU -> dropout -> ``n`` classes) and the BiLSTM over its hidden activations with a
    dense layer over the ``n`` classes (``forward(x, lengths)`` on padded timelines)."""
    from torch import nn

    post = nn.Sequential(nn.Linear(dim, post_hidden), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(post_hidden, n))

    class Seq(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(post_hidden, lstm_hidden, num_layers=lstm_layers,
                                batch_first=True, bidirectional=True,
                                dropout=dropout if lstm_layers > 1 else 0.0)
            self.drop = nn.Dropout(dropout)
            self.out = nn.Linear(2 * lstm_hidden, n)

        def forward(self, x: Any, lengths: Any) -> Any:
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            h, _ = self.lstm(packed)
            h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=x.shape[1])
            return self.out(self.drop(h))

    return post, Seq()


def pad_timelines(feats: list[Any], targets: list[np.ndarray] | None) -> tuple[Any, Any, Any]:
    """(x, lengths, y) of a batch of timelines: post features right-padded to the longest, their lengths, and
    the class targets padded with IGNORE (None without ``targets``)."""
    import torch

    lengths = torch.tensor([f.shape[0] for f in feats])
    x = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
    y = None
    if targets is not None:
        y = torch.full(x.shape[:2], IGNORE, dtype=torch.long)
        for b, t in enumerate(targets):
            y[b, :len(t)] = torch.from_numpy(t)
    return x, lengths, y


class MomentsOfChangeModel:
    """Post-level focal-loss MLP feeding a BiLSTM over timelines (see the module docstring)."""

    def __init__(self, *, embed: Embedder | None = None, classes: Sequence[str] = CLASSES,
                 post_hidden: int = 64, post_epochs: int = 10, post_lr: float = 1e-3, post_batch: int = 8,
                 gamma: float = 2.0, lstm_hidden: int = 64, lstm_layers: int = 2, dropout: float = 0.25,
                 lr: float = 1e-3, epochs: int = 100, batch_size: int = 16, patience: int = 5, seed: int = 0,
                 num_threads: int | None = 1) -> None:
        self.embed = embed
        self.classes = list(classes)
        self.post_hidden, self.post_epochs, self.post_lr, self.post_batch = post_hidden, post_epochs, post_lr, post_batch
        self.gamma, self.lstm_hidden, self.lstm_layers, self.dropout = gamma, lstm_hidden, lstm_layers, dropout
        self.lr, self.epochs, self.batch_size, self.patience = lr, epochs, batch_size, patience
        self.seed, self.num_threads = seed, num_threads
        self.post_model_: Any = None
        self.seq_model_: Any = None
        self.history_: list[dict[str, float]] = []

    def _embed(self, lines: list[Timeline]) -> list[np.ndarray]:
        embed = self.embed or sentence_embedder()
        texts = [t for tl in lines for t in tl.texts]
        vectors = np.asarray(embed(texts), dtype=np.float32)
        return split_rows(vectors, [len(tl.texts) for tl in lines])

    def _targets(self, tl: Timeline) -> np.ndarray:
        index = {c: i for i, c in enumerate(self.classes)}
        return np.asarray([index.get(lab, IGNORE) if lab is not None else IGNORE for lab in tl.labels], dtype=np.int64)

    def _build(self, dim: int) -> tuple[Any, Any]:
        return build_networks(dim, len(self.classes), post_hidden=self.post_hidden, lstm_hidden=self.lstm_hidden,
                              lstm_layers=self.lstm_layers, dropout=self.dropout)

    def _post_features(self, vectors: list[np.ndarray]) -> list[Any]:
        """Hidden activations of the post model (its first layer + ReLU) for each timeline's posts."""
        import torch

        self.post_model_.eval()
        with torch.no_grad():
            return [self.post_model_[1](self.post_model_[0](torch.from_numpy(v))) for v in vectors]

    def fit(self, train: pd.DataFrame, val: pd.DataFrame | None = None) -> MomentsOfChangeModel:
        """Train both stages on the timelines of ``train`` (early stopping on ``val`` when non-empty)."""
        import torch

        lines = timelines(train)
        targets = [self._targets(tl) for tl in lines]
        if len({int(v) for t in targets for v in t if v != IGNORE}) < 2:
            raise ValueError(f"need posts of at least two of {self.classes} to train the moments-of-change model")
        vectors = self._embed(lines)
        val_lines = timelines(val) if val is not None and len(val) else []
        with TORCH_RNG_LOCK, torch_threads(self.num_threads), torch.random.fork_rng():
            torch.manual_seed(self.seed)
            rng = np.random.default_rng(self.seed)
            self.post_model_, self.seq_model_ = self._build(int(vectors[0].shape[1]))
            # stage 1: post level, focal loss
            x = torch.from_numpy(np.concatenate(vectors))
            y = torch.from_numpy(np.concatenate(targets))
            opt = torch.optim.Adam(self.post_model_.parameters(), lr=self.post_lr)
            for _ in range(self.post_epochs):
                self.post_model_.train()
                order = torch.from_numpy(rng.permutation(len(y)))
                for s in range(0, len(order), self.post_batch):
                    idx = order[s:s + self.post_batch]
                    loss = focal_loss(self.post_model_(x[idx]), y[idx], self.gamma)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            # stage 2: timeline level, cross-entropy over post features
            feats = self._post_features(vectors)
            val_data = None
            if val_lines:
                val_feats = self._post_features(self._embed(val_lines))
                val_data = pad_timelines(val_feats, [self._targets(tl) for tl in val_lines])
            opt = torch.optim.Adam(self.seq_model_.parameters(), lr=self.lr)
            loss_fn = torch.nn.CrossEntropyLoss(ignore_index=IGNORE)
            best, best_state, waited = float("inf"), None, 0
            for epoch in range(self.epochs):
                self.seq_model_.train()
                order = rng.permutation(len(feats))
                total = 0.0
                for s in range(0, len(order), self.batch_size):
                    chunk = order[s:s + self.batch_size]
                    bx, bl, by = pad_timelines([feats[i] for i in chunk], [targets[i] for i in chunk])
                    total += sequence_step(opt, loss_fn, self.seq_model_(bx, bl), by) * len(chunk)
                record = {"epoch": epoch, "loss": total / len(feats)}
                if val_data is not None:
                    self.seq_model_.eval()
                    with torch.no_grad():
                        vx, vl, vy = val_data
                        logits = self.seq_model_(vx, vl)
                        record["val_loss"] = float(loss_fn(logits.reshape(-1, logits.shape[-1]), vy.reshape(-1)))
                    if record["val_loss"] < best - 1e-6:
                        best, waited = record["val_loss"], 0
                        best_state = state_snapshot(self.seq_model_)
                    else:
                        waited += 1
                self.history_.append(record)
                if val_data is not None and waited >= self.patience:
                    break
            if best_state is not None:
                self.seq_model_.load_state_dict(best_state)
        return self

    def predict_timelines(self, lines: list[Timeline]) -> list[list[str]]:
        """Predicted label sequence of each timeline."""
        import torch

        if self.seq_model_ is None:
            raise RuntimeError("MomentsOfChangeModel is not fitted; call fit(train) first")
        out: list[list[str]] = []
        with torch_threads(self.num_threads), torch.no_grad():
            feats = self._post_features(self._embed(lines))
            self.seq_model_.eval()
            for s in range(0, len(feats), self.batch_size):
                chunk = feats[s:s + self.batch_size]
                x, lengths, _ = pad_timelines(chunk, None)
                pred = self.seq_model_(x, lengths).argmax(-1).numpy()
                out.extend([self.classes[j] for j in pred[b, :len(f)]] for b, f in enumerate(chunk))
        return out

    def predict(self, df: pd.DataFrame) -> pd.Series:
        """Predicted label of every row of ``df``, indexed by doc_id."""
        lines = timelines(df)
        pairs = [(d, p) for tl, pred in zip(lines, self.predict_timelines(lines), strict=True)
                 for d, p in zip(tl.doc_ids, pred, strict=True)]
        return pd.Series(dict(pairs), name="prediction")

    def evaluate(self, df: pd.DataFrame, classes: Sequence[str] = ("IE", "IS"), *,
                 average: str = "timeline") -> dict[str, float]:
        """Coverage precision and recall per class on the timelines of ``df``: ``IE_Cp``, ``IE_Cr``, ...
        (``average``: per timeline then averaged, as the task's script, or ``pooled``)."""
        lines = timelines(df)
        gold = [[lab if lab is not None else "" for lab in tl.labels] for tl in lines]
        cov = coverage(gold, self.predict_timelines(lines), classes=classes, average=average)
        return {f"{c}_{k}": v for c, pr in cov.items() for k, v in (("Cp", pr["precision"]), ("Cr", pr["recall"]))}


def timeline_evaluator(*, average: str = "timeline",
                       **model_kwargs: Any) -> Callable[[pd.DataFrame, pd.DataFrame, pd.DataFrame, int], dict[str, float]]:
    """A :func:`tasks.training.utility.run_utility` evaluator: coverage precision/recall of IE and IS
    (``average``: ``timeline`` as the task's script, or ``pooled``; see :func:`~tasks.training.task_metrics.coverage`)."""
    if average not in COVERAGE_AVERAGES:
        raise ValueError(f"coverage average must be one of {', '.join(COVERAGE_AVERAGES)}, got {average!r}")

    def evaluate(train: pd.DataFrame, val: pd.DataFrame, test: pd.DataFrame, seed: int) -> dict[str, float]:
        return MomentsOfChangeModel(seed=seed, **model_kwargs).fit(train, val).evaluate(test, average=average)
    return evaluate
