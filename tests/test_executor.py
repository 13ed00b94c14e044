"""The plan and the executor: stages run side by side within their dependencies and per-resource limits,
give the same artifacts as the sequential run, and every file a stage writes is in the manifest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.config import parse_config
from flows.executor import NOT_RUN, execute, read_record
from flows.experiment import run_experiment
from flows.plan import Plan, Use, check_model_roles
from flows.stages import RunPlace
from tasks.errors import ConfigError
from tasks.layout import STAGES, Output, StageKind, StageResult
from tasks.models.simulated_server import fixed_delay_server
from tasks.store import fingerprint_file

CLI = Path(sys.executable).parent / "synthugc"
TOY = StageKind("toy", "toy/{label}", ("label",), (Output("times", "times.parquet"),))


@task(cache_policy=NO_CACHE, persist_result=False)
def toy(place: RunPlace, label: str, delay: float, inputs: list, fail: bool = False) -> StageResult:
    """A stage that sleeps ``delay`` seconds and records when it ran (and what it read)."""
    started = time.time()
    time.sleep(delay)
    if fail:
        raise RuntimeError(f"{label} fails on purpose")
    out = place.writer("toy", label=label)
    out.table("times", pd.DataFrame({"start": [started], "end": [time.time()],
                                     "inputs": [",".join(r.keys["label"] for r in inputs)]}))
    return out.result()


@pytest.fixture()
def toy_plan(tmp_path, monkeypatch):
    monkeypatch.setitem(STAGES, "toy", TOY)
    return Plan(RunPlace(root=str(tmp_path / "runs"), experiment="x", cache_dir=str(tmp_path / "cache")))


def _intervals(plan: Plan, labels: list[str]) -> dict[str, tuple[float, float]]:
    out = {}
    for label in labels:
        row = pd.read_parquet(Path(plan.place.root) / "x" / "toy" / label / "times.parquet").iloc[0]
        out[label] = (row["start"], row["end"])
    return out


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def test_executor_runs_side_by_side_within_limits_and_dependencies(toy_plan, tmp_path):
    plan = toy_plan
    for i in range(6):
        plan.add("toy", toy, resource="llm", label=f"llm{i}", delay=0.6, inputs=[])
    plan.add("toy", toy, resource="cpu", label="cpu0", delay=0.6, inputs=[])
    plan.add("toy", toy, label="after", delay=0.0, inputs=[Use("toy[llm0]"), Use("toy[cpu0]")])

    @flow
    def run():
        return execute(plan, result_dir=tmp_path / "results", max_parallel=4, limits={"llm": 2, "cpu": 2})

    execution = run()
    assert set(execution.states.values()) == {"Completed"}
    spans = _intervals(plan, [f"llm{i}" for i in range(6)] + ["cpu0", "after"])
    assert _max_overlap([spans[f"llm{i}"] for i in range(6)]) == 2  # side by side, never more than the limit
    assert execution.peak_parallel == 3  # two llm stages and the cpu one
    assert spans["after"][0] >= max(spans["llm0"][1], spans["cpu0"][1])  # ran after what it reads
    after = pd.read_parquet(Path(plan.place.root) / "x" / "toy" / "after" / "times.parquet")
    assert after["inputs"].iloc[0] == "llm0,cpu0"


def test_sequential_executor_runs_one_stage_at_a_time(toy_plan, tmp_path):
    plan = toy_plan
    for i in range(3):
        plan.add("toy", toy, resource="llm", label=f"s{i}", delay=0.3, inputs=[])

    @flow
    def run():
        return execute(plan, result_dir=tmp_path / "results", max_parallel=1, limits={"llm": 4})

    assert run().peak_parallel == 1
    spans = _intervals(plan, ["s0", "s1", "s2"])
    assert _max_overlap(list(spans.values())) == 1
    assert spans["s0"][1] <= spans["s1"][0] <= spans["s2"][0]  # in plan order


def test_failed_stage_skips_only_what_reads_it(toy_plan, tmp_path):
    plan = toy_plan
    plan.add("toy", toy, label="bad", delay=0.0, inputs=[], fail=True)
    plan.add("toy", toy, label="good", delay=0.0, inputs=[])
    plan.add("toy", toy, label="reads-bad", delay=0.0, inputs=[Use("toy[bad]")])
    plan.add("toy", toy, label="reads-good", delay=0.0, inputs=[Use("toy[good]")])

    @flow
    def run():
        return execute(plan, result_dir=tmp_path / "results", max_parallel=2, limits={})

    execution = run()
    assert execution.states["toy[bad]"] == "Failed"
    assert "fails on purpose" in execution.failed["toy[bad]"]
    assert execution.states["toy[reads-bad]"] == NOT_RUN
    assert execution.failed["toy[reads-bad]"] == "not run: input toy[bad] failed"
    assert execution.states["toy[good]"] == execution.states["toy[reads-good]"] == "Completed"


def test_a_plan_reading_a_stage_it_does_not_run_is_refused(toy_plan, tmp_path):
    toy_plan.add("toy", toy, label="orphan", delay=0.0, inputs=[Use("toy[missing]")])
    with pytest.raises(ValueError, match="reads toy\\[missing\\]"):
        execute(toy_plan, result_dir=tmp_path / "results", max_parallel=2, limits={})


def _corpus(path: Path, n: int = 30) -> Path:
    texts = [f"Honestly, I think we really must fix road {i} before winter, said speaker {i % 5}!" for i in range(n)]
    pd.DataFrame({"doc_id": [f"d{i:03d}" for i in range(n)], "text": texts, "author_id": [f"a{i % 5}" for i in range(n)],
                  "group_id": [f"a{i % 5}" for i in range(n)]}).to_parquet(path)
    return path


def _config(corpus: Path, root: Path, experiment: str, strategies: list[dict], **extra) -> dict:
    return {"experiment": experiment, "seed": 3, "storage_root": str(root), "data": {"path": str(corpus)},
            "generate": {"shard_size": 10, "strategies": strategies},
            "metrics": {"names": ["bleu_divergence", "char_jsd", "pos_jsd"]},
            "privacy": {"profiling": {"attributes": []}, "membership": {"enabled": False}},
            "utility": {"enabled": False}, **extra}


@pytest.fixture()
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@flow(name="executor-test")
def _run(config: dict, parallel: int, families: tuple[str, ...] = ("metrics", "privacy", "report")):
    return run_experiment(parse_config(config), families=families, max_parallel=parallel)


@pytest.mark.slow
def test_concurrent_run_gives_byte_identical_artifacts_and_manifest_lists_every_file(isolated):
    corpus = _corpus(isolated / "corpus.parquet")
    strategies = [{"name": "stymask"}, {"name": "syntr"}]
    seq = _run(_config(corpus, isolated / "runs", "seq", strategies), 1)
    con = _run(_config(corpus, isolated / "runs", "con", strategies), 4)
    assert seq.peak_parallel == 1 and con.peak_parallel > 1
    assert set(con.stages) == set(seq.stages)
    for run_dir in ("seq", "con"):
        manifest = json.loads((isolated / "runs" / run_dir / "manifest.json").read_text())
        listed = {ref["path"]: ref["fingerprint"] for ref in manifest["artifacts"].values()}
        on_disk = {str(p) for p in (isolated / "runs" / run_dir).rglob("*") if p.is_file()
                   and p.name != "manifest.json"}
        assert on_disk <= set(listed), on_disk - set(listed)  # every file the run wrote is in its manifest
        assert all(fingerprint_file(p) == f for p, f in listed.items())
        for name, stage in manifest["stages"].items():  # each stage lists what it wrote
            assert stage["state"] == "Completed"
            assert all(ref["path"] in listed for ref in stage["result"]["outputs"].values()), name
    compared = 0
    for path in (isolated / "runs" / "seq").rglob("*.parquet"):
        relative = path.relative_to(isolated / "runs" / "seq")
        if relative.parts[0] == "report":
            continue  # the report's tables name their experiment
        assert (isolated / "runs" / "con" / relative).read_bytes() == path.read_bytes(), relative
        compared += 1
    assert compared >= 10


@pytest.mark.slow
def test_changing_the_llm_model_setting_recomputes_generation(isolated, monkeypatch):
    corpus = _corpus(isolated / "corpus.parquet", n=12)
    config = _config(corpus, isolated / "runs", "llm", [{"name": "llm", "params": {"backend": {"max_retries": 0}}},
                                                         {"name": "stymask"}])
    seen: list[str] = []
    with fixed_delay_server(0.0, seen) as endpoint:
        monkeypatch.setenv("SYNTHUGC_LLM_ENDPOINT_LLM", endpoint)
        monkeypatch.setenv("SYNTHUGC_LLM_MODEL_LLM", "served-a")
        first = _run(config, 4, families=())
        monkeypatch.setenv("SYNTHUGC_LLM_MODEL_LLM", "served-b")
        second = _run(config, 4, families=())
        third = _run({**config, "models": {"llm": "served-c"}}, 4, families=())  # the config's role mapping wins
    assert set(first.stages.values()) == {"Completed"}
    assert {k: v for k, v in second.stages.items() if v != "Cached"} == {
        "generate[llm][0]": "Completed", "generate[llm][1]": "Completed"}
    assert third.stages["generate[llm][0]"] == "Completed" and third.stages["generate[stymask][0]"] == "Cached"
    assert set(seen) == {"served-a", "served-b", "served-c"}


def test_a_model_role_no_stage_reads_is_rejected_with_its_key_path(tmp_path):
    cfg = parse_config(_config(tmp_path / "c.parquet", tmp_path, "x", [{"name": "stymask"}],
                               models={"translator": "opus-mt"}))
    with pytest.raises(ConfigError, match=r"^models\.translator: a run does not read this role"):
        check_model_roles(cfg)


def test_serve_with_no_names_builds_every_deployment():
    from flows.deployments import DEPLOYMENTS, runner_deployments

    built = runner_deployments(None)
    assert [d.name for d in built] == [d.name for d in DEPLOYMENTS]
    assert {d.name: d.flow_name for d in built} == {d.name: d.flow_name for d in DEPLOYMENTS}


@pytest.mark.slow
def test_cli_prints_one_line_per_stage_and_a_summary(isolated):
    corpus = _corpus(isolated / "corpus.parquet", n=12)
    config = isolated / "c.json"
    # model-free metrics: what is checked here is the CLI's output, not a spaCy or encoder load in a fresh process
    config.write_text(json.dumps(_config(corpus, isolated / "runs", "cli", [{"name": "stymask"}],
                                         metrics={"names": ["bleu_divergence", "char_jsd"]})))
    env = {**os.environ, "SYNTHUGC_CACHE_DIR": str(isolated / "cache")}
    proc = subprocess.run([str(CLI), "run", str(config)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    stage_lines = {line.split()[0]: line.split()[1] for line in err if line.rstrip().endswith(" s")}
    assert stage_lines == dict.fromkeys((
        "ingest", "split", "generate[stymask][0]", "generate[stymask][1]", "metrics[stymask]", "privacy[stymask]",
        "index-histories[minhash]", "reidentify[stymask]", "report"), "Completed")
    assert any(line.startswith("all ") and "wall" in line for line in err)  # the summary table
    assert "Traceback" not in proc.stderr and "distributed." not in proc.stderr and "INFO" not in proc.stderr
    assert max(len(line) for line in err) < 200
    # a rerun with every stage cached reads them without Prefect (not even imported), and says so
    cached = subprocess.run([sys.executable, "-X", "importtime", str(CLI), "run", str(config)], capture_output=True,
                            text=True, env=env, timeout=600)
    assert cached.returncode == 0, cached.stderr
    assert {line.split()[0]: line.split()[1] for line in cached.stderr.splitlines()
            if line.rstrip().endswith(" s")} == dict.fromkeys(stage_lines, "Cached")
    assert "every stage is cached with its artifacts intact: nothing to run, no Prefect flow run started" in cached.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in cached.stderr.splitlines() if line.startswith("import time:")}
    assert "pandas" in imported and not {m for m in imported if m.split(".")[0] == "prefect"}
    # the records it read are Prefect's, read as Prefect reads them
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore

    records = isolated / "cache" / "prefect-results"
    prefects = ResultStore(result_storage=LocalFileSystem(basepath=str(records)))
    keys = [p.name for p in records.iterdir()]
    assert len(keys) == len(stage_lines)
    for key in keys:
        ours = read_record(records, key)
        assert isinstance(ours, StageResult) and ours.to_json() == prefects.read(key).result.to_json()
    assert read_record(records, "no-such-key") is None
    # --verbose adds Prefect's own log lines to a run that computes something (its report, deleted, is recomputed)
    shutil.rmtree(isolated / "runs" / "cli" / "report")
    verbose = subprocess.run([str(CLI), "run", str(config), "--verbose"], capture_output=True, text=True, env=env,
                             timeout=600)
    assert verbose.returncode == 0 and "Finished in state Completed" in verbose.stderr
    assert "report: Completed" in verbose.stderr and "metrics[stymask]: Cached" in verbose.stderr


@pytest.mark.slow
def test_the_same_plan_runs_on_a_dask_task_runner(toy_plan, tmp_path, monkeypatch):
    from flows.executor import stage_task_runner

    monkeypatch.setenv("SYNTHUGC_TASK_RUNNER", "dask")
    monkeypatch.setenv("SYNTHUGC_STAGE_CONCURRENCY", "3")
    plan = toy_plan
    for i in range(3):
        plan.add("toy", toy, resource="llm", label=f"d{i}", delay=0.5, inputs=[])
    plan.add("toy", toy, label="last", delay=0.0, inputs=[Use(f"toy[d{i}]") for i in range(3)])

    @flow(task_runner=stage_task_runner())
    def run():
        return execute(plan, result_dir=tmp_path / "results", max_parallel=3, limits={"llm": 3})

    execution = run()
    assert set(execution.states.values()) == {"Completed"}
    spans = _intervals(plan, ["d0", "d1", "d2", "last"])
    assert _max_overlap([spans[f"d{i}"] for i in range(3)]) >= 2  # side by side on the Dask workers' threads
    assert pd.read_parquet(Path(plan.place.root) / "x" / "toy" / "last" / "times.parquet")["inputs"].iloc[0] == "d0,d1,d2"


def test_report_cache_key_does_not_depend_on_the_order_stages_finished(tmp_path):
    """Side by side, stages finish in a different order on every run; the report's inputs (and so its
    cache key) must not, or a fully cached rerun recomputes the report."""
    from flows.caching import stage_cache_key
    from flows.plan import report_params
    from tasks.store import ArtifactRef

    cfg = parse_config(_config(tmp_path / "c.parquet", tmp_path, "x", [{"name": "stymask"}, {"name": "syntr"}]))

    def result(kind: str, label: str, output: str) -> StageResult:
        return StageResult(kind, {"label": label} if label else {},
                           {output: ArtifactRef(str(tmp_path / kind / label / f"{output}.parquet"), kind + label, 3)})

    ingested = result("ingest", "", "failures")
    stages = [result("split", "", "corpus"), result("metrics", "stymask", "scores"),
              result("metrics", "syntr", "scores"), result("privacy", "syntr", "scores")]
    forward = {r.name: r for r in stages}
    backward = {r.name: r for r in reversed(stages)}
    failed = {"generate[a][0]": "boom", "generate[b][0]": "bang"}
    keys = {stage_cache_key("report", report_params(cfg, done, dict(sorted(failed.items(), reverse=reverse)),
                                                    ingested, []))
            for done, reverse in ((forward, False), (backward, True))}
    assert len(keys) == 1
    changed = {**forward, "metrics[syntr]": result("metrics", "syntr", "other")}
    assert stage_cache_key("report", report_params(cfg, changed, failed, ingested, [])) not in keys
