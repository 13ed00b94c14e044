"""The executor: runs a plan's stage calls side by side, respecting their dependencies and a concurrency
limit per resource class, on the flow's Prefect task runner (threads on one machine, Dask on a cluster).

- A call is submitted once every call it reads has completed; if one of them failed, it is not run
  (state ``NotRun``, reason naming the failed input) and the rest of the run goes on.
- At most ``max_parallel`` calls run at once, and at most ``limits[resource]`` of one resource class
  (``cpu``, ``llm``, ``gpu``). Each task run is also tagged ``synthugc-<resource>``, so a Prefect server's
  tag concurrency limits (``prefect concurrency-limit create synthugc-gpu 1``) apply across workers too.
- Caching and retries are the stages' own (:mod:`flows.caching`): a retried run finds every completed
  stage ``Cached``. A ``Cached`` result whose artifacts are missing or changed is recomputed.
- A call's cache is looked up here before it is submitted: a hit (its result record under the run's result
  storage, its artifacts intact) ends the call ``Cached`` in milliseconds, without a task run; a miss runs the
  task, whose own cache check then finds nothing.
- Calls are submitted in plan order whenever capacity allows, so ``max_parallel=1`` is the sequential run.
- Before the first call runs beside others on this machine's threads, what stages import on first use is imported
  here (:func:`tasks.parallel.import_before_threads`): two threads' first imports of packages that import each
  other can deadlock. Workers of a Dask cluster import it themselves (``--preload tasks.parallel``).
"""

from __future__ import annotations

import base64
import binascii
import json
import pickle
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flows.plan import Plan, StageCall, resolve
from tasks.layout import StageResult
from tasks.parallel import import_before_threads
from tasks.settings import get_settings
from tasks.store import ArtifactStore

if TYPE_CHECKING:
    from prefect.states import State

NOT_RUN = "NotRun"


@dataclass
class Outcome:
    """How one stage call ended."""

    state: str
    seconds: float = 0.0
    result: StageResult | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.result is not None


@dataclass
class Execution:
    """Every call's outcome, in the order the calls ended."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    peak_parallel: int = 0

    @property
    def results(self) -> dict[str, StageResult]:
        return {name: o.result for name, o in self.outcomes.items() if o.result is not None}

    @property
    def failed(self) -> dict[str, str]:
        return {name: o.reason for name, o in self.outcomes.items() if o.result is None}

    @property
    def states(self) -> dict[str, str]:
        return {name: o.state for name, o in self.outcomes.items()}


#: (event, call name, outcome): "started", "finished" (with the outcome), "recompute" (lost cached artifacts)
Listener = Callable[[str, str, Outcome | None], None]


def stage_task_runner() -> Any:
    """The flows' task runner from the settings: a thread pool big enough for the stage concurrency, or a
    DaskTaskRunner on ``SYNTHUGC_DASK_ADDRESS`` (``SYNTHUGC_TASK_RUNNER=dask``) to spread stages over a cluster."""
    settings = get_settings()
    if settings.task_runner == "dask":
        from prefect_dask import DaskTaskRunner

        if settings.dask_address:
            return DaskTaskRunner(address=settings.dask_address)
        return DaskTaskRunner(cluster_kwargs={"processes": False, "n_workers": 1,
                                              "threads_per_worker": settings.stage_concurrency,
                                              "dashboard_address": None})
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=max(4, settings.stage_concurrency))


def failure_reason(state: State) -> str:
    """A failed state's exception in one line."""
    try:
        state.result()
    except Exception as exc:  # the stage's own exception, reported in one line
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
    return state.message or state.name or "failed"


def _intact(store: ArtifactStore, result: StageResult) -> bool:
    return all(store.is_intact(ref) for ref in result.refs())


