"""The report of a small real run: its numbers equal the parquet artifacts', it opens in headless Chromium
with every figure loaded and the tables and plots visible in the screenshot, `synthugc report RUN_DIR`
rebuilds it without recomputing, and the human-evaluation round trip lands in it."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from debate_sample import debate_turns
from report_page import parse_report

from flows.experiment import experiment_from_mapping
from tasks.report.goals import GOALS
from tasks.report.recommend import LITTLE_PROTECTION, recommend, recommendation_notes
from tasks.report.render import fmt
from tasks.report.run_files import RunFiles
from tasks.report.tables import strategy_label
from tasks.scores import SCORE_KEY, column_key, column_keys

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "synthugc"
STRATEGIES = ("stymask", "backtranslate", "synsim")  # not alphabetical: the config order must hold


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A real run on 42 debate turns: three strategies, a few metrics, the privacy attacks (each turn attacked on
    its own, with the share-data budget on the residual risk, as the demo's config does), utility with two seeds,
    the metric meta-evaluation and two example outputs. Returns the run directory."""
    base = tmp_path_factory.mktemp("report-run")
    sample = debate_turns(3, 14, words=40)
    corpus = base / "sample.parquet"
    sample.to_parquet(corpus)
    old_cache = os.environ.get("SYNTHUGC_CACHE_DIR")
    os.environ["SYNTHUGC_CACHE_DIR"] = str(base / "cache")
    try:
        experiment_from_mapping({
            "experiment": "r", "seed": 5, "storage_root": str(base / "runs"), "data": {"path": str(corpus)},
            "generate": {"shard_size": 25, "strategies": [
                {"name": "stymask"}, {"name": "backtranslate", "params": {"backend": "apertium"}},
                {"name": "synsim", "params": {"k": 3}}]},
            "metrics": {"names": ["bertscore_f1", "bleu_divergence", "pos_jaccard", "fcsd", "char_jsd", "pos_jsd",
                                  "cos_tf"],
                        "metaeval": {"enabled": True, "bag_size": 12}},
            "utility": {"seeds": [0, 1], "fractions": [0.5, 1.0]},
            "privacy": {"reidentify": {"timeline_posts": 1}},
            "report": {"examples": 2, "goals": ["augment", "share-data"], "budget": "reidentification_risk<=0.10"},
        })
    finally:
        if old_cache is None:
            os.environ.pop("SYNTHUGC_CACHE_DIR", None)
        else:
            os.environ["SYNTHUGC_CACHE_DIR"] = old_cache
    return base / "runs" / "r"


def _artifact_scores(run: Path) -> pd.Series:
    """Every score the run's parquet artifacts hold, keyed by (strategy, variant, metric); the utility numbers
    are recomputed here from the individual runs' files (mean over the ok seeds)."""
    files = [*run.glob("metrics/*/distribution_scores.parquet"), *run.glob("privacy/*/privacy_scores.parquet"),
             *run.glob("privacy/*/reid_scores.parquet")]
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    frame["variant"] = frame["variant"].fillna("").astype(str)
    frame["key"] = column_keys(frame)
    # a baseline row (original, chance) that every strategy repeats: its value where any strategy has one, none
    # where two differ
    scores = frame.groupby(["strategy", "variant", "key"])["value"].agg(
        lambda v: v.dropna().iloc[0] if v.dropna().nunique() == 1 else math.nan)
    runs = pd.concat([pd.read_parquet(f) for f in run.glob("utility/*/*-seed*.parquet")], ignore_index=True)
    runs["variant"] = runs["variant"].fillna("").astype(str)  # one row per (strategy, variant); baseline ''
    means = runs[runs["status"] == "ok"].groupby(["strategy", "variant", "setting", "fraction"])["macro_f1"].mean()
    utility = {(strategy, variant, column_key("macro_f1", {"setting": setting, "fraction": fraction})): value
               for (strategy, variant, setting, fraction), value in means.items()}
    assert utility, "the run has no utility numbers"
    return pd.concat([scores, pd.Series(utility)])


