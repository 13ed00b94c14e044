"""A run with the protect stage (``protect: enabled``) on a small simulated corpus, end to end: the report's
Protection section shows the stage's rounds (curve, table, moves, verdict) as its artifacts hold them, the
share-data goal ranks the protected output like any strategy and says that its certificate misses the budget, and
``synthugc release RUN --strategy protect`` refuses it naming the attack, and releases it with --ignore-budget. One flow
run serves every test."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from flows.experiment import experiment_from_mapping
from tasks.corpus.simulate import simulate_histories, simulate_synthetic
from tasks.layout import PROTECT_LABEL, RunLayout, stage_kind
from tasks.protect.files import MOVE_COLUMN, ROUNDS_COLUMNS
from tasks.protect.release import CARD_FILE, DATA_FILE
from tasks.report.render import PROTECT_ROUNDS_SHOWN, escape_markdown, with_interval

CLI = Path(sys.executable).parent / "synthugc"
#: No certificate of 24 timelines can show it met: its interval is too wide; verbatim lifted (the rounds work on
#: re-identification only)
BUDGET = "reidentification<=0.05,verbatim<=1"


def test_protect_curve_takes_each_roles_worst_case_per_round():
    """Per round and role the attack whose interval reaches highest (decided on the bound), or whose value is
    highest (on the point): with fewer timelines, a lower share can have the higher bound."""
    from tasks.intervals import wilson
    from tasks.report.build import protect_curve

    rows = []
    for k, meaning in enumerate((0.97, 0.9)):
        for role, attack, hits, n in (("judge", "delta", 6 - 2 * k, 10), ("judge", "minhash", 30 - 10 * k, 40),
                                      ("feedback", "stylometric", 20 - 10 * k, 40)):
            low, high = wilson(hits, n)
            rows.append({"round": k, "attack": attack, "adversary": "disjoint", "role": role,
                         "accuracy_at_1": hits / n, "accuracy_at_1_ci_low": low, "accuracy_at_1_ci_high": high,
                         "meaning": meaning})
    rounds = pd.DataFrame(rows)
    on_bound, on_point = protect_curve(rounds, "bound"), protect_curve(rounds, "point")
    judge = on_bound[on_bound["role"] == "judge"]
    # round 0: minhash 0.75 [bound 0.86] beats delta 0.60 [0.83] either way; round 1: delta 0.40 [0.69] has the
    # higher bound, minhash 0.50 [0.65] the higher value
    assert judge["attack"].tolist() == ["minhash", "delta"]
    assert on_point[on_point["role"] == "judge"]["attack"].tolist() == ["minhash", "minhash"]
    assert judge["meaning"].tolist() == [0.97, 0.9]
    assert on_bound[on_bound["role"] == "feedback"]["accuracy_at_1"].tolist() == [0.5, 0.25]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The run directory of one flow run: 192 simulated posts of 24 timelines, stymask and protect; the embedding
    attack is kept off the CPU (SYNTHUGC_CPU_ATTACK_POSTS=0), so the certificate leaves it out and says why."""
    tmp = tmp_path_factory.mktemp("protect-run")
    histories = simulate_histories(60, 6_000, out_path=tmp / "histories.parquet")
    simulate_synthetic(histories, n_timelines=24, n_posts=192).to_parquet(tmp / "corpus.parquet")
    config = {
        "experiment": "p", "seed": 3, "storage_root": str(tmp / "runs"), "data": {"path": str(tmp / "corpus.parquet")},
        "generate": {"strategies": [{"name": "stymask"}]}, "metrics": {"names": ["bertscore_f1", "bleu_divergence"]},
        "privacy": {"membership": {"enabled": False},
                    "reidentify": {"histories": histories, "attacks": ["minhash", "delta"], "adversaries": ["disjoint"]}},
        "utility": {"enabled": False}, "report": {"goals": ["share-data"]},
        "protect": {"enabled": True, "budget": BUDGET, "ladder": ["mask-evidence", "stymask"], "max_rounds": 2,
                    "meaning_floor": 0.7, "judge": ["delta", "minhash"], "feedback": ["stylometric"]},
    }
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SYNTHUGC_CACHE_DIR", str(tmp / "cache"))
        env.setenv("SYNTHUGC_CPU_ATTACK_POSTS", "0")
        experiment_from_mapping(config)
    return tmp / "runs" / "p"


