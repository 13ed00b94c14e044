"""The Dask helpers: a real LocalCluster, shards in order, failures propagate."""

from __future__ import annotations

import pytest

from tasks.parallel import dask_client, map_shards, split_even


def test_split_even_covers_everything_once():
    for n, k in [(0, 3), (1, 4), (10, 3), (100, 7), (5, 5)]:
        slices = split_even(n, k)
        covered = [i for s in slices for i in range(n)[s]]
        assert covered == list(range(n))
        assert len(slices) <= max(1, k)


def _square_sum(shard: list[int], offset: int) -> int:
    if offset < 0:
        raise ValueError(f"bad offset {offset}")
    return sum(x * x for x in shard) + offset


def test_map_shards_on_a_real_local_cluster_keeps_order():
    shards = [[1, 2], [3], [4, 5, 6]]
    with dask_client(threads_per_worker=2) as client:
        assert client.scheduler_info()["workers"]
        assert map_shards(client, _square_sum, shards, offset=1) == [6, 10, 78]
        assert map_shards(client, _square_sum, [], offset=1) == []
        with pytest.raises(ValueError, match="bad offset"):
            map_shards(client, _square_sum, shards, offset=-1)