def test_report_tables_show_the_parquet_numbers(finished_run):
    page = parse_report((finished_run / "report.html").read_text())
    scores = _artifact_scores(finished_run)
    tables = {c["table"] for c in page.cells}
    assert {"table4-table", "table13-table", "table5-table", "table6-table", "table7-table"} <= tables
    # the intervals the stages wrote (privacy, and the metrics' means over documents), and the utility intervals
    # the report resampled from the runs' test predictions (in its score table)
    report_scores = pd.read_parquet(finished_run / "report" / "scores.parquet")
    scored = pd.concat([*(pd.read_parquet(f) for f in (*finished_run.glob("privacy/*/privacy_scores.parquet"),
                                                       *finished_run.glob("privacy/*/reid_scores.parquet"),
                                                       *finished_run.glob("metrics/*/distribution_scores.parquet"))),
                        report_scores[report_scores["level"] == "utility"]])
    scored = scored[scored["ci_low"].notna()].assign(variant=lambda f: f["variant"].fillna("").astype(str))
    intervals = {(s, v, k): (lo, hi) for s, v, k, lo, hi in zip(scored["strategy"], scored["variant"],
                                                                column_keys(scored), scored["ci_low"],
                                                                scored["ci_high"], strict=True)}
    assert set(report_scores.loc[report_scores["ci_low"].notna(), "level"]) >= {"sample-mean", "utility", "privacy"}
    checked = with_interval = 0
    for cell in page.cells:
        strategy, variant = cell["row"]
        metric = cell["metric"]
        if strategy == "original" and cell["table"] in ("table5-table", "table7-table"):
            metric = re.sub(r"setting=(substitution|augmentation)", "setting=baseline", metric)  # no-synthetic row
        expected = scores.get((strategy, variant, metric), math.nan)
        shown = float(cell["value"])
        assert (math.isnan(shown) and math.isnan(expected)) or shown == pytest.approx(expected, rel=1e-12), cell
        value_text, _, interval = cell["text"].partition(" [")  # cells with an interval: "0.400 [0.168, 0.687]"
        assert value_text == fmt(round(expected, 12)), cell
        if interval:
            low, high = intervals[(strategy, variant, metric)]
            assert interval == f"{fmt(low)}, {fmt(high)}]", cell
            assert low <= expected <= high, cell
            with_interval += 1
        checked += 1
    assert checked >= 40 and with_interval >= 12  # Table 6's privacy cells, Table 4's means, the utility cells
    # every strategy is in the sample-level table, with the meaning score the metric stage wrote
    table4_rows = list(dict.fromkeys(c["row"][0] for c in page.cells if c["table"] == "table4-table"))
    assert table4_rows == list(STRATEGIES)  # in the config's order
    # Table 6 ends with the random baseline and the original data, as in the article
    rows = [c["row"][0] for c in page.cells if c["table"] == "table6-table"]
    assert rows[-1] == "original" and "chance" in rows


def _run_scores(run: Path) -> pd.DataFrame:
    """The run's long score table as the report stage assembles it."""
    files = [*sorted(run.glob("metrics/*/distribution_scores.parquet")),
             *sorted(run.glob("privacy/*/*_scores.parquet")), *sorted(run.glob("report/utility_scores.parquet"))]
    summary = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    summary["variant"] = summary["variant"].fillna("").astype(str)
    return summary.drop_duplicates(list(SCORE_KEY))