def _protect_files(run: Path) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """The protect stage's rounds, summary and protected table, found through the manifest's layout."""
    layout = RunLayout.from_manifest(json.loads((run / "manifest.json").read_text()))
    ref = {name: layout.one("protect", name) for name in ("rounds", "summary", "shard")}
    assert all(r is not None for r in ref.values()), ref
    return (pd.read_parquet(ref["rounds"].path), json.loads(Path(ref["summary"].path).read_text()),
            pd.read_parquet(ref["shard"].path))


class _Tables(HTMLParser):
    """The rows (cell texts) of every table of a page, by table id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._table = dict(attrs).get("id")
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None


@pytest.mark.slow
def test_the_report_shows_the_protect_rounds_as_the_stage_wrote_them(run):
    rounds, summary, protected = _protect_files(run)
    assert list(rounds.columns) == ROUNDS_COLUMNS and len(rounds)
    page = (run / "report.html").read_text()
    parser = _Tables()
    parser.feed(page)
    head, *rows = parser.tables["protect-rounds-table"]
    assert head == list(PROTECT_ROUNDS_SHOWN.values())
    assert [r[:4] for r in rows] == [[str(r.round), r.role, r.attack, r.adversary] for r in rounds.itertuples()]
    assert [r[4] for r in rows] == [with_interval(r.accuracy_at_1, r.accuracy_at_1_ci_low, r.accuracy_at_1_ci_high)
                                    for r in rounds.itertuples()]
    assert [r[5] for r in rows] == [with_interval(r.residual_risk, r.residual_risk_ci_low, r.residual_risk_ci_high)
                                    for r in rounds.itertuples()]
    assert [int(r[7]) for r in rows] == rounds["documents_rewritten"].tolist()
    # the moves: the summary's counts, which are the protected table's move column
    moves = protected[MOVE_COLUMN].value_counts().to_dict()
    assert summary["moves"] == moves
    assert {m: int(n) for m, n in parser.tables["protect-moves"][1:]} == moves
    # the verdict line, and the curve drawn (an image, not a reason)
    verdict = re.search(r'id="protect-verdict">([^<]*)<', page).group(1)
    assert verdict.startswith(f"Budget {BUDGET.replace('<', '&lt;')} not met on the certificate (every registered "
                              "attack on the full histories).")
    assert not summary["met"] and set(rounds["role"]) == {"feedback", "judge", "check", "certificate"}
    assert summary["left_out"]["certificate"]["embedding"] == "needs a GPU, and none is present"
    assert html.escape(summary["verdict"], quote=False) in verdict
    assert re.search(r'<figure id="plot-protect-rounds"><img alt="[^"]*" src="data:image/png;base64,', page)
    assert '<a href="#protection">Protection</a>' in page
    markdown = (run / "report.md").read_text()
    assert "## Protection" in markdown and escape_markdown(summary["verdict"]) in markdown


@pytest.mark.slow
def test_the_curve_is_each_roles_worst_case_per_round(run):
    """The report's curve, gathered from the run's artifacts, against the rounds table: per round and role the
    attack whose interval reaches highest (the budget is decided on the bound), with the round's meaning."""
    from tasks.report.build import protection
    from tasks.report.rebuild import run_layout
    from tasks.report.run_files import RunFiles
    from tasks.store import ArtifactStore

    rounds, summary, _ = _protect_files(run)
    store = ArtifactStore(run)
    found = protection(run_layout(RunFiles.open(run)), store.read_table, store.read_text)
    assert found is not None and found.limit == 0.05 and found.met == summary["met"]
    ordered = rounds.sort_values(["attack", "adversary"], kind="stable").reset_index(drop=True)
    expected = ordered.loc[ordered.groupby(["round", "role"])["accuracy_at_1_ci_high"].idxmax()]
    curve = found.curve.set_index(["round", "role"])
    assert len(curve) == len(expected) == rounds[["round", "role"]].drop_duplicates().shape[0]
    assert set(curve.index.get_level_values("role")) == {"feedback", "judge", "check", "certificate"}
    for row in expected.itertuples():
        got = curve.loc[(row.round, row.role)]
        assert (got["attack"], got["accuracy_at_1"], got["accuracy_at_1_ci_high"], got["meaning"]) == \
            (row.attack, row.accuracy_at_1, row.accuracy_at_1_ci_high, row.meaning)
    # the certificate's worst case (after the last round) is the figure the budget was decided on
    last, decided = curve.loc[(summary["rounds"], "certificate")], summary["figures"]["reidentification"]
    assert (last["attack"], last["accuracy_at_1"], last["accuracy_at_1_ci_high"]) == \
        (decided["attack"], decided["value"], decided["ci_high"])


