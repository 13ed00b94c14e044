"""Stage progress for the terminal: the CLI installs a reporter, the flow tells it about each stage.

A module-level hook (not a flow parameter) because a progress bar is a property of the terminal the
CLI runs in, not of the run: deployments and tests run without one. By default a person sees one line per
stage (name, state, seconds) and a summary table at the end (:func:`summary_table`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol, TextIO

FINE_STATES = ("Completed", "Cached")


class StageReporter(Protocol):
    def planned(self, total: int) -> None: ...
    def started(self, name: str) -> None: ...
    def finished(self, name: str, state: str, seconds: float) -> None: ...


_reporter: StageReporter | None = None


def reporter() -> StageReporter | None:
    """The installed reporter, if any."""
    return _reporter


def stage_line(name: str, state: str, seconds: float) -> str:
    return f"{name:<48} {state:<10} {seconds:7.1f} s"


class StageLines:
    """One plain line per finished stage (a log file, CI, a pipe)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr

    def planned(self, total: int) -> None:
        pass

    def started(self, name: str) -> None:
        pass

    def finished(self, name: str, state: str, seconds: float) -> None:
        # written, not print()ed: a flow with log_prints=True turns print() into log records
        self.stream.write(stage_line(name, state, seconds) + "\n")
        self.stream.flush()


class RichStageBar:
    """A rich progress bar over the run's stages, with a line per finished stage printed above it."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("{task.fields[stage]}"),
                                  console=Console(stderr=True))
        self._task = self._progress.add_task("stages", total=None, stage="")
        self._running: list[str] = []

    def planned(self, total: int) -> None:
        self._progress.update(self._task, total=total)

    def started(self, name: str) -> None:
        self._running.append(name)
        self._progress.update(self._task, stage=f"running {', '.join(self._running[-3:])}")

    def finished(self, name: str, state: str, seconds: float) -> None:
        if name in self._running:
            self._running.remove(name)
        self._progress.update(self._task, advance=1, stage=f"running {', '.join(self._running[-3:])}")
        colour = "" if state in FINE_STATES else "[red]"
        self._progress.console.print(f"{colour}{stage_line(name, state, seconds)}", highlight=False)

    def __enter__(self) -> RichStageBar:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()


def summary_table(states: Mapping[str, str], seconds: Mapping[str, float], failed: Mapping[str, str],
                  wall_seconds: float, peak_parallel: int) -> str:
    """The end-of-run summary: per stage kind, how many calls ended in which state and their seconds; then
    each failure with its reason."""
    kinds: dict[str, dict[str, float]] = {}
    for name, state in states.items():
        kind = name.split("[", 1)[0]
        row = kinds.setdefault(kind, {"calls": 0, "Completed": 0, "Cached": 0, "failed": 0, "seconds": 0.0})
        row["calls"] += 1
        row[state if state in FINE_STATES else "failed"] += 1
        row["seconds"] += seconds.get(name, 0.0)
    lines = [f"{'stage':<16} {'calls':>6} {'computed':>9} {'cached':>7} {'failed':>7} {'stage-s':>9}"]
    lines += [f"{kind:<16} {r['calls']:>6.0f} {r['Completed']:>9.0f} {r['Cached']:>7.0f} {r['failed']:>7.0f} "
              f"{r['seconds']:>9.1f}" for kind, r in kinds.items()]
    total = {k: sum(r[k] for r in kinds.values()) for k in ("calls", "Completed", "Cached", "failed")}
    lines.append(f"{'all':<16} {total['calls']:>6.0f} {total['Completed']:>9.0f} {total['Cached']:>7.0f} "
                 f"{total['failed']:>7.0f}   {wall_seconds:.1f} s wall, "
                 + (f"up to {peak_parallel} at once" if peak_parallel else "every stage read from its cache"))
    lines += [f"failed: {name}: {reason}" for name, reason in failed.items()]
    return "\n".join(lines)


@contextmanager
def installed(bar: StageReporter | None) -> Iterator[StageReporter | None]:
    """Install a reporter (or none) for the duration of a run."""
    global _reporter
    previous, _reporter = _reporter, bar
    try:
        yield bar
    finally:
        _reporter = previous
