"""The artifact store: atomic parquet writes, fingerprints, fsspec roots, manifest, code versions."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from tasks.errors import UnsafePath
from tasks.layout import STAGES
from tasks.store import (
    ArtifactStore,
    cache_key,
    code_version,
    fingerprint_config,
    fingerprint_file,
    write_manifest,
)


def _frame(n: int = 5) -> pd.DataFrame:
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)]})


def test_write_table_roundtrip_and_fingerprint_is_sha256_of_bytes(tmp_path):
    store = ArtifactStore(tmp_path)
    ref = store.write_table(_frame(), "exp", "stage", "out.parquet")
    assert ref.rows == 5
    assert ref.fingerprint == hashlib.sha256(Path(ref.path).read_bytes()).hexdigest()
    assert ref.fingerprint == fingerprint_file(ref.path)
    pd.testing.assert_frame_equal(store.read_table(ref), _frame())
    assert store.is_intact(ref)
    assert store.list_partials("exp") == []


def test_same_content_same_fingerprint_changed_content_new_one(tmp_path):
    store = ArtifactStore(tmp_path)
    a = store.write_table(_frame(), "a.parquet")
    b = store.write_table(_frame(), "b.parquet")
    c = store.write_table(_frame(6), "c.parquet")
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_rewritten_file_is_detected(tmp_path):
    store = ArtifactStore(tmp_path)
    ref = store.write_table(_frame(), "x.parquet")
    _frame(3).to_parquet(ref.path)
    assert not store.is_intact(ref)


def test_failed_write_leaves_no_partial_and_keeps_previous(tmp_path):
    store = ArtifactStore(tmp_path)
    ref = store.write_table(_frame(), "exp", "x.parquet")

    class Boom:
        def __getattr__(self, name):
            raise RuntimeError("serialisation failed")

    bad = pd.DataFrame({"doc_id": ["a"], "text": [Boom()]})
    with pytest.raises(Exception):  # noqa: B017 - pyarrow raises its own type for unconvertible objects
        store.write_table(bad, "exp", "x.parquet")
    assert store.list_partials("exp") == []
    assert store.is_intact(ref)


def test_interrupted_atomic_write_leaves_nothing_under_final_name(tmp_path, monkeypatch):
    store = ArtifactStore(tmp_path)

    def crash(*_args, **_kwargs):
        raise OSError("disk went away during rename")

    monkeypatch.setattr(store.fs, "mv", crash)
    with pytest.raises(OSError, match="disk went away"):
        store.write_table(_frame(), "exp", "y.parquet")
    assert not (tmp_path / "exp" / "y.parquet").exists()
    assert store.list_partials("exp") == []


def test_fsspec_memory_root():
    store = ArtifactStore("memory://synthugc-test-root")
    ref = store.write_table(_frame(), "exp", "m.parquet")
    assert ref.path.startswith("/synthugc-test-root/exp/")
    pd.testing.assert_frame_equal(store.read_table(ref), _frame())
    assert store.is_intact(ref)


def test_config_fingerprint_ignores_key_order():
    assert fingerprint_config({"a": 1, "b": [1, 2]}) == fingerprint_config({"b": [1, 2], "a": 1})
    assert fingerprint_config({"a": 1}) != fingerprint_config({"a": 2})


def test_cache_key_depends_on_every_part(tmp_path):
    store = ArtifactStore(tmp_path)
    ref = store.write_table(_frame(), "k.parquet")
    other = store.write_table(_frame(7), "k2.parquet")
    base = cache_key("s", [ref], "cfg", "code")
    assert base == cache_key("s", [ref], "cfg", "code")
    assert len({base, cache_key("s", [other], "cfg", "code"), cache_key("s", [ref], "cfg2", "code"),
                cache_key("s", [ref], "cfg", "code2"), cache_key("t", [ref], "cfg", "code")}) == 5


def test_code_version_covers_helpers():
    whole = code_version("tasks/corpus")
    assert whole != code_version("tasks/corpus/schema.py")
    assert whole == code_version("tasks/corpus")
    with pytest.raises(FileNotFoundError):
        code_version("tasks/no_such_area")


def test_code_version_covers_subpackages_and_templates(tmp_path, monkeypatch):
    """A subpackage's module or a page template changing changes the area's version; compiled files do not."""
    import tasks.store as store

    area = tmp_path / "tasks" / "report"
    files = {"__init__.py": "", "syntax/__init__.py": "", "syntax/distance.py": "x = 1\n",
             "templates/page.html.j2": "<p>{{ x }}</p>\n", "templates/page.css": "p{}\n",
             "templates/page.js": "var x;\n", "__pycache__/render.cpython-311.pyc": "compiled"}
    for name, text in files.items():
        (area / name).parent.mkdir(parents=True, exist_ok=True)
        (area / name).write_text(text)
    monkeypatch.setattr(store, "_REPO_ROOT", tmp_path)
    seen = {code_version("tasks/report")}
    for name in ("syntax/distance.py", "templates/page.html.j2", "templates/page.css", "templates/page.js"):
        (area / name).write_text((area / name).read_text() + "// changed\n")
        seen.add(code_version("tasks/report"))
    assert len(seen) == 5
    (area / "__pycache__/render.cpython-311.pyc").write_text("recompiled")
    assert code_version("tasks/report") in seen
    assert code_version("tasks/report/templates")  # an area of templates alone is found


def test_manifest_lists_config_versions_models_signatures_artifacts(tmp_path):
    store = ArtifactStore(tmp_path)
    ref = store.write_table(_frame(), "exp", "a.parquet")
    stage = {"state": "Completed", "seconds": 0.1, "reason": "",
             "result": {"kind": "ingest", "keys": {}, "info": {}, "outputs": {"corpus": asdict(ref)}}}
    m = write_manifest(store, "exp", config={"seed": 1}, models={"token_encoder": "minilm"},
                       signatures={"bleu_divergence": "metric:bleu"}, stages={"ingest": stage})
    data = json.loads(store.read_text(m))
    assert data["config"] == {"seed": 1}
    assert data["versions"]["pandas"] == pd.__version__
    assert data["models"]["token_encoder"] == "minilm"
    assert data["artifacts"]["ingest/corpus"]["fingerprint"] == ref.fingerprint
    assert data["stages"]["ingest"]["state"] == "Completed"


@pytest.mark.parametrize("parts", [("exp", "generate", "../../../../escaped", "shard.parquet"), ("..", "x.parquet"),
                                   ("exp/../..", "x.parquet"), ("exp", ".", "x.parquet")])
def test_path_refuses_to_leave_the_root(tmp_path, parts):
    store = ArtifactStore(tmp_path / "runs")
    with pytest.raises(UnsafePath, match="would leave the storage root"):
        store.write_table(_frame(), *parts)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_path_joins_segments_under_the_root(tmp_path):
    store = ArtifactStore(tmp_path)
    assert store.path("exp", "/generate/", "a/b.parquet") == f"{tmp_path.resolve()}/exp/generate/a/b.parquet"


def test_remove_partials_deletes_only_temporary_files(tmp_path):
    store = ArtifactStore(tmp_path)
    kept = store.write_table(_frame(), "exp", "generate", "s", "shard-00000.parquet")
    stale = [tmp_path / "exp" / "generate" / "s" / ".tmp-abc-shard-00001.parquet", tmp_path / "exp" / ".tmp-def-m.json"]
    for path in stale:
        path.write_bytes(b"half")
    other = tmp_path / "other" / ".tmp-xyz-not-this-run.parquet"
    other.parent.mkdir()
    other.write_bytes(b"half")
    assert sorted(store.remove_partials("exp")) == sorted(str(p) for p in stale)
    assert store.list_partials("exp") == [] and store.is_intact(kept) and other.exists()
    assert store.remove_partials("exp") == [] and store.remove_partials("missing") == []


def _link(link: Path, target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)
    return link


@pytest.mark.parametrize(("kind", "output"), [(k.name, o.name) for k in STAGES.values() if k.in_run for o in k.outputs])
def test_no_declared_artifact_is_written_through_a_link_out_of_the_root(tmp_path, kind, output):
    """Every output of every stage (the folder it goes to replaced by a link to elsewhere, as after
    `rm -rf runs/qa/metrics; ln -s /elsewhere runs/qa/metrics`): refused naming the link and its target,
    nothing written there."""
    store = ArtifactStore(tmp_path / "runs")
    keys = {"label": "stymask", "shard": 0, "setting": "substitution", "fraction": 0.5, "seed": 0}
    relative = STAGES[kind].relative_path(output, keys)
    first = relative.split("/")[0] if "/" in relative else None
    link = tmp_path / "runs" / "qa" / first if first else tmp_path / "runs" / "qa"
    elsewhere = tmp_path / "elsewhere"
    _link(link, elsewhere)
    with pytest.raises(UnsafePath) as info:
        store.write_text("x", "qa", relative)
    assert str(info.value).startswith(f"{link} is a symlink to {elsewhere.resolve()}, outside the storage root "
                                      f"{(tmp_path / 'runs').resolve()}")
    assert list(elsewhere.rglob("*")) == []


def test_a_linked_file_out_of_the_root_is_refused_for_reading_and_checking(tmp_path):
    store = ArtifactStore(tmp_path / "runs")
    ref = store.write_table(_frame(), "qa", "metrics", "x.parquet")
    outside = tmp_path / "outside.parquet"
    Path(ref.path).rename(outside)
    Path(ref.path).symlink_to(outside)
    for read in (store.read_table, store.is_intact):
        with pytest.raises(UnsafePath, match=f"{ref.path} is a symlink to {outside}"):
            read(ref)
    with pytest.raises(UnsafePath, match=f"{ref.path} is a symlink to {outside}"):
        store.check_tree("qa")


def test_links_that_stay_inside_the_root_are_followed(tmp_path):
    store = ArtifactStore(tmp_path / "runs")
    _link(tmp_path / "runs" / "qa" / "metrics", tmp_path / "runs" / "archive" / "metrics")
    ref = store.write_table(_frame(), "qa", "metrics", "x.parquet")
    store.check_tree("qa")
    assert store.is_intact(ref) and (tmp_path / "runs" / "archive" / "metrics" / "x.parquet").is_file()


def test_a_root_that_is_a_link_is_allowed_and_named_by_its_real_location(tmp_path):
    real = tmp_path / "disk" / "runs"
    store = ArtifactStore(_link(tmp_path / "runs", real))
    ref = store.write_table(_frame(), "qa", "metrics", "x.parquet")
    assert store.real_root == str(real.resolve())
    assert ref.path == f"{real.resolve()}/qa/metrics/x.parquet" and store.is_intact(ref)
    store.check_tree("qa")


def test_a_frame_fingerprint_changes_with_row_order_and_values_not_with_the_index():
    """What is computed from a table in its order (protect's certificate, linkability, utility) is keyed by it."""
    import pandas as pd

    from tasks.store import fingerprint_frame

    table = pd.DataFrame({"text": ["a b", "c d", "e f"], "author_id": ["u1", "u1", "u2"]})
    assert fingerprint_frame(table) == fingerprint_frame(table.set_axis([7, 8, 9]))
    assert fingerprint_frame(table) != fingerprint_frame(table.iloc[[1, 0, 2]].reset_index(drop=True))
    assert fingerprint_frame(table) != fingerprint_frame(table.assign(text=["a b", "c d", "e g"]))