def test_the_run_gets_one_recommendation_per_strategy_variant_for_every_goal(finished_run):
    """Every goal ranks every variant the run scored; eligibility follows the goal's rules; the run-level notes
    name what the run lacks or leaves uncertain, and a run with nothing to flag may have none."""
    run = RunFiles.open(finished_run)
    summary, families = _run_scores(finished_run), run.strategy_families()
    labels = set(run.strategy_labels())
    assert labels == set(STRATEGIES)
    # one recommendation per variant each strategy wrote (backtranslate: one per pivot)
    scored = summary[(summary["metric"] == "bertscore_f1") & summary["strategy"].isin(labels)]
    variants = sorted(zip(scored["strategy"], scored["variant"], strict=True))
    assert {s for s, _ in variants} == labels
    # the variants that copied any of the source's PII spans verbatim, read from the score table itself
    leak = summary[(summary["metric"] == "pii_leakage") & (summary["entity"] == "all") & (summary["value"] > 0)]
    copies_pii = set(zip(leak["strategy"], leak["variant"], strict=True))
    for name, goal in GOALS.items():
        recs = recommend(summary, goal, families)
        assert sorted((r.strategy, r.variant) for r in recs) == variants, name
        for rec in recs:
            assert rec.reasons and all(isinstance(r, str) and r for r in rec.reasons)
            assert rec.cost.startswith("utility: ")
            assert (rec.rank is None) == (not rec.eligible)
            # ineligible only for a formal-DP goal without DP, or for sharing data with PII copied verbatim
            copied = (rec.strategy, rec.variant) in copies_pii
            assert rec.eligible == (not (goal.formal_dp and rec.family != "dp")
                                    and not (goal.use_case == "share_data" and copied)), (name, rec.label)
        notes = recommendation_notes(goal, recs)
        assert all(isinstance(n, str) and n for n in notes)
        # this run has no DP strategy: a formal-DP goal says so; the others do not
        assert any(n.startswith("no strategy with formal DP") for n in notes) == goal.formal_dp, name
        ranked = [r for r in recs if r.rank is not None and math.isfinite(r.score)]
        weak = (goal.use_case != "augment" and bool(ranked) and "privacy" in ranked[0].aspects
                and ranked[0].aspects["privacy"] < LITTLE_PROTECTION)
        assert any("little measurable protection" in n for n in notes) == weak, name


def test_report_is_self_contained_with_plots_recommendations_and_examples(finished_run):
    html = (finished_run / "report.html").read_text()
    page = parse_report(html)
    assert len(page.images) >= 4 and all(src.startswith("data:image/png;base64,") for src in page.images)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert 'id="recommendations"' in html and html.count('class="recs"') == 2  # the two configured goals
    assert 'id="examples"' in html  # report.examples: 2 switched them on
    markdown = (finished_run / "report.md").read_text()
    assert "## Recommendation: " in markdown and "## Metric signatures" in markdown
    manifest = json.loads((finished_run / "manifest.json").read_text())
    assert manifest["report"]["families"] == [[s, s] for s in STRATEGIES]  # in config order
    assert [k for k, _ in manifest["report"]["facts"]][:2] == ["experiment", "data"]
    assert "metaeval/summary" in manifest["artifacts"]  # <stage call>/<output>
    summary = pd.read_parquet(finished_run / "metaeval" / "summary.parquet")
    assert {"cos_tf", "char_jsd", "pos_jsd", "fcsd"} <= set(summary["metric"])


