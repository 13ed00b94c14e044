"""The run layout: every stage's outputs named once, like Prefect assets.

A run directory is ``<storage_root>/<experiment>``. Each stage kind declares the folder it writes to, the
keys that tell one call from another (a strategy label, a shard, a utility setting ...) and its outputs.
Stages write through a :class:`StageWriter` (it refuses an undeclared output and one that would leave the
run folder) and return a :class:`StageResult` holding every file they wrote; the manifest is those results
serialised, and the report, ``synthugc report RUN_DIR`` and the UI's per-stage artifacts read them through
:class:`RunLayout` instead of parsing file or stage names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.scores import TABLES, validate_scores
from tasks.store import ArtifactRef, ArtifactStore

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Output:
    """One file a stage writes: its name in the stage result and its file name (a template over the keys)."""

    name: str
    file: str
    optional: bool = False  # written only in some configurations (e.g. the report's utility tables)
    table: str | None = None  # the declared score table (tasks.scores.TABLES) it is written and checked as


@dataclass(frozen=True)
class StageKind:
    """A kind of stage: its folder under the run (a template over ``keys``), its keys and its outputs."""

    name: str
    folder: str
    keys: tuple[str, ...]
    outputs: tuple[Output, ...]
    in_run: bool = True  # False: written outside the run folder (the shared cache of history indexes)

    def output(self, name: str) -> Output:
        for out in self.outputs:
            if out.name == name:
                return out
        raise KeyError(f"stage {self.name!r} declares no output {name!r}; it has "
                       f"{', '.join(o.name for o in self.outputs)}")

    def display(self, keys: Mapping[str, Any]) -> str:
        """The stage call's name in logs, the UI and the manifest, e.g. ``generate[stymask][0]``."""
        return self.name + "".join(f"[{_display_key(k, keys[k])}]" for k in self.keys)

    def relative_path(self, output: str, keys: Mapping[str, Any], *, private: bool = False) -> str:
        """Where an output lies under the run folder (``metrics/stymask/sample_scores.parquet``); ``private``:
        under :data:`PRIVATE_FOLDER` (``private/ingest/corpus.parquet``)."""
        values = dict(keys)
        if "fraction" in values:
            values["pct"] = round(100 * float(values["fraction"]))
        parts = [p for p in self.folder.format(**values).split("/") if p]
        if private and parts[:1] != [PRIVATE_FOLDER]:
            parts = [PRIVATE_FOLDER, *parts]
        return "/".join([*parts, self.output(output).file.format(**values)])


def _display_key(name: str, value: Any) -> str:
    if name == "fraction":
        return f"{round(100 * float(value))}%"
    if name == "seed":
        return f"seed {value}"
    return str(value)


_TABLE = ".parquet"

#: The ``strategy`` label of the protect stage's output: it joins the run as one more strategy (the report and
#: ``release`` name it by this label).
PROTECT_LABEL = "protect"
#: The run's folder for artifacts holding raw input text when pseudonymisation is configured (the ingested and
#: split corpus, the outputs of strategies that rewrite the original texts) and for the pseudonym mapping:
#: the report never shows their texts. Runs without pseudonymisation write those stages in their usual folders.
PRIVATE_FOLDER = "private"

