"""The Dask client metrics and attacks fan out on: a scheduler address from settings for a real
cluster, an in-process LocalCluster otherwise.

The local default uses threads in one process (``processes=False``): models load once and are shared
through the loaders' process cache, torch and numpy release the GIL, and a 2-core machine does not pay
for a second copy of every model. Against a real cluster each worker loads its own models.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


@contextmanager
def dask_client(address: str | None = None, *, n_workers: int = 1, threads_per_worker: int | None = None) -> Iterator[Any]:
    """A ``distributed.Client`` for the given scheduler address, or a LocalCluster of threads."""
    from distributed import Client, LocalCluster

    if address:
        client = Client(address)
        try:
            yield client
        finally:
            client.close()
        return
    threads = threads_per_worker or max(1, os.cpu_count() or 1)
    with LocalCluster(n_workers=n_workers, threads_per_worker=threads, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


def map_shards(client: Any, func: Callable[..., T], shards: Sequence[Any], **kwargs: Any) -> list[T]:
    """Run ``func(shard, **kwargs)`` for every shard on the client and gather the results in order.

    Exceptions propagate (the first failing shard's), so a stage fails as a whole and is retried as a
    whole; shards are the unit of parallelism, not of caching."""
    if not shards:
        return []
    futures = client.map(func, list(shards), pure=False, **kwargs)
    return client.gather(futures)


def split_even(n_items: int, n_shards: int) -> list[slice]:
    """Contiguous slices covering ``range(n_items)`` in at most ``n_shards`` near-equal parts."""
    n_shards = max(1, min(n_shards, n_items)) if n_items else 1
    bounds = [round(i * n_items / n_shards) for i in range(n_shards + 1)]
    return [slice(bounds[i], bounds[i + 1]) for i in range(n_shards) if bounds[i + 1] > bounds[i]] or [slice(0, 0)]
