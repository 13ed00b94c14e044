"""Embeddings computed once per (model, text) and shared by every metric.

:class:`EmbeddingCache` is a SQLite file (WAL mode: many readers and one writer across processes) holding
float32 arrays as blobs with their shape, keyed by (model key, sha256 of the UTF-8 text). The model key is
``model_id(spec)`` plus what the vector depends on (``|sentence`` or ``|tokens|layer=N``), so a different
layer or pooling never collides. Only texts missing from the cache are computed, each distinct text once.

Forward passes run in :func:`inference_batches` (longest text first, each batch within the device's token
budget, :func:`token_budget`, so padding stays small and a CPU batch stays in cache) under
``torch.inference_mode``. :func:`embed_once` fills the cache for several roles
from one pass per text: when the sentence encoder is the token encoder's model (MiniLM by default), the
sentence vector is the SentenceTransformer's own pooling modules applied to the last layer of the same pass
that gives the token matrices.

Stages running side by side in one process (threads of the run's task runner) often need the same texts, e.g. the
metric stage's shared pass and the embedding attack's sentence vectors of the same sources. A text being computed
is *claimed* per (cache file, model key, text sha) (:class:`_Claims`): another caller that needs only what the claim
will write computes its unclaimed texts first, then waits for the claim and reads the result from the cache,
instead of running the same forward pass again.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from tasks.models.loaders import load_sentence_encoder, load_token_encoder
from tasks.models.registry import ModelSpec, model_id
from tasks.parallel import resource_lock
from tasks.store import sha256_bytes

_CHUNK = 1024  # texts computed (and written to the cache) per step, so a crash loses little work
#: Padded tokens per forward batch (rows x longest row) on a CPU. The batch's activations should stay in the
#: CPU's caches: MiniLM over the metric benchmark's 681 texts on 2 cores ran about 1.6x faster at 1024 tokens
#: than at 8192 (``benchmarks/metrics.py --token-budgets``), and 512 to 1024 was also the fastest for 2,000
#: short convention sentences and for 512-token texts.
CPU_TOKEN_BUDGET = 1024
#: The same on an accelerator (CUDA, MPS), which wants large batches to fill its cores.
ACCELERATOR_TOKEN_BUDGET = 8192
#: Texts per SentenceTransformer batch when sentence vectors are encoded on their own.
SENTENCE_BATCH = 64
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

    def present(self, model_key: str, text_shas: Sequence[str]) -> set[str]:
        """The shas among ``text_shas`` that have an entry under ``model_key`` (no array is read)."""
        unique = list(dict.fromkeys(text_shas))
        found: set[str] = set()
        with self._lock:
            for start in range(0, len(unique), 500):
                part = unique[start:start + 500]
                found.update(sha for (sha,) in self.conn.execute(
                    f"SELECT text_sha FROM embeddings WHERE model = ? AND text_sha IN "
                    f"({','.join('?' * len(part))})", [model_key, *part]))
        return found

    def __len__(self) -> int:
        with self._lock:
            return self.conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]


class _Claims:
    """The (cache file, model key, text sha) entries some thread of this process is computing right now, each with
    its thread and the event that thread sets once the entry is in the cache (or it gave up on it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str, str], tuple[int, threading.Event]] = {}

    def take(self, cache: EmbeddingCache, keys: Sequence[str], shas: Sequence[str],
             ) -> tuple[list[str], list[tuple[str, str, str]], list[threading.Event]]:
        """(the shas this thread computes, the entries it now holds, the events to wait for): a sha whose every key
        other threads hold is theirs to compute; any other is this thread's, which claims the keys no one holds."""
        path = os.path.realpath(cache.path)
        me = threading.get_ident()
        mine: list[str] = []
        held: list[tuple[str, str, str]] = []
        theirs: dict[int, threading.Event] = {}
        with self._lock:
            for sha in dict.fromkeys(shas):
                entries = [(path, key, sha) for key in keys]
                others = [self._held[e][1] for e in entries if e in self._held and self._held[e][0] != me]
                if len(others) == len(entries):
                    theirs.update((id(event), event) for event in others)
                    continue
                mine.append(sha)
                for entry in entries:
                    if entry not in self._held:
                        self._held[entry] = (me, threading.Event())
                        held.append(entry)
        return mine, held, list(theirs.values())

    def release(self, held: Sequence[tuple[str, str, str]]) -> None:
        """Let go of entries from :meth:`take`, waking the threads that wait for them."""
        with self._lock:
            events = [self._held.pop(entry)[1] for entry in held]
        for event in events:
            event.set()