#: Every stage kind of the experiment flow, in pipeline order.
STAGES: dict[str, StageKind] = {kind.name: kind for kind in (
    StageKind("ingest", "ingest", (), (Output("corpus", "corpus.parquet"), Output("failures", "failures.parquet"))),
    StageKind("split", "split", (), (Output("corpus", "corpus.parquet"),)),
    StageKind("pseudonymize", f"{PRIVATE_FOLDER}/pseudonymize", (), (  # never shown by the report
        Output("corpus", "corpus.parquet"), Output("mapping", "mapping.parquet"))),
    StageKind("index-histories", "history-indexes/{attack}", ("attack",), (Output("index", "{fingerprint}.parquet"),),
              in_run=False),
    StageKind("generate", "generate/{label}", ("label", "shard"), (Output("shard", "shard-{shard:05d}.parquet"),)),
    StageKind("protect", "generate/protect", (), (  # the protected output joins the run as the strategy "protect"
        Output("shard", "protected.parquet"), Output("rounds", "rounds.parquet"),
        Output("failures", "failures.parquet"), Output("summary", "protect.json"),
        Output("frontier", "frontier.parquet"))),
    StageKind("metrics", "metrics/{label}", ("label",), (
        Output("sample_scores", "sample_scores.parquet", table="sample_scores"),
        Output("distribution_scores", "distribution_scores.parquet", table="scores"),
        Output("distributions", "distributions.parquet", table="distributions"))),
    StageKind("metaeval", "metaeval", (), (
        Output("summary", "summary.parquet", table="metaeval_summary"),
        Output("rows", "rows.parquet", table="metaeval_rows"),
        Output("metric_pair_correlations", "metric_pair_correlations.parquet", table="metric_correlations"))),
    StageKind("privacy", "privacy/{label}", ("label",), (
        Output("profiling", "profiling.parquet"), Output("top_words", "top_words.parquet"),
        Output("word_bins", "word_bins.parquet"), Output("membership", "membership.parquet"),
        Output("scores", "privacy_scores.parquet", table="scores"))),
    StageKind("reidentify", "privacy/{label}", ("label",), (
        Output("per_timeline", "reidentification.parquet"), Output("scores", "reid_scores.parquet", table="scores"))),
    StageKind("llm-profile", "privacy/{label}", ("label",), (
        Output("predictions", "llm_profiling_predictions.parquet"), Output("scores", "llm_profiling_scores.parquet", table="scores"))),
    StageKind("audit-dp", "privacy/{label}", ("label",), (Output("audit", "dp_audit.parquet"),)),
    StageKind("utility", "utility/{label}", ("label", "setting", "fraction", "seed"), (
        Output("run", "{setting}-{pct:03d}pct-seed{seed}.parquet", table="utility_runs"),
        Output("predictions", "predictions/{setting}-{pct:03d}pct-seed{seed}.parquet", optional=True,
               table="utility_predictions"))),
    StageKind("report", "", (), (
        Output("markdown", "report.md"), Output("html", "report.html"),
        Output("scores", "report/scores.parquet", table="scores"),
        Output("utility_runs", "report/utility_runs.parquet", optional=True, table="utility_runs"),
        Output("utility_scores", "report/utility_scores.parquet", optional=True, table="scores"),
        Output("strategy_metric_correlations", "report/strategy_metric_correlations.parquet",
               table="metric_correlations"))),
)}


def stage_kind(name: str) -> StageKind:
    try:
        return STAGES[name]
    except KeyError:
        raise KeyError(f"unknown stage kind {name!r}; known: {', '.join(STAGES)}") from None


