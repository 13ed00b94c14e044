"""Dialogue-act segmentation and recognition (seed 000 §5.2.1) with a small word-level tagger on CPU.

The article fine-tunes XLNet over windows of the conversation (Zelasko et al. 2021); here a light model with
the same output: every word of a conversation gets a joint tag -- ``I`` inside a segment or, on a
segment's last word, the segment's act -- so boundaries and acts are predicted together and scored with
SegWER/JointWER (:mod:`tasks.training.task_metrics`).

Model (:class:`DialogueActTagger`): per word, a trained word embedding (lowercased whitespace tokens,
vocabulary from the training data, unknown words share one id) + a projection of the frozen sentence
embedding of the word's row (utterance or turn; shared :func:`sentence_embedder`, optional) + three
binary features (first / last word of its row, the row starts a new speaker) -> a BiLSTM over a window of
the conversation -> a linear layer over the tags. Cross-entropy, Adam. Conversations longer than
``window`` words are cut into consecutive windows (no context crosses a cut). With a non-empty validation
set the epoch with the lowest validation JointWER is kept (early stopping by selection).

Gold tags of a row: its ``seg_tags`` column when present and as long as its words (turn-level rows with
several segments, from :func:`tasks.corpus.task_importers.import_utterance_table`), else one segment
per row ending with the row's ``label``. Synthetic rows have no ``seg_tags`` (their words changed), so in
the substitution and augmentation settings synthetic rows are one segment each: when the corpus rows are
utterances (one act each) this loses nothing; when they are multi-segment turns, synthetic rows teach
only their row-final act and boundary. Rows without a label and ``seg_tags`` are context only (no loss).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tasks.corpus.tags import INSIDE, segment_tags
from tasks.models.loaders import TORCH_RNG_LOCK
from tasks.models.registry import resolve_model
from tasks.training.task_metrics import dialogue_act_errors

Embedder = Callable[[list[str]], np.ndarray]
IGNORE = -100  #: tag index left out of the loss
PAD, UNK = 0, 1


def sentence_embedder(spec: Any = None, cache: Any = None) -> Embedder:
    """Texts -> frozen sentence vectors of the registry's ``sentence_encoder`` (shared embedding cache)."""
    # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
    from tasks.models.embeddings import sentence_embeddings

    resolved = spec or resolve_model("sentence_encoder")
    return lambda texts: sentence_embeddings(texts, resolved, cache=cache)


