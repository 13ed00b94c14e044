"""Embeddings computed once per (model, text) and shared by every metric.

:class:`EmbeddingCache` is a SQLite file (WAL mode: many readers and one writer across processes) holding
float32 arrays as blobs with their shape, keyed by (model key, sha256 of the UTF-8 text). The model key is
``model_id(spec)`` plus what the vector depends on (``|sentence`` or ``|tokens|layer=N``), so a different
layer or pooling never collides. Only texts missing from the cache are computed, each distinct text once.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tasks.models.registry import ModelSpec, model_id
from tasks.parallel import resource_lock
from tasks.store import sha256_bytes

_CHUNK = 1024  # texts computed (and written to the cache) per step, so a crash loses little work
_SETUP_LOCK = threading.Lock()


class EmbeddingCache:
    """On-disk cache of float32 arrays keyed by (model key, text sha256); counts hits and misses.

    Safe to share across processes (SQLite WAL, busy timeout) and picklable (reconnects lazily), so a
    Dask worker can take it."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.hits = 0
        self.misses = 0
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    # connection ---------------------------------------------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            with _SETUP_LOCK:  # creating the file and switching it to WAL are not safe to race on in a process
                if self._conn is None:
                    self._conn = self._connect()
        return self._conn

    def _connect(self) -> sqlite3.Connection:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=120, check_same_thread=False)
        conn.execute("PRAGMA page_size=65536")  # large pages: rows are 10-100 KB blobs (only applies to a new file)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        # A rowid table with a unique index, not WITHOUT ROWID: SQLite keeps large rows poorly in a
        # clustered index (measured: writes 2-3x slower for token matrices).
        conn.execute(
            "CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, text_sha TEXT NOT NULL, "
            "shape TEXT NOT NULL, data BLOB NOT NULL)"
        )
        conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS embeddings_key ON embeddings (model, text_sha)")
        conn.commit()
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        return {"path": self.path, "hits": self.hits, "misses": self.misses}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])
        self.hits, self.misses = state["hits"], state["misses"]

    # access -------------------------------------------------------------------------------------
    def get_many(self, model_key: str, text_shas: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached arrays among ``text_shas``; counts a hit per found and a miss per absent sha."""
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(text_shas))
        with self._lock:
            for start in range(0, len(unique), 500):
                part = unique[start:start + 500]
                rows = self.conn.execute(
                    f"SELECT text_sha, shape, data FROM embeddings WHERE model = ? AND text_sha IN "
                    f"({','.join('?' * len(part))})", [model_key, *part],
                ).fetchall()
                for sha, shape, data in rows:
                    dims = tuple(int(x) for x in shape.split(",") if x)
                    found[sha] = np.frombuffer(data, dtype=np.float32).reshape(dims)
        self.hits += len(found)
        self.misses += len(unique) - len(found)
        return found

    def put_many(self, model_key: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        """Store arrays (as float32) under (model_key, sha); an existing entry is kept."""
        rows = []
        for sha, array in items:
            arr = np.ascontiguousarray(array, dtype=np.float32)
            rows.append((model_key, sha, ",".join(str(d) for d in arr.shape), arr.tobytes()))
        with self._lock:
            self.conn.executemany("INSERT OR IGNORE INTO embeddings VALUES (?, ?, ?, ?)", rows)
            self.conn.commit()

    def __len__(self) -> int:
        with self._lock:
            return self.conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]


def text_sha(text: str) -> str:
    """sha256 of the text's UTF-8 bytes (the cache key of a text)."""
    return sha256_bytes(text.encode("utf-8"))


def sentence_key(spec: ModelSpec) -> str:
    """Cache key of a sentence encoder's vectors (its pooling and normalisation are part of its files)."""
    return f"{model_id(spec)}|sentence"


def token_key(spec: ModelSpec, layer: int) -> str:
    """Cache key of a token encoder's layer-``layer`` matrices, tokenised as bert_score does."""
    return f"{model_id(spec)}|tokens|layer={layer}|tok=bert_score"


def _lookup(texts: Sequence[str], key: str, cache: EmbeddingCache | None) -> tuple[list[str], dict, list[str]]:
    """(sha per text, cached arrays by sha, distinct texts still to compute)."""
    shas = [text_sha(t) for t in texts]
    found = cache.get_many(key, shas) if cache is not None else {}
    missing = {}
    for text, sha in zip(texts, shas, strict=True):
        if sha not in found and sha not in missing:
            missing[sha] = text
    return shas, found, list(missing.values())


def sentence_embeddings(texts: Sequence[str], spec: ModelSpec, cache: EmbeddingCache | None = None,
                        batch_size: int = 64) -> np.ndarray:
    """(n, d) float32 sentence vectors from the SentenceTransformer of ``spec``; only uncached texts are
    encoded (the model is not even loaded when all are cached)."""
    texts = list(texts)
    key = sentence_key(spec)
    shas, found, missing = _lookup(texts, key, cache)
    if missing:
        from tasks.models.loaders import load_sentence_encoder

        model = load_sentence_encoder(spec)
        for start in range(0, len(missing), _CHUNK):
            part = missing[start:start + _CHUNK]  # SentenceTransformer sorts each call by length itself
            vectors = model.encode(part, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
            new = {text_sha(t): np.asarray(v, dtype=np.float32) for t, v in zip(part, vectors, strict=True)}
            found.update(new)
            if cache is not None:
                cache.put_many(key, new.items())
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([found[s] for s in shas]).astype(np.float32, copy=False)


def bert_score_encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids exactly as bert_score's ``sent_encode``: stripped text, special tokens added, truncated to
    ``model_max_length``; GPT-2/RoBERTa tokenizers get ``add_prefix_space=True``; an empty text gives the
    special tokens alone."""
    from transformers import GPT2Tokenizer, RobertaTokenizer

    text = text.strip()
    kwargs: dict[str, Any] = {}
    if isinstance(tokenizer, GPT2Tokenizer | RobertaTokenizer):
        kwargs["add_prefix_space"] = True
    # The empty text switches a fast tokenizer's truncation off and the next text on again: shared mutable
    # state of the one cached tokenizer ("Already borrowed" when two threads do it at once).
    with resource_lock(tokenizer):
        if not text:
            return list(tokenizer.encode("", add_special_tokens=True))
        return list(tokenizer.encode(text, add_special_tokens=True, max_length=tokenizer.model_max_length,
                                     truncation=True, **kwargs))


def token_embeddings(texts: Sequence[str], spec: ModelSpec, layer: int, cache: EmbeddingCache | None = None,
                     batch_size: int = 64) -> list[np.ndarray]:
    """One (tokens, d) float32 matrix per text: ``hidden_states[layer]`` (0 = embedding layer) for every
    token including the special ones, tokenised by :func:`bert_score_encode`. Uncached texts run in batches
    sorted by length (little padding)."""
    texts = list(texts)
    key = token_key(spec, layer)
    shas, found, missing = _lookup(texts, key, cache)
    if missing:
        import torch

        from tasks.models.loaders import load_token_encoder

        tokenizer, model = load_token_encoder(spec)
        n_layers = int(getattr(model.config, "num_hidden_layers", layer))
        if not 0 <= layer <= n_layers:
            raise ValueError(f"layer {layer} is out of range 0..{n_layers} for {spec.name}")
        ids = {t: bert_score_encode(tokenizer, t) for t in missing}
        order = sorted(missing, key=lambda t: len(ids[t]), reverse=True)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        dev = next(model.parameters()).device
        for chunk_start in range(0, len(order), _CHUNK):
            new: dict[str, np.ndarray] = {}
            chunk = order[chunk_start:chunk_start + _CHUNK]
            for start in range(0, len(chunk), batch_size):
                batch = chunk[start:start + batch_size]
                lens = [len(ids[t]) for t in batch]
                width = max(lens)
                input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for i, t in enumerate(batch):
                    input_ids[i, :lens[i]] = torch.tensor(ids[t], dtype=torch.long)
                    mask[i, :lens[i]] = 1
                with torch.inference_mode():
                    out = model(input_ids.to(dev), attention_mask=mask.to(dev), output_hidden_states=True)
                hidden = out.hidden_states[layer].float().cpu().numpy()
                for i, t in enumerate(batch):
                    new[text_sha(t)] = hidden[i, :lens[i]].copy()
            found.update(new)
            if cache is not None:
                cache.put_many(key, new.items())
    return [found[s] for s in shas]