_CLAIMS = _Claims()


def _missing(cache: EmbeddingCache, keys: Sequence[str], shas: Sequence[str]) -> list[str]:
    """The shas among ``shas`` without an entry under some key of ``keys``."""
    complete = set(shas)
    for key in keys:
        complete &= cache.present(key, shas)
    return [sha for sha in shas if sha not in complete]


def _computed_once(texts: Sequence[str], keys: Sequence[str], cache: EmbeddingCache | None,
                   compute: Callable[[list[str]], object], claim_size: int) -> None:
    """Run ``compute`` (which writes the ``keys`` entries of the texts it gets to ``cache``) on the distinct texts
    of ``texts`` missing under ``keys``, claiming ``claim_size`` at a time and leaving texts another thread is
    computing to it; then wait for those and compute whatever they did not write."""
    by_sha = {text_sha(t): t for t in texts}
    if cache is None:
        compute(list(by_sha.values()))
        return
    pending = list(by_sha)
    while pending:
        waits: list[threading.Event] = []
        for start in range(0, len(pending), claim_size):
            mine, held, theirs = _CLAIMS.take(cache, keys, pending[start:start + claim_size])
            waits += theirs
            try:
                if mine:
                    compute([by_sha[sha] for sha in mine])
            finally:
                _CLAIMS.release(held)
        if not waits:
            return
        for event in waits:
            event.wait()
        pending = _missing(cache, keys, pending)


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
                        batch_size: int = SENTENCE_BATCH, yield_core: Callable[[], bool] | None = None) -> np.ndarray:
    """(n, d) float32 sentence vectors from the SentenceTransformer of ``spec``; only uncached texts are
    encoded (the model is not even loaded when all are cached), and a text another thread of this process is
    encoding (:class:`_Claims`) is read from the cache once that thread is done. ``yield_core`` as in
    :func:`embed_once`, checked before each chunk of texts."""
    texts = list(texts)
    key = sentence_key(spec)
    shas, found, missing = _lookup(texts, key, cache)
    if missing:
        def compute(part: list[str]) -> None:
            found.update(_encoded_sentences(part, spec, cache, batch_size, yield_core))

        # Claimed a few batches at a time, so a shared pass starting meanwhile takes the rest (it needs them anyway).
        _computed_once(missing, [key], cache, compute, claim_size=2 * batch_size)
        if cache is not None and (rest := [sha for sha in dict.fromkeys(shas) if sha not in found]):
            found.update(_from_other_threads(cache, key, rest))
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([found[s] for s in shas]).astype(np.float32, copy=False)


def _encoded_sentences(texts: Sequence[str], spec: ModelSpec, cache: EmbeddingCache | None, batch_size: int,
                       yield_core: Callable[[], bool] | None) -> dict[str, np.ndarray]:
    """The SentenceTransformer's vectors of ``texts`` by sha, written to ``cache`` a chunk at a time (no claims).
    A plain Transformer-then-pooling encoder runs in :func:`inference_batches` of the device's token budget on
    the ids it would feed itself (1.27x faster than its ``encode`` in batches of 64 on 1,500 convention sentences
    on 2 cores, vectors within 1e-6: ``benchmarks/sentence_vectors.py``); any other goes through its ``encode``."""
    encoder = load_sentence_encoder(spec)
    split = _transformer_and_pooling(encoder)
    found: dict[str, np.ndarray] = {}
    with _torch_threads(yield_core) as adjust:
        for start in range(0, len(texts), _CHUNK):
            part = list(texts[start:start + _CHUNK])
            if split is None:
                adjust()
                vectors = list(encoder.encode(part, batch_size=batch_size, convert_to_numpy=True,
                                              show_progress_bar=False))
            else:
                model, pool = split
                ids = _sentence_ids(encoder, part)
                pad = encoder.tokenizer.pad_token_id if encoder.tokenizer.pad_token_id is not None else 0
                vectors = [np.zeros(0)] * len(part)
                for batch in inference_batches([len(r) for r in ids], token_budget(model)):
                    adjust()
                    _, pooled = _forward(model, [ids[i] for i in batch], pad, [], pool)
                    for i, vector in zip(batch, pooled, strict=True):
                        vectors[i] = vector
            new = {text_sha(t): np.asarray(v, dtype=np.float32) for t, v in zip(part, vectors, strict=True)}
            found.update(new)
            if cache is not None:
                cache.put_many(sentence_key(spec), new.items())
    return found


