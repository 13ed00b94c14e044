"""The Dask helpers: a real LocalCluster, shards in order, failures propagate; jobs in processes of their own;
the process defaults the package sets before pyarrow loads."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tasks.parallel import (
    dask_client,
    fit_process_count,
    map_in_processes,
    map_shards,
    read_ahead,
    split_even,
)

REPO = Path(__file__).resolve().parent.parent


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


def _pid_and_square(x: int) -> tuple[int, int]:
    if x < 0:
        raise ValueError(f"negative {x}")
    return os.getpid(), x * x


def test_jobs_in_processes_come_back_in_order_from_other_processes_and_raise_here(monkeypatch):
    out = map_in_processes(_pid_and_square, [(3,), (1,), (2,)], 2)
    assert [square for _, square in out] == [9, 1, 4]
    assert os.getpid() not in {pid for pid, _ in out}  # spawned, not run here
    assert {pid for pid, _ in map_in_processes(_pid_and_square, [(3,), (1,)], 1)} == {os.getpid()}
    with pytest.raises(ValueError, match="negative -1"):
        map_in_processes(_pid_and_square, [(2,), (-1,)], 2)
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # a daemonic process (a Dask nanny's worker's kind)
        inside = pool.apply(map_in_processes, (_pid_and_square, [(3,), (1,)], 2))
    assert [square for _, square in inside] == [9, 1] and len({pid for pid, _ in inside}) == 1  # here, not spawned
    monkeypatch.setenv("SYNTHUGC_FIT_PROCESSES", "2")
    assert (fit_process_count(3), fit_process_count(1)) == (2, 1)  # never more than the jobs
    monkeypatch.delenv("SYNTHUGC_FIT_PROCESSES")
    assert fit_process_count(64) == len(os.sched_getaffinity(0))  # one per core by default


def _run_script(script: Path, timeout: float) -> subprocess.CompletedProcess:
    """A user's script run with this checkout on its path; it must exit 0."""
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=REPO, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_jobs_in_processes_from_a_script_without_a_main_guard_run_once(tmp_path):
    """A user's script that fans out at its top level: the workers do not run the script again (with
    multiprocessing's spawn they would, and fail while bootstrapping)."""
    script = tmp_path / "fan_out.py"
    script.write_text("from tasks.parallel import map_in_processes\n"
                      "print('started')\n"
                      "print(map_in_processes(pow, [(2, 3), (3, 2)], 2))\n")
    assert _run_script(script, timeout=120).stdout.splitlines() == ["started", "[8, 9]"]


@pytest.mark.parametrize(("given", "used"), [(None, "0"), ("250", "250")])
def test_arrows_allocator_hands_freed_pages_back_unless_the_user_says_otherwise(given, used):
    """The command line's first import sets mimalloc's purge delay before pyarrow loads (mimalloc reads it then);
    a value in the environment is kept."""
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    env.update({"MIMALLOC_VERBOSE": "1"} | ({"MIMALLOC_PURGE_DELAY": given} if given else {}))
    done = subprocess.run([sys.executable, "-c", "import flows.cli, pyarrow as pa; pa.allocate_buffer(8)"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"option 'purge_delay': {used} " in done.stderr, done.stderr[-2000:]


def test_stripes_run_side_by_side_come_back_in_order_and_raise_here():
    import threading

    from tasks.parallel import run_stripes

    met = threading.Barrier(3, timeout=30)  # passes only when three stripes run at once
    done = run_stripes(lambda t: (met.wait(), t * 10, threading.get_ident())[1:], 3)
    assert [value for value, _ in done] == [0, 10, 20] and len({ident for _, ident in done}) == 3
    assert done[0][1] == threading.get_ident()  # the first stripe runs in the caller
    assert run_stripes(lambda t: threading.get_ident(), 1) == [threading.get_ident()]

    def failing(t: int) -> int:
        if t == 2:
            raise ValueError("stripe 2")
        return t

    with pytest.raises(ValueError, match="stripe 2"):
        run_stripes(failing, 3)


def test_a_process_multiprocessing_started_exits_once_its_jobs_in_processes_are_done(tmp_path):
    """A process that multiprocessing started (a user's ``Process``, a benchmark's child) and that fanned out
    exits when its target returns: it joins its children before the interpreter's exit hooks run, so the
    workers kept up for the next call are stopped first (they used to idle out their 300 s timeout first)."""
    script = tmp_path / "child_fans_out.py"
    script.write_text("import multiprocessing as mp, time\n"
                      "from tasks.parallel import map_in_processes\n"
                      "def child(queue):\n"
                      "    queue.put(map_in_processes(time.sleep, [(2,), (2,)], 2))\n"  # both workers start, as for fits
                      "if __name__ == '__main__':\n"
                      "    ctx = mp.get_context('spawn')\n"
                      "    queue = ctx.Queue()\n"
                      "    proc = ctx.Process(target=child, args=(queue,))\n"
                      "    proc.start()\n"
                      "    print(queue.get())\n"
                      "    proc.join(60)\n"
                      "    print('alive' if proc.is_alive() else f'exited {proc.exitcode}')\n"
                      "    proc.kill()\n")
    done = _run_script(script, timeout=150)
    assert done.stdout.splitlines() == ["[None, None]", "exited 0"], done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


def test_kernel_threads_follow_numbas_setting_without_starting_its_threading_layer():
    """The stripe count is NUMBA_NUM_THREADS, read without starting numba's threading layer (on a machine without
    TBB, OpenMP's, whose start enables nested OpenMP regions in the whole process), and a stripe kernel run
    starts none either."""
    code = ("import numpy as np; from numba.np.ufunc import parallel; from tasks.parallel import kernel_threads;"
            "from tasks.privacy.stylometric.kernels import _sample; import pyarrow as pa;"
            "n = kernel_threads(); _sample(pa.array(['a b c'] * 50, pa.large_string()), 3);"
            "print(n, parallel._is_initialized)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parent.parent, env={**os.environ, "NUMBA_NUM_THREADS": "3"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "False"]


def test_read_ahead_makes_the_next_item_while_the_caller_holds_this_one_keeps_order_and_raises_here():
    started = [threading.Event() for _ in range(3)]

    def batches():
        for i in range(3):
            started[i].set()
            yield i
        raise OSError("the file broke off")

    items = read_ahead(batches())
    assert next(items) == 0
    assert started[1].wait(5), "the second item was not started while the caller held the first"
    assert next(items) == 1
    assert next(items) == 2
    with pytest.raises(OSError, match="broke off"):
        next(items)


def test_read_ahead_stops_when_the_caller_stops_early():
    made = []

    def batches():
        for i in range(100):
            made.append(i)
            yield i

    for item in read_ahead(batches()):
        if item == 1:
            break
    assert made == [0, 1, 2]