@dataclass(frozen=True)
class StageResult:
    """Everything one stage call wrote (output name -> artifact) and the small facts it found (``info``)."""

    kind: str
    keys: dict[str, Any]
    outputs: dict[str, ArtifactRef]
    info: dict[str, Any] = field(default_factory=dict)
    private: bool = False  # written under PRIVATE_FOLDER: holds raw input text of a pseudonymising run

    @property
    def name(self) -> str:
        return stage_kind(self.kind).display(self.keys)

    def __getitem__(self, output: str) -> ArtifactRef:
        return self.outputs[output]

    def refs(self) -> list[ArtifactRef]:
        return list(self.outputs.values())

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "keys": dict(self.keys), "info": dict(self.info), "private": self.private,
                "outputs": {name: {"path": r.path, "fingerprint": r.fingerprint, "rows": r.rows}
                            for name, r in self.outputs.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StageResult:
        return cls(kind=data["kind"], keys=dict(data["keys"]), info=dict(data.get("info", {})),
                   outputs={n: ArtifactRef(**r) for n, r in data["outputs"].items()},
                   private=bool(data.get("private", False)))


class StageWriter:
    """Writes one stage call's declared outputs under the run folder and builds its :class:`StageResult`."""

    def __init__(self, store: ArtifactStore, experiment: str, kind: str, *, flat: bool = False, private: bool = False,
                 **keys: Any) -> None:
        self.store, self.experiment, self.kind, self.flat = store, experiment, stage_kind(kind), flat
        self.private = private
        missing = [k for k in self.kind.keys if k not in keys]
        if missing:
            raise KeyError(f"stage {kind!r} needs keys {missing}")
        self.keys = {k: keys[k] for k in self.kind.keys}
        self.outputs: dict[str, ArtifactRef] = {}

    def _parts(self, output: str, **extra: Any) -> tuple[str, ...]:
        if self.flat:
            return (self.kind.output(output).file.format(**self.keys, **extra),)
        if not self.kind.in_run:
            raise ValueError(f"stage {self.kind.name!r} writes outside the run folder: record() its files")
        relative = self.kind.relative_path(output, {**self.keys, **extra}, private=self.private)
        return (self.experiment, *relative.split("/"))

    def table(self, output: str, frame: Any, **extra: Any) -> ArtifactRef:
        """Write a declared output as parquet (atomically), checked against its declared score table."""
        declared = self.kind.output(output).table
        if declared is not None:
            validate_scores(frame, TABLES[declared])
        ref = self.store.write_table(frame, *self._parts(output, **extra))
        self.outputs[output] = ref
        return ref

    def text(self, output: str, text: str) -> ArtifactRef:
        ref = self.store.write_text(text, *self._parts(output))
        self.outputs[output] = ref
        return ref

    def record(self, output: str, ref: ArtifactRef) -> None:
        """A declared output the stage wrote itself (e.g. streamed to the local cache folder)."""
        self.kind.output(output)
        self.outputs[output] = ref

    def result(self, **info: Any) -> StageResult:
        """The stage's result; every declared (non-optional) output must have been written."""
        missing = [o.name for o in self.kind.outputs if not o.optional and o.name not in self.outputs]
        if missing:
            raise RuntimeError(f"stage {self.kind.display(self.keys)} did not write {', '.join(missing)}")
        return StageResult(kind=self.kind.name, keys=dict(self.keys), outputs=dict(self.outputs), info=info,
                           private=self.private)


def folder_writer(folder: str | Path, kind: str, **keys: Any) -> StageWriter:
    """A writer of one stage kind's outputs straight into ``folder``, under the names the run layout gives
    them (what the CLI commands that mirror a stage write: ``synthugc reidentify`` writes ``reidentify``'s)."""
    return StageWriter(ArtifactStore(folder), "", kind, flat=True, **keys)


def read_stage_tables(folder: str | Path, kind: str, **keys: Any) -> dict[str, pd.DataFrame]:
    """Every parquet output of a stage kind found in ``folder``, by output name: reads a run's stage folder
    (``runs/<exp>/privacy/<label>``) and the folder of the CLI command that mirrors the stage alike."""
    import pandas as pd

    found = {}
    for out in stage_kind(kind).outputs:
        path = Path(folder) / out.file.format(**keys)
        if path.suffix == _TABLE and path.is_file():
            found[out.name] = pd.read_parquet(path)
    return found


@dataclass
class RunLayout:
    """A run's stage results (from the flow or from ``manifest.json``), looked up by kind and output."""

    results: list[StageResult]

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> RunLayout:
        stages = manifest.get("stages", {})
        return cls([StageResult.from_json(s["result"]) for s in stages.values()
                    if isinstance(s, Mapping) and s.get("result")])

    def of(self, kind: str) -> list[StageResult]:
        return [r for r in self.results if r.kind == kind]

    def one(self, kind: str, output: str) -> ArtifactRef | None:
        """The output of the single call of a kind without keys (``split`` corpus, ``metaeval`` summary)."""
        for r in self.of(kind):
            if output in r.outputs:
                return r.outputs[output]
        return None

    def by_label(self, kind: str, output: str) -> dict[str, ArtifactRef]:
        """``{strategy label: artifact}`` for a per-strategy stage kind."""
        return {r.keys["label"]: r.outputs[output] for r in self.of(kind) if output in r.outputs}

    def shards(self, *, public: bool = False) -> dict[str, list[ArtifactRef]]:
        """Strategy label -> its generated shards in shard order, the protect stage's output under its label;
        ``public``: only the strategies whose outputs are not private (those that rewrote the pseudonymised
        corpus, or every one in a run without it)."""
        out: dict[str, list[tuple[int, ArtifactRef]]] = {}
        for r in self.of("generate"):
            if public and r.private:
                continue
            out.setdefault(r.keys["label"], []).append((int(r.keys["shard"]), r.outputs["shard"]))
        for r in self.of("protect"):  # the protected output joins the run as one more strategy, in one shard
            if not (public and r.private):
                out.setdefault(PROTECT_LABEL, []).append((0, r.outputs["shard"]))
        return {label: [ref for _, ref in sorted(pairs, key=lambda p: p[0])] for label, pairs in out.items()}

    def artifacts(self) -> dict[str, ArtifactRef]:
        """Every file of the run: ``<stage call>/<output>`` -> artifact."""
        return {f"{r.name}/{name}": ref for r in self.results for name, ref in r.outputs.items()}

    def relocated(self, old_root: str, new_root: str) -> RunLayout:
        """The same results with paths under ``old_root`` moved to ``new_root`` (a moved run directory)."""
        def move(ref: ArtifactRef) -> ArtifactRef:
            if ref.path.startswith(old_root.rstrip("/") + "/"):
                return ArtifactRef(new_root.rstrip("/") + ref.path[len(old_root.rstrip("/")):], ref.fingerprint,
                                   ref.rows)
            return ref
        return RunLayout([StageResult(r.kind, r.keys, {n: move(ref) for n, ref in r.outputs.items()}, r.info,
                                      r.private) for r in self.results])


def stage_files(results: Iterable[StageResult]) -> dict[str, list[str]]:
    """Stage call name -> the paths it wrote (what the UI's per-stage artifacts link to)."""
    return {r.name: [ref.path for ref in r.outputs.values()] for r in results}
