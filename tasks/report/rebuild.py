"""``synthugc report RUN_DIR``: the report of a finished run rebuilt from its manifest and artifacts, with
nothing recomputed (no model is loaded, no metric or attack runs). Used after ``synthugc annotate import``,
to rank the strategies for another goal, or to switch the example outputs on."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tasks.errors import InputError
from tasks.intervals import N_RESAMPLES
from tasks.layout import RunLayout, stage_kind
from tasks.report.build import collect_report_data
from tasks.report.goals import parse_goal
from tasks.report.render import budget_verdicts, render_report
from tasks.report.run_files import RunFiles
from tasks.store import ArtifactStore, fingerprint_file


@dataclass(frozen=True)
class RebuiltReport:
    markdown: Path
    html: Path
    budget: pd.DataFrame | None = None  # strategy, meets, verdict: when a budget was stated


def run_layout(run: RunFiles) -> RunLayout:
    """The run's stage results from its manifest, each file checked to exist with the fingerprint recorded at
    run time (the report's own files excepted: the rebuild rewrites them)."""
    layout = run.layout
    for result in layout.results:
        if result.kind == "report":
            continue
        for output, ref in result.outputs.items():
            name = f"{result.name}/{output}"
            path = Path(ref.path)
            if not path.is_file():
                raise InputError(f"{run.root / 'manifest.json'}: artifact {name} is missing ({path}); rerun the "
                                 "run to recreate it")
            if fingerprint_file(str(path)) != ref.fingerprint:
                raise InputError(f"{path}: artifact {name} changed since the run wrote it; rerun the run so the "
                                 "report matches its inputs")
    return RunLayout([r for r in layout.results if r.kind != "report"])


def rebuild_report(run_dir: str | Path, *, goals: Sequence[str] | None = None,
                   examples: int | None = None, require: str | None = None,
                   decide_on: str | None = None) -> RebuiltReport:
    """Rewrite ``report.md`` and ``report.html`` of ``run_dir`` from its artifacts (and imported human
    ratings); ``goals``, ``examples``, ``require`` and ``decide_on`` override the run's config."""
    run = RunFiles.open(run_dir)
    manifest = run.manifest()
    context = manifest.get("report")
    if not context:
        raise InputError(f"{run.root / 'manifest.json'}: no report context recorded (a run from an older "
                         "synthugc); rerun it with `synthugc run` to rebuild its report")
    config = manifest.get("config", {})
    report_config = config.get("report", {})
    chosen_goals = list(goals) if goals is not None else list(report_config.get("goals", []))
    try:
        parsed = [parse_goal(g) for g in chosen_goals]
    except ValueError as exc:
        raise InputError(f"--goal: {exc}") from exc
    layout = run_layout(run)
    store = ArtifactStore(run.root)
    data = collect_report_data(
        layout, store.read_table, title=context["title"],
        facts=dict(context["facts"]),
        level=context["level"], families=dict(context["families"]), failed_stages=context.get("failed_stages", {}),
        utility_signature=context.get("utility_signature", ""), human_eval_dir=run.human_eval_dir,
        examples=int(report_config.get("examples", 0) if examples is None else examples),
        seed=int(config.get("seed", 0)), goals=parsed,
        budget=require if require is not None else report_config.get("require"),
        decide_on=decide_on or report_config.get("decide_on", "bound"),
        budget_adversaries=report_config.get("adversaries"),
        n_bootstrap=int(config.get("utility", {}).get("n_bootstrap", N_RESAMPLES)), read_text=store.read_text)
    markdown, page = render_report(data)
    report_kind = stage_kind("report")
    md_ref = store.write_text(markdown, report_kind.relative_path("markdown", {}))
    html_ref = store.write_text(page, report_kind.relative_path("html", {}))
    for stage in manifest.get("stages", {}).values():
        result = stage.get("result") or {}
        if result.get("kind") == "report":  # the rebuilt files' fingerprints, where the run recorded them
            for output, ref in (("markdown", md_ref), ("html", html_ref)):
                recorded = result["outputs"][output]
                recorded["fingerprint"], recorded["path"] = ref.fingerprint, ref.path
                manifest["artifacts"][f"report/{output}"] = recorded
    store.write_text(json.dumps(manifest, indent=2, sort_keys=True), "manifest.json")
    return RebuiltReport(markdown=Path(md_ref.path), html=Path(html_ref.path), budget=budget_verdicts(data))
