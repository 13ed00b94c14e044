"""`synthugc protect` at several meaning floors (the risk-meaning frontier) and at post unit, on simulated
timelines with a stable personal style, with the real attacks and BERTScore model: every floor is a certified point
in P.frontier.parquet, the output is the chosen point, the verdict names it, the frontier is monotone in its floors
or its notes say where it is not; at post unit every attack reads single posts and the certificate states how well
style links the kept posts again; a document every rung leaves below the floor is held back with its reason while
its timeline's other documents stay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tasks.corpus.simulate import simulate_histories, simulate_synthetic
from tasks.protect.files import FRONTIER_COLUMNS, frontier_points, protect_paths
from tasks.protect.frontier import choose_point, monotone_notes

REPO = Path(__file__).resolve().parent.parent
FLOORS = (0.95, 0.6)
NAMED = "Maria Lopez told me about the new school they are building in our town."


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """30 simulated users, 3,000 history posts, 20 timelines of 5 posts, protected at two floors and post unit
    with mask-evidence and stymask (the embedding attack kept off the CPU)."""
    root = tmp_path_factory.mktemp("frontier")
    histories = simulate_histories(30, 3_000, seed=1, out_path=root / "histories.parquet")
    corpus = simulate_synthetic(histories, n_timelines=20, n_posts=100, rewrite_strength=0.0, seed=2)
    corpus.loc[:3, "text"] = NAMED  # English with a real name: the pseudonymiser's
    corpus.to_parquet(root / "corpus.parquet", index=False)
    out = root / "out" / "P.parquet"
    env = {**os.environ, "SYNTHUGC_CACHE_DIR": str(root / "cache"), "HF_HUB_OFFLINE": "1",
           "SYNTHUGC_CPU_ATTACK_POSTS": "0"}
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "protect", "--corpus", str(root / "corpus.parquet"),
                           "--histories", str(histories), "--out", str(out), "--ladder", "mask-evidence,stymask",
                           "--meaning-floor", ",".join(map(str, FLOORS)), "--unit", "post", "--max-rounds", "2",
                           "--budget", "reidentification<=0.0,verbatim<=1", "--judge", "delta,minhash"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    paths = protect_paths(out)
    return {"proc": proc, "paths": paths, "corpus": pd.read_parquet(root / "corpus.parquet"),
            "root": root, "env": env, "args": proc.args}


def test_the_pseudonym_mapping_is_written_where_round_zero_comes_from_the_cache(run):
    """The pseudonymiser runs once, in the round 0 the floors share: the second floor and a rerun read round 0
    from the cache, and still write its mapping under private/ (the same one)."""
    paths = run["paths"]
    mapping = pd.read_parquet(paths.mapping)
    assert "Maria Lopez" in set(mapping["original"]), mapping
    again = run["root"] / "again" / "P.parquet"
    args = [str(again) if a == str(paths.table) else a for a in run["args"]]
    proc = subprocess.run(args, capture_output=True, text=True, env=run["env"], cwd=REPO, timeout=300)
    assert proc.returncode == 1 and "cached" in proc.stderr, proc.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(protect_paths(again).mapping), mapping)


def test_every_floor_is_a_certified_point_and_p_is_the_chosen_one(run):
    proc, paths = run["proc"], run["paths"]
    assert proc.returncode == 1, proc.stderr  # an impossible budget: no floor meets it
    frontier = pd.read_parquet(paths.frontier)
    assert list(frontier.columns) == list(FRONTIER_COLUMNS)
    points = frontier_points(frontier)
    assert list(points["floor"]) == sorted(FLOORS, reverse=True) and points["chosen"].sum() == 1
    assert set(frontier["attack"]) == {"classifier", "delta", "minhash", "stylometric"}  # the certificate of each
    summary = json.loads(paths.summary.read_text())
    chosen = points[points["chosen"]].iloc[0]
    # none meets it: the chosen point is the least re-identified, and the verdict says so and names it
    assert chosen["value"] == points["value"].min() and summary["meaning_floor"] == chosen["floor"]
    assert summary["verdict"].startswith(f"frontier: no floor of 0.95, 0.6 meets the budget; P is the floor-"
                                         f"{chosen['floor']:g} output"), summary["verdict"]
    table = pd.read_parquet(paths.table)
    assert len(table) == chosen["documents_kept"]
    moved = table[table["round"] > 0]
    assert (moved["meaning"] >= chosen["floor"]).all()
    assert paths.frontier_plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a lower floor lets more moves stand: it keeps less meaning
    assert points["meaning"].iloc[1] <= points["meaning"].iloc[0]
    # the frontier falls with the floor, or the notes say where it does not
    notes = summary["frontier"]["notes"]
    rising = points["value"].iloc[1] > points["value"].iloc[0]
    assert bool(notes) == rising and all("not monotone" in n for n in notes)


def test_post_unit_attacks_single_posts_and_states_how_style_links_them(run):
    paths, corpus = run["paths"], run["corpus"]
    summary = json.loads(paths.summary.read_text())
    assert summary["unit"] == "post"
    rounds = pd.read_parquet(paths.rounds)
    certificate = rounds[rounds["role"] == "certificate"]
    table = pd.read_parquet(paths.table)
    assert (certificate["n_timelines"] == len(table)).all()  # every kept post is one trial
    judge0 = rounds[(rounds["role"] == "judge") & (rounds["round"] == 0)]
    assert (judge0["n_timelines"] == len(corpus)).all()
    link = summary["linkability"]
    assert 0.0 <= link["ci_low"] <= link["value"] <= link["ci_high"] <= 1.0 and link["n_same"] > 0
    frontier = pd.read_parquet(paths.frontier)
    assert frontier["linkability_auc"].notna().all()


def test_every_input_document_is_kept_or_held_back_with_its_reason_and_timelines_are_not_dropped_whole(run):
    paths, corpus = run["paths"], run["corpus"]
    table, failures = pd.read_parquet(paths.table), pd.read_parquet(paths.failures)
    assert set(table["doc_id"]) | set(failures["doc_id"]) == set(corpus["doc_id"])
    assert not set(table["doc_id"]) & set(failures["doc_id"])
    # what is kept and what is withheld, by plain reason, add up to the input; release hands out the kept rows that
    # hold no run of their source
    summary = json.loads(paths.summary.read_text())
    docs, withheld = summary["documents"], summary["withheld"]
    assert docs["released"] == int((~table["verbatim"].astype(bool)).sum()) and docs["kept"] == len(table)
    assert docs["kept"] + sum(w["count"] for w in withheld) == docs["input"] == len(corpus)
    assert all(w["reason"] and w["count"] > 0 for w in withheld)
    # every kept row has its fluency within the floor (round 0's too); a moved row repeats no word its source did not
    # and is not cut short
    from tasks.metrics.fluency import adds_doubled_words, cut_short

    assert table["fluency"].notna().all() and summary["fluency"]["floor"] == summary["fluency_floor"] == -1.0
    assert (table["fluency"] >= -1.0).all()
    moved = table[table["round"] > 0].merge(corpus[["doc_id", "text"]], on="doc_id", suffixes=("", "_source"))
    assert not any(adds_doubled_words(s, t) or cut_short(s, t)
                   for s, t in zip(moved["text_source"], moved["text"], strict=True))
    assert failures["reason"].str.len().gt(0).all()
    held = failures[failures["reason"].str.startswith("floor: every move left meaning below")]
    assert len(held) == len(failures)  # no PII or verbatim bound: only the floor holds a document back
    # the held-back documents' timelines keep their other documents
    authors_held = set(corpus.set_index("doc_id").loc[held["doc_id"], "group_id"])
    kept_groups = set(table["group_id"])
    assert authors_held & kept_groups, (authors_held, kept_groups)


def test_choose_point_and_monotone_notes():
    def point(floor, value, met, released=10, meaning=0.8):
        return {"met": met, "figures": {"reidentification": {"value": value}}, "meaning_floor": floor,
                "documents": {"kept": released + 5, "released": released}, "meaning": {"value": meaning}}

    frontier = [point(0.9, 0.5, False), point(0.8, 0.08, True, 40, 0.9), point(0.7, 0.05, True, 70, 0.7)]
    chosen, why = choose_point(frontier, "reidentification", prefer="meaning")
    assert chosen == 1 and "most meaning per row" in why and "releasing 40 rows" in why  # the highest floor met
    chosen, why = choose_point(frontier, "reidentification")  # balanced: 70 x 0.7 = 49 beats 40 x 0.9 = 36
    assert chosen == 2 and "70 rows at mean BERTScore 0.700" in why
    chosen, _ = choose_point([frontier[0], point(0.8, 0.08, True, 60, 0.9), frontier[2]], "reidentification")
    assert chosen == 1  # 60 x 0.9 = 54 beats 49
    chosen, why = choose_point(frontier, "reidentification", prefer="rows")
    assert chosen == 2 and "releases the most rows (70)" in why  # the most rows among the points that meet it
    chosen, why = choose_point([point(0.9, 0.5, False), point(0.8, 0.3, False), point(0.7, 0.3, False)],
                               "reidentification", prefer="rows")
    assert chosen == 1 and "no point meets the budget" in why  # none: the least re-identified, highest floor
    table = pd.DataFrame({"floor": [0.9, 0.8, 0.7], "value": [0.5, 0.6, 0.2], "ci_low": [0.4, 0.55, 0.1],
                          "ci_high": [0.52, 0.7, 0.3], "figure": "reidentification"})
    notes = monotone_notes(table)
    assert notes == ["the frontier is not monotone: floor 0.8 reads reidentification 0.6 above floor 0.9's 0.5 "
                     "beyond their intervals"]
    assert monotone_notes(table.assign(value=[0.5, 0.4, 0.2])) == []


def test_several_floors_in_one_flag_are_parsed_and_a_bad_one_exits_2(run):
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "protect", "--corpus", str(run["root"] / "corpus.parquet"),
                           "--histories", str(run["root"] / "histories.parquet"), "--out",
                           str(run["root"] / "bad" / "P.parquet"), "--meaning-floor", "0.9,high"],
                          capture_output=True, text=True, env=run["env"], cwd=REPO, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == (
        "synthugc: error: --meaning-floor '0.9,high': 'high' is not a number (e.g. 0.8 or 0.9,0.8,0.7)"), proc.stderr