@pytest.mark.slow
def test_share_data_ranks_the_protected_output_and_names_it(run):
    _, summary, _ = _protect_files(run)
    scores = pd.read_parquet(run / stage_kind("report").relative_path("scores", {}))
    protect_rows = scores[scores["strategy"] == PROTECT_LABEL]
    assert {"bertscore_f1", "reid_accuracy"} <= set(protect_rows["metric"])  # scored and attacked downstream
    markdown = (run / "report.md").read_text()
    section = markdown.split("## Recommendation: Share synthetic data")[1].split("\n## ")[0]
    ranked = re.findall(r"^- (\d+)\. \*\*(\S+)\*\*", section, flags=re.M)
    assert sorted(name for _, name in ranked) == sorted(["stymask", PROTECT_LABEL])
    rank = {name: n for n, name in ranked}[PROTECT_LABEL]
    assert not summary["met"]
    assert (f"> the protect output ('{PROTECT_LABEL}') misses its budget {escape_markdown(BUDGET)}: ranked "
            f"{rank} here, on the run's own attacks like any strategy") in markdown


@pytest.mark.slow
def test_release_of_the_run_dirs_protect_output(run, tmp_path):
    _, summary, protected = _protect_files(run)
    out = tmp_path / "release"
    args = [str(CLI), "release", str(run), "--strategy", PROTECT_LABEL, "--out", str(out)]
    refused = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert refused.returncode == 2 and not out.exists(), refused.stderr
    # the run states no budget: the protect stage's own, decided on the run's attacks on the output, by name
    assert re.search(r"misses the run's budget: reidentification \S+ \[\S+, \S+\] > 0\.05 \(decided on the 95% "
                     r"interval's upper bound; \w+, disjoint\)", refused.stderr), refused.stderr
    done = subprocess.run([*args, "--ignore-budget", "--keep-verbatim"], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)
    assert done.returncode == 0, done.stderr
    copies = protected["verbatim"].astype(bool) | protected["unchanged"].astype(bool)
    assert done.stdout.startswith(f"release: {len(protected)} documents -> ")
    released = pd.read_parquet(out / DATA_FILE)
    assert sorted(released["text"]) == sorted(protected["text"])
    card = (out / CARD_FILE).read_text()
    assert f"{int(copies.sum())} hold a run of 30 or more characters of their source text" in card
    assert "**are released (`--keep-verbatim`)" in card
    assert f"**protect verdict**: {summary['verdict']}" in card  # the protect.json adds how it was made
    assert f"**protect**: {summary['rounds']} round(s) from {summary['start']}" in card
    assert f"`{BUDGET}` is **missed** (released anyway with `--ignore-budget`)" in card
    # the figures are the run's score table's (the run's own attacks on the protected output), not the loop's
    reid = pd.read_parquet(run / stage_kind("reidentify").relative_path("scores", {"label": PROTECT_LABEL}))
    worst = reid[(reid["strategy"] == PROTECT_LABEL) & (reid["metric"] == "reid_accuracy")].sort_values("ci_high").iloc[-1]
    assert with_interval(worst["value"], worst["ci_low"], worst["ci_high"]) in card