def _from_other_threads(cache: EmbeddingCache, key: str, shas: Sequence[str]) -> dict[str, np.ndarray]:
    """The entries other threads computed for this caller, read without counting them as hits or misses again."""
    hits, misses = cache.hits, cache.misses
    got = cache.get_many(key, shas)
    cache.hits, cache.misses = hits, misses
    return got


def bert_score_encode(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text exactly as bert_score's ``sent_encode``: stripped text, special tokens added,
    truncated to ``model_max_length``; GPT-2/RoBERTa tokenizers get ``add_prefix_space=True``; an empty text
    gives the special tokens alone. The non-empty texts go through one batched tokenizer call: the same ids as
    one call per text, without a call's overhead per text (most of a warm BERTScore's time otherwise)."""
    from transformers import GPT2Tokenizer, RobertaTokenizer

    stripped = [t.strip() for t in texts]
    kwargs: dict[str, Any] = {}
    if isinstance(tokenizer, GPT2Tokenizer | RobertaTokenizer):
        kwargs["add_prefix_space"] = True
    full = [i for i, t in enumerate(stripped) if t]
    out: list[list[int]] = [[] for _ in stripped]
    # The empty text switches a fast tokenizer's truncation off and the next text on again: shared mutable
    # state of the one cached tokenizer ("Already borrowed" when two threads do it at once).
    with resource_lock(tokenizer):
        if len(full) < len(stripped):
            empty = list(tokenizer.encode("", add_special_tokens=True))
            for i, t in enumerate(stripped):
                if not t:
                    out[i] = list(empty)
        if full:
            encoded = tokenizer([stripped[i] for i in full], add_special_tokens=True,
                                max_length=tokenizer.model_max_length, truncation=True,
                                return_attention_mask=False, return_token_type_ids=False, **kwargs)["input_ids"]
            for i, ids in zip(full, encoded, strict=True):
                out[i] = list(ids)
    return out


def token_budget(model: Any) -> int:
    """Padded tokens per forward batch for ``model``'s device: :data:`CPU_TOKEN_BUDGET` on a CPU, else
    :data:`ACCELERATOR_TOKEN_BUDGET`."""
    device = next(model.parameters()).device.type
    return CPU_TOKEN_BUDGET if device == "cpu" else ACCELERATOR_TOKEN_BUDGET


def inference_batches(lengths: Sequence[int], budget: int, max_rows: int = 256) -> list[list[int]]:
    """Indices of ``lengths`` in forward batches: longest first, each batch at most ``max_rows`` rows and
    ``budget`` padded tokens (rows x its longest length; a single longer text gets a batch alone)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = lengths[current[0]] if current else lengths[i]  # the first (longest) sets the padded width
        if current and (len(current) + 1 > max_rows or (len(current) + 1) * width > budget):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def _padded(rows: Sequence[Sequence[int]], pad: int) -> tuple[Any, Any]:
    """(input_ids, attention_mask) long tensors, right-padded to the longest row."""
    import torch

    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, :len(row)] = 1
    return input_ids, mask


def _load_checked(spec: ModelSpec, layers: Sequence[int]) -> tuple[Any, Any]:
    """(tokenizer, model) of the token encoder; ValueError for a layer outside 0..num_hidden_layers."""
    tokenizer, model = load_token_encoder(spec)
    n_layers = int(getattr(model.config, "num_hidden_layers", max(layers, default=0)))
    for layer in layers:
        if not 0 <= layer <= n_layers:
            raise ValueError(f"layer {layer} is out of range 0..{n_layers} for {spec.name}")
    return tokenizer, model