def hashing_embedder(dim: int = 64) -> Embedder:
    """Texts -> L2-normalised hashed bag of lowercased words (sha1 buckets, +-1 signs): a deterministic,
    model-free stand-in for sentence embeddings (tests, smoke runs)."""
    def embed(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in str(text).lower().split():
                digest = hashlib.sha1(word.encode("utf-8")).digest()
                out[i, int.from_bytes(digest[:4], "little") % dim] += 1.0 if digest[4] % 2 else -1.0
            norm = np.linalg.norm(out[i])
            if norm:
                out[i] /= norm
        return out
    return embed


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Cap torch's CPU threads inside the block (1 is fastest on a shared, oversubscribed machine)."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def sequence_step(opt: Any, loss_fn: Any, logits: Any, targets: Any) -> float:
    """One optimiser step on a per-position loss over (batch, length, classes) logits; returns the loss."""
    loss = loss_fn(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.item())


def state_snapshot(model: Any) -> dict[str, Any]:
    """A detached copy of the model's weights (the best epoch so far, restored after training)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@dataclass
class Conversation:
    """Words of one conversation in order, with their row index, row features and gold tags."""

    group: str
    words: list[str]
    row_of_word: list[int]  # index into the conversation's rows
    features: np.ndarray  # (n_words, 3): first word of row, last word of row, new speaker
    tags: list[str | None]  # None: not scored in training (row without a label)
    row_texts: list[str] = field(default_factory=list)


def row_tags(words: list[str], seg_tags: Any, label: Any) -> list[str | None]:
    """Gold tags of one row (see the module docstring)."""
    if isinstance(seg_tags, str) and len(seg_tags.split()) == len(words):
        return list(seg_tags.split())
    if label is None or (not isinstance(label, str) and pd.isna(label)):
        return [None] * len(words)
    return list(segment_tags([len(words)], [str(label)]))


def conversations(df: pd.DataFrame) -> list[Conversation]:
    """The conversations of a corpus table: rows grouped by ``group_id`` (a row without one is its own
    conversation) and ordered by ``position`` then ``doc_id``; rows with no words are skipped."""
    df = df.reset_index(drop=True)
    group = df["group_id"].astype("string") if "group_id" in df.columns else pd.Series(pd.NA, index=df.index)
    key = group.fillna("doc:" + df["doc_id"].astype(str))
    position = df["position"] if "position" in df.columns else pd.Series(0, index=df.index)
    frame = pd.DataFrame({"key": key, "pos": pd.to_numeric(position, errors="coerce").fillna(0),
                          "doc": df["doc_id"].astype(str), "i": range(len(df))})
    records = df.to_dict("records")
    out = []
    for name, part in frame.sort_values(["key", "pos", "doc"], kind="stable").groupby("key", sort=False):
        words: list[str] = []
        rows: list[int] = []
        feats: list[list[float]] = []
        tags: list[str | None] = []
        texts: list[str] = []
        last_author = None
        for i in part["i"]:
            rec = records[i]
            toks = str(rec["text"]).split()
            if not toks:
                continue
            author = rec.get("author_id")
            new_speaker = float(last_author is not None and author != last_author)
            last_author = author
            for j, tok in enumerate(toks):
                words.append(tok)
                rows.append(len(texts))
                feats.append([float(j == 0), float(j == len(toks) - 1), new_speaker if j == 0 else 0.0])
            tags.extend(row_tags(toks, rec.get("seg_tags"), rec.get("label")))
            texts.append(str(rec["text"]))
        if words:
            out.append(Conversation(str(name), words, rows, np.asarray(feats, dtype=np.float32), tags, texts))
    return out


def split_rows(vectors: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Consecutive slices of ``vectors`` of the given sizes: the texts of all conversations (timelines) are
    embedded in one call, then split back per conversation."""
    out, start = [], 0
    for n in sizes:
        out.append(vectors[start:start + n])
        start += n
    return out


def vocabulary(convs: list[Conversation], min_count: int) -> dict[str, int]:
    """Word ids of the tagger: the lowercased words seen at least ``min_count`` times, sorted, numbered from 2
    (0 pads, 1 is every unknown word)."""
    counts: dict[str, int] = {}
    for c in convs:
        for w in c.words:
            counts[w.lower()] = counts.get(w.lower(), 0) + 1
    return {w: i + 2 for i, w in enumerate(sorted(w for w, n in counts.items() if n >= min_count))}


def pad_windows(items: list[dict]) -> dict[str, Any]:
    """One tagger batch from windows (:meth:`DialogueActTagger._windows` items): word ids, row features,
    sentence vectors (None without an embedder) and tags (IGNORE where absent) right-padded to the longest
    window, and the window lengths."""
    import torch

    lengths = [len(it["ids"]) for it in items]
    width = max(lengths)
    ids = torch.zeros((len(items), width), dtype=torch.long)
    feats = torch.zeros((len(items), width, 3))
    tags = torch.full((len(items), width), IGNORE, dtype=torch.long)
    sent = None
    if items[0]["sent"] is not None:
        sent = torch.zeros((len(items), width, items[0]["sent"].shape[1]))
    for b, it in enumerate(items):
        n = lengths[b]
        ids[b, :n] = torch.tensor(it["ids"])
        feats[b, :n] = torch.from_numpy(it["feats"])
        if sent is not None:
            sent[b, :n] = torch.from_numpy(it["sent"])
        if "tags" in it:
            tags[b, :n] = torch.tensor(it["tags"])
    return {"ids": ids, "feats": feats, "sent": sent, "tags": tags, "lengths": torch.tensor(lengths)}


class DialogueActTagger:
    """Word-level joint segmentation + act tagger (see the module docstring). ``fit(train, val)`` on
    corpus tables; ``predict_tags(df)`` gives per-conversation tag lists; ``evaluate(df)`` the error rates."""

    def __init__(self, *, embed: Embedder | None = None, word_dim: int = 32, sent_dim: int = 32,
                 hidden: int = 32, layers: int = 1, dropout: float = 0.1, lr: float = 1e-3, epochs: int = 10,
                 batch_size: int = 8, window: int = 256, min_count: int = 1, seed: int = 0,
                 num_threads: int | None = 1) -> None:
        self.embed = embed
        self.word_dim, self.sent_dim, self.hidden, self.layers = word_dim, sent_dim, hidden, layers
        self.dropout, self.lr, self.epochs, self.batch_size = dropout, lr, epochs, batch_size
        self.window, self.min_count, self.seed, self.num_threads = window, min_count, seed, num_threads
        self.vocab_: dict[str, int] = {}
        self.tags_: list[str] = []
        self.model_: Any = None
        self.history_: list[dict[str, float]] = []
        self.best_epoch_: int | None = None

    # --- data ---------------------------------------------------------------------------------------
    def _sentence_vectors(self, convs: list[Conversation]) -> list[np.ndarray | None]:
        if self.embed is None:
            return [None] * len(convs)
        texts = [t for c in convs for t in c.row_texts]
        vectors = np.asarray(self.embed(texts), dtype=np.float32) if texts else np.zeros((0, 0), np.float32)
        return split_rows(vectors, [len(c.row_texts) for c in convs])

    def _windows(self, convs: list[Conversation], sents: list[np.ndarray | None], with_tags: bool) -> list[dict]:
        index = {t: i for i, t in enumerate(self.tags_)}
        items = []
        for k, (conv, sent) in enumerate(zip(convs, sents, strict=True)):
            ids = [self.vocab_.get(w.lower(), UNK) for w in conv.words]
            for start in range(0, len(ids), self.window):
                end = min(start + self.window, len(ids))
                item = {"conv": k, "start": start, "ids": ids[start:end], "feats": conv.features[start:end],
                        "sent": None if sent is None else sent[conv.row_of_word[start:end]]}
                if with_tags:
                    item["tags"] = [index.get(t, IGNORE) if t is not None else IGNORE for t in conv.tags[start:end]]
                items.append(item)
        return items

    # --- model --------------------------------------------------------------------------------------
    def _build(self, sent_in: int | None) -> Any:
        import torch
        from torch import nn

        tagger = self

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.words = nn.Embedding(len(tagger.vocab_) + 2, tagger.word_dim, padding_idx=PAD)
                self.sent = nn.Linear(sent_in, tagger.sent_dim) if sent_in else None
                width = tagger.word_dim + 3 + (tagger.sent_dim if sent_in else 0)
                self.drop = nn.Dropout(tagger.dropout)
                self.lstm = nn.LSTM(width, tagger.hidden, num_layers=tagger.layers, batch_first=True,
                                    bidirectional=True, dropout=tagger.dropout if tagger.layers > 1 else 0.0)
                self.out = nn.Linear(2 * tagger.hidden, len(tagger.tags_))

            def forward(self, batch: dict[str, Any]) -> Any:
                parts = [self.words(batch["ids"]), batch["feats"]]
                if self.sent is not None:
                    parts.append(torch.tanh(self.sent(batch["sent"])))
                x = self.drop(torch.cat(parts, dim=-1))
                packed = nn.utils.rnn.pack_padded_sequence(x, batch["lengths"], batch_first=True, enforce_sorted=False)
                h, _ = self.lstm(packed)
                h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=x.shape[1])
                return self.out(self.drop(h))

        return Net()

    def fit(self, train: pd.DataFrame, val: pd.DataFrame | None = None) -> DialogueActTagger:
        """Train on the conversations of ``train``; with a non-empty ``val`` keep the best epoch by JointWER."""
        import torch

        convs = conversations(train)
        self.vocab_ = vocabulary(convs, self.min_count)
        labels = sorted({t for c in convs for t in c.tags if t is not None and t != INSIDE})
        if not labels:
            raise ValueError("no labelled rows to train the dialogue-act tagger on")
        self.tags_ = [INSIDE, *labels]
        sents = self._sentence_vectors(convs)
        items = self._windows(convs, sents, with_tags=True)
        sent_in = None if sents[0] is None else int(sents[0].shape[1])
        val_convs = conversations(val) if val is not None and len(val) else []
        with TORCH_RNG_LOCK, torch_threads(self.num_threads), torch.random.fork_rng():
            torch.manual_seed(self.seed)
            rng = np.random.default_rng(self.seed)
            self.model_ = self._build(sent_in)
            opt = torch.optim.Adam(self.model_.parameters(), lr=self.lr)
            loss_fn = torch.nn.CrossEntropyLoss(ignore_index=IGNORE)
            best, best_state = float("inf"), None
            for epoch in range(self.epochs):
                self.model_.train()
                total = 0.0
                order = rng.permutation(len(items))
                for s in range(0, len(order), self.batch_size):
                    batch = pad_windows([items[i] for i in order[s:s + self.batch_size]])
                    loss = sequence_step(opt, loss_fn, self.model_(batch), batch["tags"])
                    total += loss * len(order[s:s + self.batch_size])
                record = {"epoch": epoch, "loss": total / max(1, len(items))}
                if val_convs:
                    record["val_joint_wer"] = self._errors(val_convs).joint_wer
                    if record["val_joint_wer"] < best:
                        best, self.best_epoch_ = record["val_joint_wer"], epoch
                        best_state = state_snapshot(self.model_)
                self.history_.append(record)
            if best_state is not None:
                self.model_.load_state_dict(best_state)
        return self

    def _predict(self, convs: list[Conversation]) -> list[list[str]]:
        import torch

        if self.model_ is None:
            raise RuntimeError("DialogueActTagger is not fitted; call fit(train) first")
        items = self._windows(convs, self._sentence_vectors(convs), with_tags=False)
        out = [[INSIDE] * len(c.words) for c in convs]
        with torch_threads(self.num_threads), torch.no_grad():
            self.model_.eval()
            for s in range(0, len(items), self.batch_size):
                chunk = items[s:s + self.batch_size]
                pred = self.model_(pad_windows(chunk)).argmax(-1).numpy()
                for b, it in enumerate(chunk):
                    n = len(it["ids"])
                    out[it["conv"]][it["start"]:it["start"] + n] = [self.tags_[j] for j in pred[b, :n]]
        return out

    def _errors(self, convs: list[Conversation]) -> Any:
        gold = [[t if t is not None else INSIDE for t in c.tags] for c in convs]
        return dialogue_act_errors(gold, self._predict(convs))

    def predict_tags(self, df: pd.DataFrame) -> dict[str, list[str]]:
        """Predicted per-word tags of each conversation of ``df`` (keyed by group)."""
        convs = conversations(df)
        return {c.group: tags for c, tags in zip(convs, self._predict(convs), strict=True)}

    def evaluate(self, df: pd.DataFrame) -> dict[str, float]:
        """DSER, SegWER, DER and JointWER on the conversations of ``df`` (gold tags as in training; a
        row without label or seg_tags counts as one unlabelled segment)."""
        return self._errors(conversations(df)).as_dict()


def dialogue_evaluator(**tagger_kwargs: Any) -> Callable[[pd.DataFrame, pd.DataFrame, pd.DataFrame, int], dict[str, float]]:
    """A :func:`tasks.training.utility.run_utility` evaluator: SegWER/JointWER (and DSER/DER) on the test
    conversations of a :class:`DialogueActTagger` trained on ``train`` (early stopping on ``val``)."""
    def evaluate(train: pd.DataFrame, val: pd.DataFrame, test: pd.DataFrame, seed: int) -> dict[str, float]:
        return DialogueActTagger(seed=seed, **tagger_kwargs).fit(train, val).evaluate(test)
    return evaluate


__all__: Sequence[str] = ["DialogueActTagger", "conversations", "dialogue_evaluator", "hashing_embedder",
                          "sentence_embedder", "torch_threads"]