def test_report_opens_with_a_plain_verdict_and_keeps_the_appendix_last(finished_run):
    """report.md and the page open with the verdict: per goal the strategy to use and its cost (the at-a-glance
    table's), the risk of the strategy to share against chance over the turns attacked (each turn one trial) and
    the speakers they come from, and what the full adversary holds; the signatures, the correlation matrix over
    three strategies and the residual risks with nothing to measure come after the body, in the appendix; no
    boolean or count prints as a program writes it."""
    markdown = (finished_run / "report.md").read_text()
    title, rest = markdown.split("\n\n", 1)
    assert title.startswith("# ") and rest.startswith("## Verdict\n\n")
    verdict = rest.split("\n\n")[1]
    items = dict(re.findall(r"^- \*\*(.+?)\*\*: (.+)\.$", verdict, flags=re.M))
    glance = markdown.split("## Which strategy should I use?")[1].split("\n\n## ")[0]
    rows = re.findall(r"^\| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", glance, flags=re.M)[1:]
    assert [goal for goal, *_ in rows] == [g for g in items if g in {goal for goal, *_ in rows}] and len(rows) == 2
    for goal, first, score, cost in rows:
        if first == "none eligible":
            over = cost == "no strategy of this run meets the run's budget"
            assert items[goal] == ("no strategy of this run meets the budget reidentification_risk\\<=0.10" if over
                                   else "no strategy of this run is eligible"), items[goal]
        else:
            assert items[goal] == f"use {first} (score {score} of 1). What it costs: {cost}", items[goal]

    # the risk against chance: the strongest attack on the strategy to share, over turns, by speakers
    risk = items["Re-identification against chance"]
    found = re.fullmatch(r"the strongest attack on (.+?), the (\w+) attack with the (\w+) adversary, named the right speaker "
                         r"for (\d+)% \\\[(\d+)%, (\d+)%\\\] of (\d+) turns \(each attacked on its own\) by (\d+) "
                         r"speakers; guessing names the right one for (\d+)% \(one in (\d+) candidates\)(; .*)?", risk)
    assert found, risk
    strategy, attack, adversary, pct, _, _, trials, speakers, chance, candidates, _ = found.groups()
    scores = _run_scores(finished_run)
    labels = pd.Series([strategy_label(s, v) for s, v in zip(scores["strategy"], scores["variant"], strict=True)],
                       index=scores.index)
    reid = scores[(scores["metric"] == "reid_accuracy") & (labels == strategy) & scores["value"].notna()]
    worst = reid.loc[reid["value"].idxmax()]
    assert (attack, adversary, int(pct), int(trials)) == (worst["attack"], worst["adversary"],
                                                          round(100 * worst["value"]), int(worst["n"]))
    sample = debate_turns(3, 14, words=40)
    assert int(trials) <= len(sample) and int(speakers) == sample["author_id"].nunique()
    assert int(candidates) == round(1 / (int(chance) / 100)) or int(chance) == round(100 / int(candidates))
    share = next(first for goal, first, *_ in rows if goal.startswith("Share"))
    assert share == "none eligible" or strategy == share
    assert items["What the adversaries hold"].startswith(
        "the full adversary holds the users' other posts and the source texts of the rewritten rows (the strongest "
        "case: it has the originals)")
    assert "author timelines" not in markdown  # the trials are turns, and the reasons say so
    assert re.search(r"re-identified \d+% \\\[\d+%, \d+%\\\] of \d+ turns", markdown)

    body, appendix = markdown.split("\n## Appendix\n")
    assert "### Metric signatures" in appendix and not re.search(r"^\d+\. `", body, flags=re.M)
    assert "Metric correlations" not in body and "### Metric correlations across strategies" in appendix
    intrinsic = scores[scores["level"].isin(["sample-mean", "distribution"]) & scores["strategy"].isin(STRATEGIES)]
    variants = len(intrinsic[["strategy", "variant"]].drop_duplicates())  # backtranslate: one per pivot
    assert variants < 5 and f"Computed across {variants} strategies" in appendix
    assert "## Methods" in body and "## Recommendation: " in body
    assert not re.search(r"\| (True|False) \|", markdown)
    assert re.search(r"^\| [^|]+ \| (yes|no) \| (yes|no) \|", markdown, flags=re.M)  # the budget table

    html = (finished_run / "report.html").read_text()
    assert html.index('id="verdict"') < html.index("<dl>") < html.index('id="recommendations"')
    assert html.index('id="methods"') < html.index('id="appendix"') < html.index('id="signatures"')
    assert html.index('id="appendix"') < html.index('id="metric-correlations-appendix"')
    assert "the full adversary holds the users&#39; other posts and the source texts" in html
    details = html.split('<table id="strategy-0">')[1].split("</table>")[0]
    head = re.findall(r"<th[^>]*>([^<]*)</th>", details)
    rows = [re.findall(r"<td>([^<]*)</td>", r) for r in details.split("<tr>")[2:]]
    assert rows and all(re.fullmatch(r"\d{1,3}(,\d{3})*", r[head.index(c)]) for r in rows for c in ("n", "failed"))


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (make setup installs it with infra/apt-packages.sh)")
        pytest.skip("chromium is not installed: apt-get install chromium")
    return path