def _forward(model: Any, rows: Sequence[Sequence[int]], pad: int, layers: Sequence[int],
             pool: Any = None) -> tuple[dict[int, list[np.ndarray]], list[np.ndarray]]:
    """One forward pass over ``rows`` (token ids): the (tokens, d) matrix of each text at each of ``layers``
    (``hidden_states`` index) and, when ``pool`` (SentenceTransformer modules after its Transformer) is given,
    each text's sentence vector pooled from the last layer of the same pass."""
    import torch

    dev = next(model.parameters()).device
    input_ids, mask = _padded(rows, pad)
    n_layers = int(model.config.num_hidden_layers)
    with torch.inference_mode():
        out = model(input_ids.to(dev), attention_mask=mask.to(dev),
                    output_hidden_states=any(layer != n_layers for layer in layers))
        by_layer = {}
        for layer in layers:
            hidden = (out.last_hidden_state if layer == n_layers else out.hidden_states[layer]).float().cpu().numpy()
            by_layer[layer] = [hidden[i, :len(r)].copy() for i, r in enumerate(rows)]
        vectors: list[np.ndarray] = []
        if pool is not None:
            features = {"token_embeddings": out.last_hidden_state, "attention_mask": mask.to(dev)}
            for module in pool:
                features = module(features)
            vectors = list(features["sentence_embedding"].float().cpu().numpy())
    return by_layer, vectors


def token_embeddings(texts: Sequence[str], spec: ModelSpec, layer: int, cache: EmbeddingCache | None = None,
                     batch_size: int = 256, budget: int | None = None,
                     yield_core: Callable[[], bool] | None = None) -> list[np.ndarray]:
    """One (tokens, d) float32 matrix per text: ``hidden_states[layer]`` (0 = embedding layer) for every
    token including the special ones, tokenised by :func:`bert_score_encode`. Uncached texts run in
    :func:`inference_batches` (at most ``batch_size`` texts and ``budget`` padded tokens each; default: the
    device's :func:`token_budget`); ``yield_core`` as in :func:`embed_once`."""
    texts = list(texts)
    key = token_key(spec, layer)
    shas, found, missing = _lookup(texts, key, cache)
    if missing:
        tokenizer, model = _load_checked(spec, [layer])
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        with _torch_threads(yield_core) as adjust:
            for chunk_start in range(0, len(missing), _CHUNK):
                chunk = missing[chunk_start:chunk_start + _CHUNK]
                ids = bert_score_encode(tokenizer, chunk)
                new: dict[str, np.ndarray] = {}
                for batch in inference_batches([len(r) for r in ids], budget or token_budget(model), batch_size):
                    adjust()
                    by_layer, _ = _forward(model, [ids[i] for i in batch], pad, [layer])
                    new.update((text_sha(chunk[i]), m) for i, m in zip(batch, by_layer[layer], strict=True))
                found.update(new)
                if cache is not None:
                    cache.put_many(key, new.items())
    return [found[s] for s in shas]


def _transformer_and_pooling(encoder: Any) -> tuple[Any, list[Any]] | None:
    """(the Hugging Face model, the modules after it) of a SentenceTransformer that starts with a Transformer
    module; else None."""
    modules = list(encoder)
    if not modules or type(modules[0]).__name__ != "Transformer":
        return None
    return modules[0].auto_model, modules[1:]


def sentence_pooling(token_spec: ModelSpec, sentence_spec: ModelSpec) -> Any:
    """The sentence encoder's modules after its Transformer (Pooling, Normalize, ...) when that Transformer is
    the token encoder's model (same folder and file), so one forward pass can serve both roles; else None."""
    if (token_spec.path, token_spec.gguf_file) != (sentence_spec.path, sentence_spec.gguf_file):
        return None
    split = _transformer_and_pooling(load_sentence_encoder(sentence_spec))
    return None if split is None else split[1]


def _sentence_ids(encoder: Any, texts: Sequence[str]) -> list[list[int]]:
    """The token ids the SentenceTransformer itself feeds its model for each text (its own truncation)."""
    tokenize = getattr(encoder, "preprocess", None) or encoder.tokenize
    features = tokenize(list(texts))
    lengths = features["attention_mask"].sum(dim=1).tolist()
    return [row[:n] for row, n in zip(features["input_ids"].tolist(), lengths, strict=True)]


