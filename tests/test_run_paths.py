"""The paths a stage keeps things in come from its run's plan (tasks.settings.planned_paths, entered by every
stage from its RunPlace), not from the settings, working directory or HOME of the process that runs it: the
attacks, the model loaders, the LLM request cache, threads a stage starts and worker processes a fan-out prepares.
tests/test_cluster.py runs the same on a real `dask worker` started elsewhere."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from flows.caching import stage_cache_key
from flows.stages import RunPlace, StageTask
from tasks.models.loaders import models_cache_dir
from tasks.models.pii import langid_arrays
from tasks.parallel import dask_client, prepare_workers
from tasks.privacy.attacks import build_attack
from tasks.settings import planned_paths, run_cache_dir, run_llm_cache


@pytest.fixture()
def elsewhere(tmp_path, monkeypatch) -> Path:
    """This process's own settings: a relative cache folder and an LLM cache, in a working directory of its own."""
    folder = tmp_path / "process-folder"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", ".cache/own")
    monkeypatch.setenv("SYNTHUGC_LLM_CACHE", "own-llm.sqlite")
    return folder


def test_outside_a_stage_the_process_settings_made_absolute(elsewhere):
    assert run_cache_dir() == elsewhere / ".cache" / "own"
    assert run_llm_cache() == elsewhere / "own-llm.sqlite"
    assert models_cache_dir() == elsewhere / ".cache" / "own" / "models"


def test_inside_a_stage_the_plans_paths_also_in_threads_it_starts(elsewhere, tmp_path):
    planned = tmp_path / "planned"
    with planned_paths(planned):
        assert run_cache_dir() == planned and run_llm_cache() is None  # the plan had no request cache
        with ThreadPoolExecutor(1) as pool:  # a pool's thread does not inherit the context
            assert pool.submit(run_cache_dir).result() == planned
        embedding, classifier = build_attack("embedding"), build_attack("classifier")
        assert models_cache_dir() == planned / "models"
    assert embedding.cache_dir == planned and classifier.cache_dir == planned  # kept for later calls
    assert run_cache_dir() == elsewhere / ".cache" / "own"
    with pytest.raises(ValueError, match="absolute"), planned_paths("relative/cache"):
        pass


def test_a_stage_runs_in_its_places_paths_however_it_is_called(elsewhere, tmp_path):
    def probe(place: RunPlace, label: str) -> tuple[Path, Path | None]:
        return run_cache_dir(), run_llm_cache()

    place = RunPlace(root=str(tmp_path / "runs"), experiment="e", cache_dir=str(tmp_path / "planned"),
                     llm_cache=str(tmp_path / "llm.sqlite"))
    stage = StageTask("report", probe)
    expected = (tmp_path / "planned", tmp_path / "llm.sqlite")
    assert stage.fn(place=place, label="x") == expected and stage.fn(place, "x") == expected
    assert run_cache_dir() == elsewhere / ".cache" / "own"
    # where the request cache is changes no result: not part of the cache key; the cache folder is
    assert stage_cache_key("report", {"place": place}) == stage_cache_key(
        "report", {"place": RunPlace(place.root, "e", place.cache_dir)})
    assert stage_cache_key("report", {"place": place}) != stage_cache_key(
        "report", {"place": RunPlace(place.root, "e", str(tmp_path / "other"))})


def test_worker_processes_a_fan_out_prepares_keep_what_they_derive_in_the_runs_folder(elsewhere, tmp_path):
    planned = tmp_path / "planned"
    with dask_client(n_workers=1, threads_per_worker=1, processes=True) as client, planned_paths(planned):
        prepare_workers(client, langid_arrays)  # writes langid's arrays under <cache>/models
        seen = client.submit(lambda: str(run_cache_dir()), pure=False).result()
    assert list((planned / "models").glob("langid-*.npz"))
    assert not (elsewhere / ".cache").exists()
    assert seen == str(elsewhere / ".cache" / "own")  # after the preparation, the process's own again
