"""One run of an experiment at a time per storage root: a lock file holding the running process's pid and host.

The lock is an exclusive ``flock`` on ``<storage root>/.locks/<experiment>.lock``, beside the run folder so that
the run folder holds the run's artifacts only (for a storage root that is not a local folder, on a file in the
local cache folder named after the root: it then keeps apart the runs of one machine only). The kernel drops the lock when its process ends, however it ends, so a killed run never
blocks the next one; the file's content, the holder's pid and host, stays behind, which is how the next run
knows it takes over from a killed run and says so. A run that ends normally empties the file.

:func:`open_run` is what a run does first: take the lock (or wait for it), refuse symlinks that lead out of
the storage root, and remove the partial files an interrupted run left, only while the lock is held (another
run's partials are its files in the making).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from tasks.errors import SynthUGCError
from tasks.store import ArtifactStore

#: The folder of the lock files under a storage root (no experiment name starts with '.', tasks/paths.py).
LOCKS_FOLDER = ".locks"


@dataclass(frozen=True)
class Holder:
    """The process that holds (or held) an experiment's lock."""

    pid: int
    host: str
    since: str = ""

    def __str__(self) -> str:
        return f"pid {self.pid} on host {self.host}"

    def runs_here(self) -> bool:
        """True when the holder is a live process on this host (it cannot be known for another host)."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class ExperimentRunning(SynthUGCError):
    """Another process runs the same experiment into the same storage root."""

    def __init__(self, experiment: str, holder: Holder | None) -> None:
        self.experiment, self.holder = experiment, holder
        super().__init__(f"experiment {experiment} is running ({holder or 'holder unknown'}); wait for it to end, "
                         f"or rerun with --wait to start when it does")


def lock_path(store: ArtifactStore, experiment: str, local_dir: Path) -> Path:
    """Where an experiment's lock lives: under the storage root when it is a local folder, else under
    ``local_dir`` (named after the root)."""
    if store.local:
        return Path(store.path(LOCKS_FOLDER, f"{experiment}.lock"))
    digest = hashlib.sha256(store.real_root.encode()).hexdigest()[:16]
    return local_dir / LOCKS_FOLDER / f"{digest}-{experiment}.lock"


def _read_holder(fd: int) -> Holder | None:
    raw = os.pread(fd, 4096, 0)
    if not raw.strip():
        return None
    try:
        data = json.loads(raw)
        return Holder(pid=int(data["pid"]), host=str(data["host"]), since=str(data.get("since", "")))
    except (ValueError, KeyError, TypeError):
        return Holder(pid=-1, host="unknown")


# Locks this process holds: path -> (fd, depth). The CLI takes the lock before the flow starts and the flow
# takes it again; flock would refuse a second descriptor of the same process, so the second take is counted.
_held: dict[str, tuple[int, int]] = {}
_held_guard = threading.Lock()


class RunLock:
    """The lock of one experiment's runs (see the module docstring)."""

    def __init__(self, path: Path, experiment: str) -> None:
        self.path, self.experiment = Path(path), experiment

    def acquire(self, *, wait: bool = False, on_wait: Callable[[Holder | None], None] | None = None,
                on_takeover: Callable[[Holder], None] | None = None) -> None:
        """Take the lock. Held by another process: ExperimentRunning, or with ``wait`` block until it ends
        (``on_wait`` is told who holds it first). ``on_takeover`` hears of a holder that ended without
        releasing (a killed run)."""
        key = str(self.path)
        with _held_guard:
            if key in _held:
                fd, depth = _held[key]
                _held[key] = (fd, depth + 1)
                return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                holder = self._holder_of_held_lock(fd)
                if not wait:
                    raise ExperimentRunning(self.experiment, holder) from None
                if on_wait:
                    on_wait(holder)
                fcntl.flock(fd, fcntl.LOCK_EX)
            left = _read_holder(fd)
            if left is not None and on_takeover:
                on_takeover(left)
            me = Holder(pid=os.getpid(), host=socket.gethostname(), since=datetime.now(UTC).isoformat(timespec="seconds"))
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(asdict(me)).encode(), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)  # closing drops the flock, if taken
            raise
        with _held_guard:
            _held[key] = (fd, 1)

    @staticmethod
    def _holder_of_held_lock(fd: int) -> Holder | None:
        """The holder's pid and host (it writes them just after locking: give it a moment)."""
        for _ in range(20):
            if (holder := _read_holder(fd)) is not None:
                return holder
            time.sleep(0.05)
        return None

    def release(self) -> None:
        """Empty the file (a clean end: the next run takes over nothing) and drop the lock."""
        key = str(self.path)
        with _held_guard:
            fd, depth = _held[key]
            if depth > 1:
                _held[key] = (fd, depth - 1)
                return
            del _held[key]
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)


@contextmanager
def open_run(store: ArtifactStore, experiment: str, *, local_dir: Path, say: Callable[[str], None],
             wait: bool = False) -> Iterator[None]:
    """Hold an experiment's run lock for the block, after refusing symlinks out of the storage root
    (UnsafePath) and removing partial files an interrupted run left; ``say`` gets one line for each thing
    worth telling the user (waiting, a lock taken over, partials removed)."""
    lock = RunLock(lock_path(store, experiment, local_dir), experiment)

    def waiting(holder: Holder | None) -> None:
        say(f"experiment {experiment} is running ({holder or 'holder unknown'}); waiting for it to end (--wait)")

    def took_over(holder: Holder) -> None:
        state = "still runs but no longer holds it" if holder.runs_here() else "no longer runs"
        say(f"experiment {experiment}: took over the lock left by {holder}, which {state} (an interrupted run)")

    lock.acquire(wait=wait, on_wait=waiting, on_takeover=took_over)
    try:
        store.check_tree(experiment)
        if removed := store.remove_partials(experiment):
            say(f"removed {len(removed)} stale partial file(s) left under {store.path(experiment)} by an "
                f"interrupted run")
        yield
    finally:
        lock.release()