def embed_once(texts: Sequence[str], *, token_spec: ModelSpec | None = None, layers: Sequence[int] = (),
               sentence_spec: ModelSpec | None = None, cache: EmbeddingCache, budget: int | None = None,
               yield_core: Callable[[], bool] | None = None) -> int:
    """Fill ``cache`` with the token matrices at each of ``layers`` and the sentence vectors of every distinct
    text not cached yet, one forward pass per text where the two roles share a model
    (:func:`sentence_pooling`) and the SentenceTransformer tokenises the text as BERTScore does (a text
    longer than its ``max_seq_length`` is encoded again, truncated, for its sentence vector). Otherwise each
    role runs its own pass. While ``yield_core()`` is true (checked between batches) a pass runs on one torch
    thread fewer, leaving that core to work running beside it (two threads wanting both cores of a 2-core
    machine take longer together than one after the other). Texts whose every entry another thread of this
    process is computing are left to it and waited for. Returns the number of texts this call sent through the
    shared pass."""
    texts = list(dict.fromkeys(texts))
    layers = list(dict.fromkeys(layers)) if token_spec is not None else []
    pool = sentence_pooling(token_spec, sentence_spec) if token_spec is not None and sentence_spec else None
    if pool is None or not layers:
        for layer in layers:
            token_embeddings(texts, token_spec, layer, cache=cache, budget=budget,  # type: ignore[arg-type]
                             yield_core=yield_core)
        if sentence_spec is not None:
            sentence_embeddings(texts, sentence_spec, cache=cache, yield_core=yield_core)
        return 0

    keys = [token_key(token_spec, layer) for layer in layers]  # type: ignore[arg-type]
    s_key = sentence_key(sentence_spec)  # type: ignore[arg-type]
    by_sha = {text_sha(t): t for t in texts}
    todo = [by_sha[sha] for sha in _missing(cache, [*keys, s_key], list(by_sha))]
    if not todo:
        return 0
    passed = 0

    def compute(part_texts: list[str]) -> None:
        nonlocal passed
        tokenizer, model = _load_checked(token_spec, layers)  # type: ignore[arg-type]
        encoder = load_sentence_encoder(sentence_spec)  # type: ignore[arg-type]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        truncated: list[str] = []
        with _torch_threads(yield_core) as adjust:
            for chunk_start in range(0, len(part_texts), _CHUNK):
                chunk = part_texts[chunk_start:chunk_start + _CHUNK]
                ids = bert_score_encode(tokenizer, chunk)
                same = [a == b for a, b in zip(ids, _sentence_ids(encoder, chunk), strict=True)]
                truncated += [t for t, ok in zip(chunk, same, strict=True) if not ok]
                new_tokens: dict[int, dict[str, np.ndarray]] = {layer: {} for layer in layers}
                new_vectors: dict[str, np.ndarray] = {}
                for batch in inference_batches([len(r) for r in ids], budget or token_budget(model)):
                    adjust()
                    by_layer, vectors = _forward(model, [ids[i] for i in batch], pad, layers, pool)
                    for layer in layers:
                        new_tokens[layer].update((text_sha(chunk[i]), m)
                                                 for i, m in zip(batch, by_layer[layer], strict=True))
                    new_vectors.update((text_sha(chunk[i]), v) for i, v in zip(batch, vectors, strict=True)
                                       if same[i])
                for key, layer in zip(keys, layers, strict=True):
                    cache.put_many(key, new_tokens[layer].items())
                cache.put_many(s_key, new_vectors.items())
                passed += len(chunk)
        if truncated:  # held by this call already: encoded here, never waited for (no claim waits inside another)
            _encoded_sentences(truncated, sentence_spec, cache, SENTENCE_BATCH, yield_core)  # type: ignore[arg-type]

    # Everything claimed at once: a sentence encoder starting meanwhile waits for these instead of encoding them.
    _computed_once(todo, [*keys, s_key], cache, compute, claim_size=len(todo))
    return passed


@contextmanager
def _torch_threads(yield_core: Callable[[], bool] | None) -> Iterator[Callable[[], None]]:
    """A function that sets this thread's torch thread count for the next batch: one fewer than at entry
    while ``yield_core()`` is true, else all of them; the count at entry is restored on exit.

    ``torch.set_num_threads`` also sets the count that threads starting to use torch later pick up, once
    and for good; a throwaway thread sets that back at once, so a thread that starts meanwhile (another
    stage's) does not keep one thread fewer for its whole life."""
    import torch

    threads = torch.get_num_threads()
    current = threads

    def set_here(count: int) -> None:
        nonlocal current
        if count != current:
            torch.set_num_threads(count)
            helper = threading.Thread(target=torch.set_num_threads, args=(threads,))
            helper.start()
            helper.join()
            current = count

    def adjust() -> None:
        if yield_core is not None:
            set_here(max(1, threads - 1) if yield_core() else threads)

    try:
        yield adjust
    finally:
        set_here(threads)
