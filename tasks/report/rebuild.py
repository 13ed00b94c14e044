"""``synthugc report RUN_DIR``: the report of a finished run rebuilt from its manifest and artifacts, with
nothing recomputed (no model is loaded, no metric or attack runs). Used after ``synthugc annotate import``,
to rank the strategies for another goal, or to switch the example outputs on."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tasks.errors import InputError
from tasks.report.build import collect_report_data
from tasks.report.recommend import parse_goal
from tasks.report.render import render_report
from tasks.report.run_files import RunFiles
from tasks.store import ArtifactRef, ArtifactStore, fingerprint_file


@dataclass(frozen=True)
class RebuiltReport:
    markdown: Path
    html: Path


def run_artifacts(run: RunFiles) -> dict[str, ArtifactRef]:
    """The run's artifacts from its manifest, each checked to exist with the fingerprint recorded at run time."""
    artifacts = {}
    for name, ref in run.manifest().get("artifacts", {}).items():
        if name.startswith("report."):
            continue
        path = run.resolve(ref["path"])
        if not path.is_file():
            raise InputError(f"{run.root / 'manifest.json'}: artifact {name} is missing ({path}); rerun the run to "
                             "recreate it")
        if fingerprint_file(str(path)) != ref["fingerprint"]:
            raise InputError(f"{path}: artifact {name} changed since the run wrote it; rerun the run so the report "
                             "matches its inputs")
        artifacts[name] = ArtifactRef(path=str(path), fingerprint=ref["fingerprint"], rows=ref.get("rows"))
    return artifacts


def rebuild_report(run_dir: str | Path, *, goals: Sequence[str] | None = None,
                   examples: int | None = None) -> RebuiltReport:
    """Rewrite ``report.md`` and ``report.html`` of ``run_dir`` from its artifacts (and imported human
    ratings); ``goals`` and ``examples`` override the run's config."""
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
    artifacts = run_artifacts(run)
    store = ArtifactStore(run.root)
    data = collect_report_data(
        artifacts, store.read_table, title=context["title"],
        facts=dict(context["facts"]),
        level=context["level"], families=dict(context["families"]), failed_stages=context.get("failed_stages", {}),
        utility_signature=context.get("utility_signature", ""), human_eval_dir=run.human_eval_dir,
        examples=int(report_config.get("examples", 0) if examples is None else examples),
        seed=int(config.get("seed", 0)), goals=parsed)
    markdown, page = render_report(data)
    md_ref, html_ref = store.write_text(markdown, "report.md"), store.write_text(page, "report.html")
    manifest["artifacts"]["report.md"], manifest["artifacts"]["report.html"] = asdict(md_ref), asdict(html_ref)
    store.write_text(json.dumps(manifest, indent=2, sort_keys=True), "manifest.json")
    return RebuiltReport(markdown=Path(md_ref.path), html=Path(html_ref.path))