def read_record(result_dir: Path, key: str) -> Any:
    """The value of the result record ``key`` under ``result_dir`` as a task with ``result_storage=result_dir`` wrote
    it (Prefect 3's record: JSON of its ``metadata``, the serializer named there, and ``result``, the base64 of the
    pickled value), read without importing Prefect; None where there is no record, it expires, or it was written
    another way (the task then decides, reading it as Prefect does)."""
    try:
        record = json.loads((result_dir / key).read_bytes())
        metadata = record["metadata"]
        if metadata.get("expiration") is not None or metadata["serializer"].get("type") != "pickle":
            return None
        return pickle.loads(base64.b64decode(record["result"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError, EOFError, binascii.Error,
            pickle.UnpicklingError):
        return None


def cached_result(call: StageCall, params: Mapping[str, Any], result_dir: Path) -> StageResult | None:
    """The result a completed earlier call with the same cache key left under ``result_dir`` (:func:`read_record`),
    or None: no key function, no record, an expired or unreadable one."""
    key_fn = getattr(call.task, "cache_key_fn", None)
    if key_fn is None:
        return None
    try:
        key = key_fn(None, dict(params))
    except Exception:  # an input that cannot be fingerprinted: the task decides
        return None
    result = read_record(result_dir, key)
    return result if isinstance(result, StageResult) else None


def execute(plan: Plan, *, result_dir: Path, max_parallel: int, limits: Mapping[str, int],
            done: Mapping[str, StageResult] | None = None, listener: Listener | None = None) -> Execution:
    """Run every call of ``plan`` (``done`` holds results of earlier calls it may read) and return how each
    ended. Never raises for a failed stage: the caller decides what a failed run means."""
    from prefect.futures import as_completed

    store = plan.place.store()
    execution = Execution()
    results: dict[str, StageResult] = dict(done or {})
    pending: list[StageCall] = list(plan.calls)
    running: dict[Any, tuple[StageCall, float, bool]] = {}  # future -> (call, started, refreshed)
    busy: dict[str, int] = {}
    notify = listener or (lambda *_: None)
    settings = get_settings()
    stages_run_here = not (settings.task_runner == "dask" and settings.dask_address)  # not on a cluster's workers
    known = {c.name for c in pending} | set(results)
    for call in pending:
        if missing := [n for n in call.needs if n not in known]:
            raise ValueError(f"{call.name} reads {missing[0]}, which the plan does not run")

    def submit(call: StageCall, params: dict[str, Any], refresh: bool = False) -> None:
        if max_parallel > 1 and not running and stages_run_here:  # no stage thread imports yet: import for all
            import_before_threads()
        configured = call.task.with_options(result_storage=result_dir, task_run_name=call.name,
                                            tags=[f"synthugc-{call.resource}"], refresh_cache=refresh or None)
        future = configured.submit(**params)
        running[future] = (call, time.perf_counter(), refresh)
        busy[call.resource] = busy.get(call.resource, 0) + 1
        execution.peak_parallel = max(execution.peak_parallel, len(running))
        if not refresh:
            notify("started", call.name, None)

    def start(call: StageCall, params: dict[str, Any]) -> None:
        """A cache hit ends here; anything else runs as a task (refreshed when the hit's artifacts changed)."""
        started = time.perf_counter()
        hit = cached_result(call, params, result_dir)
        if hit is None:
            submit(call, params)
            return
        notify("started", call.name, None)
        if _intact(store, hit):
            finish(call, Outcome("Cached", time.perf_counter() - started, hit))
        else:
            notify("recompute", call.name, None)  # cached artifacts missing or changed: not trusted
            submit(call, params, refresh=True)

    def finish(call: StageCall, outcome: Outcome) -> None:
        execution.outcomes[call.name] = outcome
        if outcome.result is not None:
            results[call.name] = outcome.result
        notify("finished", call.name, outcome)

    def params_of(call: StageCall) -> dict[str, Any]:
        return {k: resolve(v, results) for k, v in call.params.items()}

    while pending or running:
        ended = set(execution.outcomes) | set(results)
        for call in list(pending):
            if call.finally_ is not None:
                if running or any(c is not call for c in pending):
                    continue
                pending.remove(call)
                start(call, {"place": plan.place, **call.finally_(results, execution.failed)})
                continue
            needs = call.needs
            lost = [n for n in needs if n in execution.outcomes and execution.outcomes[n].result is None]
            if lost:
                pending.remove(call)
                finish(call, Outcome(NOT_RUN, reason=f"not run: input {lost[0]} failed"))
                continue
            if not all(n in ended for n in needs):
                continue
            if len(running) >= max_parallel or busy.get(call.resource, 0) >= limits.get(call.resource, max_parallel):
                continue
            pending.remove(call)
            start(call, params_of(call))
        if not running:
            continue
        future = next(as_completed(list(running)))
        call, started, refreshed = running.pop(future)
        busy[call.resource] -= 1
        future.wait()
        state: State = future.state
        if state.is_completed():
            result = state.result()
            if state.name == "Cached" and not refreshed and not _intact(store, result):
                notify("recompute", call.name, None)  # cached artifacts missing or changed: not trusted
                submit(call, params_of(call) if call.finally_ is None else
                       {"place": plan.place, **call.finally_(results, execution.failed)}, refresh=True)
                continue
            finish(call, Outcome(state.name or "Completed", time.perf_counter() - started, result))
        else:
            finish(call, Outcome(state.name or state.type.value, time.perf_counter() - started,
                                 reason=failure_reason(state)))
    return execution


def lookup(plan: Plan, *, result_dir: Path, done: Mapping[str, StageResult] | None = None) -> Execution | None:
    """Every call of ``plan`` ended ``Cached`` from its cache alone (:func:`cached_result`, artifacts intact), in plan
    order, without Prefect; None at the first call that would run."""
    store = plan.place.store()
    execution = Execution()
    results: dict[str, StageResult] = dict(done or {})
    for call in plan.calls:
        started = time.perf_counter()
        params = ({"place": plan.place, **call.finally_(results, {})} if call.finally_ is not None else
                  {k: resolve(v, results) for k, v in call.params.items()})
        hit = cached_result(call, params, result_dir)
        if hit is None or not _intact(store, hit):
            return None
        execution.outcomes[call.name] = Outcome("Cached", time.perf_counter() - started, hit)
        results[call.name] = hit
    return execution
