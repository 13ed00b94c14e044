"""Stage progress for the terminal: the CLI installs a reporter, the flow tells it about each stage.

A module-level hook (not a flow parameter) because a progress bar is a property of the terminal the
CLI runs in, not of the run: deployments and tests run without one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class StageReporter(Protocol):
    def planned(self, total: int) -> None: ...
    def started(self, name: str) -> None: ...
    def finished(self, name: str, state: str) -> None: ...


_reporter: StageReporter | None = None


def reporter() -> StageReporter | None:
    """The installed reporter, if any."""
    return _reporter


class RichStageBar:
    """A rich progress bar over the run's stages, with the current stage and the last state."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("{task.fields[stage]}"),
                                  console=Console(stderr=True))
        self._task = self._progress.add_task("stages", total=None, stage="")

    def planned(self, total: int) -> None:
        self._progress.update(self._task, total=total)

    def started(self, name: str) -> None:
        self._progress.update(self._task, stage=f"running {name}")

    def finished(self, name: str, state: str) -> None:
        self._progress.update(self._task, advance=1, stage=f"{name}: {state}")
        if state not in ("Completed", "Cached"):
            self._progress.console.print(f"[red]{name}: {state}")

    def __enter__(self) -> RichStageBar:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()


@contextmanager
def installed(bar: StageReporter | None) -> Iterator[StageReporter | None]:
    """Install a reporter (or none) for the duration of a run."""
    global _reporter
    previous, _reporter = _reporter, bar
    try:
        yield bar
    finally:
        _reporter = previous