def _headless(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
         "--no-first-run", "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
         "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=120)


def test_report_opens_in_headless_chromium_and_shows_tables_and_plots(finished_run, tmp_path):
    from PIL import Image

    chromium = _chromium()
    url = (finished_run / "report.html").resolve().as_uri()
    dumped = _headless(chromium, tmp_path / "profile", "--window-size=1280,1000", "--dump-dom", url)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = parse_report(dumped.stdout)
    figures, loaded = int(dom.body["data-figures"]), int(dom.body["data-figures-loaded"])
    assert figures >= 4 and loaded == figures  # every inline image decoded in the browser
    height = min(int(dom.body["data-height"]), 16000)
    shot = tmp_path / "report.png"
    taken = _headless(chromium, tmp_path / "profile", f"--window-size=1280,{height}", f"--screenshot={shot}", url)
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    image = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert image.shape[1] == 1280 and image.shape[0] >= height - 1
    tables = [b for b in dom.boxes["table"] if b[1] + b[3] <= image.shape[0]]
    plots = [b for b in dom.boxes["img"] if b[1] + b[3] <= image.shape[0] and b[2] > 100]
    assert len(tables) >= 5 and len(plots) >= 4
    for x, y, w, h in tables:  # a table shows dark text and grid lines on a light background
        region = image[y:y + h, x:x + w]
        dark = (region.max(axis=2) < 100).mean()
        assert 0.002 < dark < 0.5, (x, y, w, h, dark)
    for (x, y, w, h), src in zip(dom.boxes["img"], dom.images, strict=True):  # each plot is on screen as drawn
        if (x, y, w, h) not in plots:
            continue
        drawn = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGB")
        region = image[y + 1:y + h - 1, x + 1:x + w - 1]  # inside the 1px border
        expected = np.asarray(drawn.resize((region.shape[1], region.shape[0]))).astype(int)
        assert np.abs(region - expected).mean() < 8, (x, y, w, h)
        assert (region.max(axis=2) < 200).mean() > 0.01  # and it is not blank
    above_first_table = image[: tables[0][1]]
    assert (above_first_table.max(axis=2) < 100).mean() > 0.001  # the title and recommendations are there


def _mtimes(run: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in run.rglob("*.parquet")}


def test_report_command_rebuilds_without_recomputing(finished_run, tmp_path):
    moved = tmp_path / "moved" / "r"  # a run directory copied elsewhere still rebuilds
    shutil.copytree(finished_run, moved)
    before = _mtimes(moved)
    same = subprocess.run([str(CLI), "report", str(moved)], capture_output=True, text=True, timeout=300)
    assert same.returncode == 0, same.stderr
    # with the run's own settings the rebuilt page is the stage's page, byte for byte
    assert (moved / "report.html").read_bytes() == (finished_run / "report.html").read_bytes()
    assert (moved / "report.md").read_text() == (finished_run / "report.md").read_text()
    probe = ("import sys; from typer.testing import CliRunner; from flows.cli import app; "
             f"r = CliRunner().invoke(app, ['report', {str(moved)!r}, '--goal', 'share-model-dp', '--examples', '0']); "
             "print(r.output); heavy = sorted(m for m in ('torch', 'transformers', 'sentence_transformers', 'spacy') "
             "if m in sys.modules); print('HEAVY', heavy); sys.exit(r.exit_code)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HEAVY []" in proc.stdout  # no model library was even imported
    assert _mtimes(moved) == before  # no artifact was rewritten
    html = (moved / "report.html").read_text()
    assert "formal differential privacy required" in html.lower() and 'id="examples"' not in html
    page, original = parse_report(html), parse_report((finished_run / "report.html").read_text())
    assert [(c["row"], c["metric"], c["value"]) for c in page.cells] == \
        [(c["row"], c["metric"], c["value"]) for c in original.cells]
    manifest = json.loads((moved / "manifest.json").read_text())
    assert manifest["artifacts"]["report/html"]["path"] == str(moved / "report.html")


def test_report_command_refuses_a_changed_artifact(finished_run, tmp_path):
    copy = tmp_path / "r"
    shutil.copytree(finished_run, copy)
    target = copy / "metrics" / "stymask" / "distribution_scores.parquet"
    frame = pd.read_parquet(target)
    frame.loc[0, "value"] = 123.0
    frame.to_parquet(target)
    proc = subprocess.run([str(CLI), "report", str(copy)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "metrics/stymask/distribution_scores" in proc.stderr
    missing = subprocess.run([str(CLI), "report", str(tmp_path / "nowhere")], capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "not a run directory" in missing.stderr


def test_human_evaluation_round_trip_reaches_the_report(finished_run, tmp_path):
    run = tmp_path / "r"
    shutil.copytree(finished_run, run)
    exported = subprocess.run([str(CLI), "annotate", "export", str(run), "--per-strategy", "6", "--seed", "1"],
                              capture_output=True, text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr
    sheet = pd.read_csv(run / "human_eval" / "sheet.csv", dtype=str, keep_default_na=False)
    key = pd.read_parquet(run / "human_eval" / "key.parquet").set_index("item_id")
    # 6 items per strategy variant (backtranslate has one per pivot)
    assert set(key["strategy"]) == set(STRATEGIES) and len(sheet) == 6 * key.groupby(["strategy", "variant"]).ngroups
    rng = np.random.default_rng(0)
    sheets = []
    for annotator in ("ann1", "ann2", "ann3"):
        filled = sheet.copy()
        # raters who mostly agree: the stymask rewrites read as more fluent than the others
        base = np.where(key.loc[filled["item_id"], "strategy"].to_numpy() == "stymask", 5, 3)
        filled["fluency"] = np.clip(base - rng.integers(0, 2, len(filled)), 1, 5).astype(str)
        filled["meaning"] = np.clip(base - rng.integers(0, 2, len(filled)), 1, 5).astype(str)
        filled["annotator"] = annotator
        path = tmp_path / f"{annotator}.csv"
        filled.to_csv(path, index=False, quoting=csv.QUOTE_MINIMAL)
        sheets.append(str(path))
    imported = subprocess.run([str(CLI), "annotate", "import", str(run), *sheets], capture_output=True, text=True,
                              timeout=120)
    assert imported.returncode == 0, imported.stderr
    assert f"report rebuilt with the human evaluation: {run / 'report.html'}" in imported.stdout
    html = (run / "report.html").read_text()
    assert 'id="human"' in html and f"{3 * len(sheet)} ratings" in html
    agreement = pd.read_parquet(run / "human_eval" / "agreement.parquet").set_index("aspect")
    shown = html.split('id="human-agreement"')[1].split("</table>")[0]
    row = next(r for r in shown.split("<tr>") if r.startswith("<td>fluency</td>"))
    cells = re.findall(r"<td>([^<]*)</td>", row)
    columns = re.findall(r"<th[^>]*>([^<]*)</th>", shown)
    # the agreement the import computed is what the report's table shows
    assert cells[columns.index("alpha")] == fmt(float(agreement.loc["fluency", "alpha"]))
    assert cells[columns.index("kappa")] == fmt(float(agreement.loc["fluency", "kappa"]))
