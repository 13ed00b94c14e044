"""Human evaluation round trip: blind export (sheet, offline form, key), filled sheets back in, agreement,
per-strategy human scores and metric correlations checked against the reference packages."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path

import krippendorff
import numpy as np
import pandas as pd
import pytest
from agreement_reference import old_cohen_kappa, old_krippendorff_alpha
from scipy.stats import spearmanr
from sklearn.metrics import cohen_kappa_score
from typer.testing import CliRunner

from flows.annotate_cli import annotate_app
from tasks.errors import InputError
from tasks.layout import StageResult
from tasks.report.human_eval import export_sheet, import_sheets, load_results
from tasks.report.human_eval_sheet import CANT_TELL, FLUENCY_SCALE, MEANING_SCALE, SHEET_COLUMNS
from tasks.report.human_eval_stats import agreement_table, cohen_kappa, krippendorff_alpha
from tasks.report.run_files import RunFiles
from tasks.store import ArtifactRef, fingerprint_file

STRATEGIES = {"stymask": "first", "backtranslate": "pivot-spa"}
PARTIES = ["Democratic", "Republican", "Moderator"]
SENTENCES = [
    "I think the tax plan is a disaster for working families, and I'll say it again.",
    "We have to secure the border, period. No more excuses from Washington!",
    "Thank you, both candidates. Let's move to the next question.",
    "My opponent voted for that bill \"three times\", which she will not tell you.",
    "Healthcare is a right,\nnot a privilege — and we will fight for it.",
    "<script>alert('owned')</script> is what someone typed into the chat",
    "=HYPERLINK(\"x\",\"click\") appears in a post that a spreadsheet must not run",
    "Jobs, jobs, jobs: that's what this election is about.",
    "The deficit has doubled, and nobody in this room wants to talk about it.",
    "Our schools need teachers, not more standardized tests.",
    "Please, let him finish his answer; you'll have two minutes.",
    "We will bring the factories back, believe me, and fast.",
]


def _rewrite(text: str, strategy: str) -> str:
    words = text.split(" ")
    if strategy == "backtranslate":
        return " ".join(reversed(words))
    return " ".join(w.upper() if i % 3 == 0 else w for i, w in enumerate(words))


def make_run(root: Path, *, attributes: dict[str, list[str]] | None = None,
             with_scores: bool = True) -> RunFiles:
    """A small finished run: manifest, split corpus, one shard and sample scores per strategy."""
    attributes = {"attr_party": PARTIES} if attributes is None else attributes
    root.mkdir(parents=True)
    config = {"generate": {"strategies": [{"name": name} for name in STRATEGIES]}}
    n = len(SENTENCES)
    corpus = pd.DataFrame({
        "doc_id": [f"doc-{i:03d}" for i in range(n)], "text": SENTENCES,
        "author_id": [f"a{i % 4}" for i in range(n)], "group_id": [f"g{i % 3}" for i in range(n)],
        "label": ["x"] * n, "position": pd.array(range(n), dtype="Int64"),
        "split": ["train", "val", "test"] * (n // 3),
        **{name: [values[i % len(values)] for i in range(n)] for name, values in attributes.items()},
    }).astype({"doc_id": "string", "text": "string"})
    (root / "split").mkdir()
    corpus.to_parquet(root / "split" / "corpus.parquet", index=False)
    rng = np.random.default_rng(11)
    for strategy, variant in STRATEGIES.items():
        shard = corpus.assign(strategy=strategy, variant=variant, status="ok", reason=pd.NA,
                              text=[_rewrite(t, strategy) for t in corpus["text"]])
        if strategy == "stymask":  # one failed row: the export must skip it
            shard.loc[shard.index[-1], ["status", "reason", "text"]] = ["failed", "model error", pd.NA]
        (root / "generate" / strategy).mkdir(parents=True)
        shard.to_parquet(root / "generate" / strategy / "shard-00000.parquet", index=False)
        if with_scores:
            scores = pd.DataFrame({
                "doc_id": corpus["doc_id"], "strategy": strategy, "variant": variant,
                "status": shard["status"],
                "bertscore_f1": rng.uniform(0.8, 1.0, n), "bertscore_f1_reason": pd.NA,
                "bleu_divergence": rng.uniform(0.0, 0.6, n), "bleu_divergence_reason": pd.NA,
                "sti": 0.0, "sti_reason": pd.NA,  # constant: no correlation
                "self_bleu": np.nan, "self_bleu_reason": "1 output(s): self-BLEU needs at least 2 outputs",
            })
            scores.loc[scores.index[-1], "bertscore_f1"] = np.inf  # not finite: left out of the correlation
            (root / "metrics" / strategy).mkdir(parents=True)
            scores.to_parquet(root / "metrics" / strategy / "sample_scores.parquet", index=False)
    results = [StageResult("split", {}, {"corpus": _ref(root / "split" / "corpus.parquet")})]
    results += [StageResult("generate", {"label": s, "shard": 0},
                            {"shard": _ref(root / "generate" / s / "shard-00000.parquet")}) for s in STRATEGIES]
    manifest = {"experiment": "tiny", "config": config,
                "stages": {r.name: {"state": "Completed", "result": r.to_json()} for r in results}}
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return RunFiles.open(root)


def _ref(path: Path) -> ArtifactRef:
    return ArtifactRef(path=str(path.resolve()), fingerprint=fingerprint_file(str(path)))


@pytest.fixture()
def run(tmp_path: Path) -> RunFiles:
    return make_run(tmp_path / "run")


def _sheet(run: RunFiles) -> pd.DataFrame:
    return pd.read_csv(run.human_eval_dir / "sheet.csv", dtype=str, keep_default_na=False,
                       encoding="utf-8-sig")


def _write(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_csv(path, index=False, encoding="utf-8-sig")
    return path


# ------------------------------------------------------------------------------------------------- export


def test_export_writes_a_blind_sheet_form_and_key(run: RunFiles) -> None:
    result = export_sheet(run, per_strategy=5, seed=3)
    for path in (result.sheet, result.form, result.key, result.readme, result.settings):
        assert path.is_file() and path.parent == run.human_eval_dir
    sheet, key = _sheet(run), pd.read_parquet(result.key)
    assert tuple(sheet.columns) == SHEET_COLUMNS
    assert list(key.columns) == ["item_id", "doc_id", "strategy", "variant", "attribute", "attribute_value",
                                 "text_digest"]
    assert len(sheet) == len(key) == result.n_items == 10
    assert (sheet[["fluency", "meaning", "attribute_guess", "annotator", "comment"]] == "").all().all()
    assert list(sheet["item_id"]) == [f"item-{i:04d}" for i in range(1, 11)]
    assert key.groupby(["strategy", "variant"]).size().to_dict() == {("backtranslate", "pivot-spa"): 5,
                                                                     ("stymask", "first"): 5}
    assert result.per_group == {"backtranslate (pivot-spa)": 5, "stymask": 5} and not result.short
    # blind: neither the sheet nor the form names a strategy or variant; items of both are interleaved
    for path in (result.sheet, result.form, result.readme, result.settings):
        content = path.read_text(encoding="utf-8")
        for name in ("stymask", "backtranslate", "pivot-spa"):
            assert name not in content, (path.name, name)
    assert key["strategy"].iloc[:5].nunique() == 2 or key["strategy"].iloc[5:].nunique() == 2
    # the same sources for both strategies (the failed stymask row is never picked)
    docs = key.groupby("strategy")["doc_id"].apply(set)
    assert docs["stymask"] == docs["backtranslate"] and "doc-011" not in docs["stymask"]
    # texts: the source from the corpus, the rewrite from the shard of the item's strategy
    corpus = pd.read_parquet(run.corpus()).set_index("doc_id")
    merged = sheet.merge(key, on="item_id")
    for row in merged.itertuples():
        source = corpus.loc[row.doc_id, "text"]
        assert row.source_text.removeprefix("'") == source
        assert row.synthetic_text.removeprefix("'") == _rewrite(source, row.strategy)
        assert row.attribute_value == corpus.loc[row.doc_id, "attr_party"] and row.attribute == "attr_party"
    assert result.choices == ("Democratic", "Moderator", "Republican", CANT_TELL)
    # 11 of 12 docs: backtranslate leaves out the doc stymask failed on, whatever the seed
    for seed in range(3):
        key = pd.read_parquet(export_sheet(run, per_strategy=11, seed=seed, overwrite=True).key)
        docs = key.groupby("strategy")["doc_id"].apply(set)
        assert docs["backtranslate"] == docs["stymask"] and len(docs["stymask"]) == 11


def test_export_is_seeded_and_keeps_a_different_earlier_export(run: RunFiles, tmp_path: Path) -> None:
    first = export_sheet(run, per_strategy=4, seed=7)
    sheet, key = first.sheet.read_bytes(), pd.read_parquet(first.key)
    again = export_sheet(run, per_strategy=4, seed=7)  # same seed: same items, same ids, allowed
    assert again.sheet.read_bytes() == sheet and pd.read_parquet(again.key).equals(key)
    with pytest.raises(InputError, match="--overwrite"):
        export_sheet(run, per_strategy=4, seed=8)
    assert pd.read_parquet(first.key).equals(key)  # untouched
    other = export_sheet(run, per_strategy=4, seed=8, overwrite=True)
    assert not pd.read_parquet(other.key).equals(key)
    # a fresh copy of the run with the same seed gives the same export
    twin = make_run(tmp_path / "twin")
    assert export_sheet(twin, per_strategy=4, seed=7).sheet.read_bytes() == sheet
    assert not list(run.human_eval_dir.glob(".tmp-*"))


def test_form_is_offline_escaped_and_carries_the_guideline(run: RunFiles) -> None:
    result = export_sheet(run, per_strategy=12, seed=0)
    form = result.form.read_text(encoding="utf-8")
    assert not re.search(r"https?://", form) and "src=" not in form and "<link" not in form
    assert "<script>alert" not in form and "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;" in form
    assert form.count("<script") == 2  # the form's own two scripts, nothing from the texts
    assert "localStorage" in form and "Blob" in form and ".download" in form
    assert form.count('class="item"') == result.n_items == 23
    readme = result.readme.read_text(encoding="utf-8")
    for text in [*FLUENCY_SCALE.values(), *MEANING_SCALE.values()]:
        assert text in readme and text in form
    for choice in ("Democratic", "Moderator", "Republican"):
        assert f'<option value="{choice}">' in form
    assert '<option value="can&#39;t tell">' in form
    # the CSV cell that starts with '=' is neutralised for spreadsheets; quotes and newlines survive
    rows = list(csv.reader(io.StringIO(result.sheet.read_text(encoding="utf-8-sig"), newline="")))
    texts = [r[1] for r in rows[1:]]
    assert "'" + SENTENCES[6] in texts and SENTENCES[4] in texts and SENTENCES[3] in texts


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_form_csv_writer_quotes_like_a_csv_reader(run: RunFiles) -> None:
    form = export_sheet(run, per_strategy=1).form.read_text(encoding="utf-8")
    library = re.search(r'<script id="csv-lib">(.*?)</script>', form, re.S).group(1)
    rows = [list(SHEET_COLUMNS),
            ["item-0001", 'say "hi", then\nleave', "a,b", "5", "", CANT_TELL, "Zoë", "ok\r\n"],
            ["item-0002", "=SUM(A1)", "-1 point", "3", "4", "Democratic", "@bob", ""]]
    script = (library + f"\nvar rows = {json.dumps(rows)};"
              "\nrows[2] = rows[2].map(function (v, i) { return i === 3 || i === 4 ? v : neutralize(v); });"
              "\nprocess.stdout.write(toCsv(rows));")
    out = subprocess.run(["node", "-e", script], capture_output=True, timeout=60, check=True).stdout.decode()
    assert out.count("\r\n") == 4  # record ends (RFC 4180) plus the one inside the quoted comment
    parsed = list(csv.reader(io.StringIO(out, newline="")))
    expected = [rows[0], rows[1],
                ["item-0002", "'=SUM(A1)", "'-1 point", "3", "4", "Democratic", "'@bob", ""]]
    assert parsed == expected


def test_attribute_choice(tmp_path: Path) -> None:
    two = make_run(tmp_path / "two", attributes={"attr_party": PARTIES, "attr_gender": ["f", "m"]})
    with pytest.raises(InputError, match="attr_party, attr_gender"):
        export_sheet(two)
    unknown = "attribute 'age' is not in the corpus; choose one of: attr_party"
    with pytest.raises(InputError, match=re.escape(unknown)):
        export_sheet(two, attribute="age")
    chosen = export_sheet(two, attribute="gender", per_strategy=3)
    assert chosen.attribute == "attr_gender" and chosen.choices == ("f", "m", CANT_TELL)
    assert set(pd.read_parquet(chosen.key)["attribute_value"]) <= {"f", "m"}

    none = make_run(tmp_path / "none", attributes={})
    result = export_sheet(none, per_strategy=3)
    assert result.attribute is None and result.choices == ()
    assert "<select" not in result.form.read_text(encoding="utf-8")
    sheet = _sheet(none).assign(fluency="4", meaning="3", annotator="ann")
    imported = import_sheets(none, [_write(sheet, tmp_path / "ok.csv")])
    assert len(imported.annotations) == 6 and imported.annotations["attribute_correct"].isna().all()
    assert imported.agreement.set_index("aspect").loc["attribute_guess", "reason"] == (
        "this export asks no attribute question")
    assert imported.strategy_scores["attribute_n"].eq(0).all()
    sheet.loc[2, "attribute_guess"] = "Democratic"
    with pytest.raises(InputError, match="no attribute question") as caught:
        import_sheets(none, [_write(sheet, tmp_path / "bad.csv")])
    assert (caught.value.row, caught.value.column) == (4, "attribute_guess")


# ------------------------------------------------------------------------------------------------- import


def _fill(run: RunFiles, tmp_path: Path) -> list[Path]:
    """Three simulated annotators who mostly agree, each skipping some items: alice in her own file (empty
    annotator column: named after the file), bob and carol together in one file."""
    sheet = _sheet(run)
    key = pd.read_parquet(run.human_eval_dir / "key.parquet").set_index("item_id")
    rng = np.random.default_rng(5)
    quality = {"stymask": (4.2, 4.6), "backtranslate": (3.0, 3.2)}
    filled = {}
    for name in ("alice", "bob", "carol"):
        part = sheet.copy()
        for i, item in enumerate(part["item_id"]):
            if rng.random() < 0.2:
                continue  # not rated
            fluency, meaning = quality[key.loc[item, "strategy"]]
            part.loc[i, "fluency"] = str(int(np.clip(round(fluency + rng.normal(0, 0.8)), 1, 5)))
            if rng.random() < 0.9:
                part.loc[i, "meaning"] = str(int(np.clip(round(meaning + rng.normal(0, 0.8)), 1, 5)))
            truth = key.loc[item, "attribute_value"]
            guess = truth if rng.random() < 0.6 else str(rng.choice([*PARTIES, CANT_TELL]))
            part.loc[i, "attribute_guess"] = guess
        part["annotator"] = "" if name == "alice" else name
        filled[name] = part
    filled["alice"].loc[0, "comment"] = "odd, but readable"
    filled["alice"].loc[1, "fluency"] = "4.0"  # what a spreadsheet may write back
    filled["bob"].loc[2, "attribute_guess"] = "can’t tell"  # curly apostrophe from autocorrect
    return [_write(filled["alice"], tmp_path / "alice.csv"),
            _write(pd.concat([filled["bob"], filled["carol"]]), tmp_path / "team.csv")]


def test_round_trip_matches_reference_packages(run: RunFiles, tmp_path: Path) -> None:
    export_sheet(run, per_strategy=11, seed=1)
    result = import_sheets(run, _fill(run, tmp_path))
    assert load_results(run).keys() == result.paths.keys()
    for name, table in load_results(run).items():
        assert result.paths[name] == run.human_eval_dir / f"{name}.parquet"
        pd.testing.assert_frame_equal(table, getattr(result, name).reset_index(drop=True))
    annotations = pd.read_parquet(result.paths["annotations"])
    assert set(annotations["annotator"]) == {"alice", "bob", "carol"} == set(result.annotators)
    assert not annotations.duplicated(["item_id", "annotator"]).any()
    alice = annotations[annotations["annotator"] == "alice"].set_index("source_row")
    assert alice.loc[2, "comment"] == "odd, but readable" and alice.loc[3, "fluency"] == 4
    bob = annotations[annotations["annotator"] == "bob"].set_index("source_row")
    assert bob.loc[4, "attribute_guess"] == CANT_TELL and bob.loc[4, "source_file"].endswith("team.csv")
    key = pd.read_parquet(run.human_eval_dir / "key.parquet")
    assert annotations.merge(key, on="item_id", suffixes=("", "_key")).eval("strategy == strategy_key").all()
    known = annotations.dropna(subset=["attribute_guess"])
    assert (known["attribute_correct"] == (known["attribute_guess"] == known["attribute_value"])).all()

    agreement = pd.read_parquet(result.paths["agreement"]).set_index("aspect")
    assert list(agreement.index) == ["fluency", "meaning", "attribute_guess"]
    labels = {"fluency": [1, 2, 3, 4, 5], "meaning": [1, 2, 3, 4, 5],
              "attribute_guess": ["Democratic", "Moderator", "Republican", CANT_TELL]}
    for aspect, values in labels.items():
        wide = annotations.pivot(index="annotator", columns="item_id", values=aspect)
        code = {x: float(i) for i, x in enumerate(values)}
        codes = wide.apply(lambda col, c=code: col.map(c)).astype(float)
        level = "nominal" if aspect == "attribute_guess" else "ordinal"
        reference = krippendorff.alpha(codes.to_numpy(), level_of_measurement=level)
        assert agreement.loc[aspect, "alpha"] == pytest.approx(reference, abs=1e-9)
        kappas = []
        for a, b in itertools.combinations(wide.index, 2):
            both = wide.loc[[a, b]].dropna(axis=1)
            weights = None if aspect == "attribute_guess" else "quadratic"
            kappas.append(cohen_kappa_score(list(both.iloc[0]), list(both.iloc[1]), labels=values,
                                            weights=weights))
        assert agreement.loc[aspect, "kappa"] == pytest.approx(np.mean(kappas), abs=1e-9)
        assert agreement.loc[aspect, "n_items"] == int((wide.notna().sum() >= 2).sum()) > 0
        assert agreement.loc[aspect, "n_annotators"] == 3 and pd.isna(agreement.loc[aspect, "reason"])
    assert agreement.loc["fluency", "alpha"] > 0.2  # the simulated annotators do agree

    scores = pd.read_parquet(result.paths["strategy_scores"]).set_index(["strategy", "variant"])
    grouped = annotations.groupby(["strategy", "variant"])
    pd.testing.assert_series_equal(scores["fluency_mean"], grouped["fluency"].mean().astype(float),
                                   check_names=False, check_index_type=False)
    pd.testing.assert_series_equal(scores["meaning_mean"], grouped["meaning"].mean().astype(float),
                                   check_names=False, check_index_type=False)
    guessed = annotations.dropna(subset=["attribute_guess"])
    accuracy = guessed.groupby(["strategy", "variant"])["attribute_correct"]
    pd.testing.assert_series_equal(scores["attribute_accuracy"], accuracy.mean().astype(float),
                                   check_names=False, check_index_type=False)
    assert (scores["n_items"] == 11).all()
    assert scores["fluency_n"].sum() == annotations["fluency"].notna().sum()
    assert scores.loc[("stymask", "first"), "fluency_mean"] > scores.loc[("backtranslate", "pivot-spa"),
                                                                        "fluency_mean"]

    correlations = pd.read_parquet(result.paths["metric_human_correlations"]).set_index(["metric", "aspect"])
    assert set(correlations.index.get_level_values("metric")) == {"bertscore_f1", "bleu_divergence", "sti",
                                                                  "self_bleu"}
    sample = pd.concat([pd.read_parquet(run.sample_scores(s)) for s in STRATEGIES])
    items = key.merge(sample, on=["doc_id", "strategy", "variant"])
    for aspect in ("fluency", "meaning"):
        human = annotations.groupby("item_id")[aspect].mean().astype(float).rename("human")
        for metric in ("bertscore_f1", "bleu_divergence"):
            pair = items.set_index("item_id")[[metric]].join(human, how="inner")
            pair = pair[np.isfinite(pair[metric]) & np.isfinite(pair["human"])]
            expected = spearmanr(pair[metric], pair["human"])
            row = correlations.loc[(metric, aspect)]
            assert row["n"] == len(pair) and row["rho"] == pytest.approx(expected.statistic, abs=1e-12)
            assert row["p_value"] == pytest.approx(expected.pvalue, abs=1e-12) and pd.isna(row["reason"])
        assert np.isnan(correlations.loc[("sti", aspect), "rho"])
        assert "constant" in correlations.loc[("sti", aspect), "reason"]
        assert correlations.loc[("self_bleu", aspect), "n"] == 0
        assert "at least 3" in correlations.loc[("self_bleu", aspect), "reason"]


def test_undefined_agreement_says_why(run: RunFiles, tmp_path: Path) -> None:
    export_sheet(run, per_strategy=4, seed=0)
    sheet = _sheet(run)
    solo = sheet.assign(fluency="3", meaning=["2", "4"] * 4, attribute_guess="Democratic")
    result = import_sheets(run, [_write(solo, tmp_path / "solo.csv")])
    agreement = result.agreement.set_index("aspect")
    assert agreement["alpha"].isna().all() and agreement["kappa"].isna().all()
    assert "only one annotator (solo)" in agreement.loc["fluency", "reason"]
    assert np.isnan(result.strategy_scores["fluency_std"]).sum() == 0  # 4 ratings each: std defined
    # two annotators on disjoint items: no overlap
    first, second = sheet.iloc[:4].assign(fluency="4"), sheet.iloc[4:].assign(fluency="2")
    result = import_sheets(run, [_write(first, tmp_path / "p.csv"), _write(second, tmp_path / "q.csv")])
    assert "no item has fluency ratings from two or more" in result.agreement.set_index("aspect").loc[
        "fluency", "reason"]
    # two annotators who give every item the same score: no variation
    same = [_write(sheet.assign(fluency="5"), tmp_path / f"{n}.csv") for n in ("r", "s")]
    row = import_sheets(run, same).agreement.set_index("aspect").loc["fluency"]
    assert np.isnan(row["alpha"]) and "no variation" in row["reason"] and row["n_items"] == 8


def _random_ratings(rng: np.random.Generator, trial: int) -> np.ndarray:
    """annotators x items codes 1..k, correlated on odd trials, with up to half the ratings missing."""
    annotators, items, k = rng.integers(2, 6), rng.integers(3, 40), rng.integers(2, 6)
    data = rng.integers(1, k + 1, size=(annotators, items)).astype(float)
    if trial % 2:  # correlated annotators, not only noise
        truth = rng.integers(1, k + 1, size=items)[None, :]
        data = np.clip(truth + rng.integers(-1, 2, size=data.shape), 1, k).astype(float)
    data[rng.random(data.shape) < rng.uniform(0, 0.5)] = np.nan
    return data


def test_krippendorff_alpha_keeps_the_hand_written_figures() -> None:
    """The package gives the figures the hand-written alpha gave, at both levels agreement_table uses
    (ordinal for the 1-5 scales, nominal for the attribute guess), with missing ratings and where alpha is
    undefined."""
    rng = np.random.default_rng(0)
    defined = 0
    for trial in range(60):
        data = _random_ratings(rng, trial)
        for level in ("nominal", "ordinal"):
            old = old_krippendorff_alpha(data, level)
            new = krippendorff_alpha(data, level)
            assert (np.isnan(new) and np.isnan(old)) or new == pytest.approx(old, abs=1e-12), (trial, level)
            defined += not np.isnan(new)
    assert defined >= 100
    degenerate = [np.array([[1.0, np.nan], [np.nan, 2.0]]),  # no item rated twice
                  np.array([[2.0, 2.0], [2.0, 2.0]]),  # no variation
                  np.array([[2.0, 2.0, 5.0], [2.0, 2.0, np.nan]]),  # the only other value is on an item rated once
                  np.full((2, 3), np.nan)]  # nothing rated
    for data in degenerate:
        for level in ("nominal", "ordinal"):
            assert np.isnan(old_krippendorff_alpha(data, level)) and np.isnan(krippendorff_alpha(data, level))
    # the package's documented examples
    example = np.array([[np.nan, np.nan, np.nan, np.nan, np.nan, 3, 4, 1, 2, 1, 1, 3, 3, np.nan, 3],
                        [1, np.nan, 2, 1, 3, 3, 4, 3, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan],
                        [np.nan, np.nan, 2, 1, 3, 4, 4, np.nan, 2, 1, 1, 3, 3, np.nan, 4]])
    assert round(krippendorff_alpha(example, "nominal"), 6) == 0.691358
    ordinal = np.array([[1, 2, 3, 3, 2, 1, 4, 1, 2, np.nan, np.nan, np.nan],
                        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, np.nan, 3],
                        [np.nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, np.nan],
                        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, np.nan]])
    assert round(krippendorff_alpha(ordinal, "ordinal"), 3) == 0.815
    assert krippendorff_alpha(np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]), "ordinal") == pytest.approx(1.0)


def test_cohen_kappa_keeps_the_hand_written_figures() -> None:
    """scikit-learn gives the kappas the hand-written one gave: unweighted and quadratic, labels in order
    (some never used), string labels, and NaN where kappa is undefined."""
    rng = np.random.default_rng(1)
    for trial in range(40):
        n = rng.integers(1, 60)
        a = rng.integers(1, 6, n)
        b = np.clip(a + rng.integers(-2, 3, n), 1, 5) if trial % 2 else rng.integers(1, 6, n)
        for weights in (None, "quadratic"):
            old, new = old_cohen_kappa(a, b, range(1, 6), weights), cohen_kappa(a, b, range(1, 6), weights)
            assert (np.isnan(new) and np.isnan(old)) or new == pytest.approx(old, abs=1e-12), (trial, weights)
    guesses = ["x", "y", "z", "x", "y", "x"], ["x", "y", "y", "x", "z", "z"]
    labels = ["x", "y", "z", "?"]
    assert cohen_kappa(*guesses, labels) == pytest.approx(old_cohen_kappa(*guesses, labels), abs=1e-12)
    assert cohen_kappa([1, 1], [2, 2], range(1, 6)) == old_cohen_kappa([1, 1], [2, 2], range(1, 6)) == 0.0
    for a, b in (([3, 3], [3, 3]), ([], [])):  # total chance agreement; no item
        for weights in (None, "quadratic"):
            assert np.isnan(old_cohen_kappa(a, b, range(1, 6), weights))
            assert np.isnan(cohen_kappa(a, b, range(1, 6), weights))


def test_agreement_table_keeps_the_hand_written_figures() -> None:
    """agreement_table on ratings with gaps: every alpha and kappa equals what the hand-written functions
    give on the same annotators x items codes."""
    rng = np.random.default_rng(2)
    choices = ["Democratic", "Republican", CANT_TELL]
    rows = []
    for item in range(30):
        truth = int(rng.integers(1, 6))
        for annotator in ("ann", "bob", "cy", "dee"):
            if rng.random() < 0.3:
                continue  # not rated by this annotator
            rows.append({"item_id": f"item-{item:04d}", "annotator": annotator,
                         "fluency": int(np.clip(truth + rng.integers(-1, 2), 1, 5)),
                         "meaning": int(rng.integers(1, 6)) if rng.random() < 0.8 else None,
                         "attribute_guess": choices[int(rng.integers(0, 3))] if rng.random() < 0.7 else None})
    annotations = pd.DataFrame(rows)
    table = agreement_table(annotations, choices).set_index("aspect")
    for aspect, level, labels, weights in (("fluency", "ordinal", list(range(1, 6)), "quadratic"),
                                           ("meaning", "ordinal", list(range(1, 6)), "quadratic"),
                                           ("attribute_guess", "nominal", choices, None)):
        assert table.loc[aspect, "level"] == level
        wide = annotations.pivot(index="annotator", columns="item_id", values=aspect)
        codes = wide.apply(lambda col, ls=labels: col.map({x: float(i) for i, x in enumerate(ls)})).astype(float)
        assert table.loc[aspect, "alpha"] == pytest.approx(old_krippendorff_alpha(codes.to_numpy(), level), abs=1e-12)
        kappas = []
        for first, second in itertools.combinations(codes.index, 2):
            both = codes.loc[[first, second]].dropna(axis=1)
            kappas.append(old_cohen_kappa(both.iloc[0].astype(int), both.iloc[1].astype(int), range(len(labels)),
                                          weights))
        assert table.loc[aspect, "kappa"] == pytest.approx(np.nanmean(kappas), abs=1e-12)
        assert table.loc[aspect, "n_pairs"] == 6


@pytest.mark.parametrize(("column", "value", "message"), [
    ("item_id", "item-9999", "unknown item_id 'item-9999'"),
    ("fluency", "7", "fluency must be a whole number from 1 to 5"),
    ("meaning", "good", "meaning must be a whole number from 1 to 5"),
    ("fluency", "3.5", "got '3.5'"),
    ("attribute_guess", "Green",
     "attribute_guess must be one of Democratic; Moderator; Republican; can't tell"),
    ("annotator", "", "missing annotator name"),
    ("fluency", "9" * 100_000, "got '" + "9" * 76 + "..."),  # an echoed cell is cut to 80 characters
])
def test_bad_sheets_name_file_row_and_column(run: RunFiles, tmp_path: Path, column: str, value: str,
                                             message: str) -> None:
    export_sheet(run, per_strategy=3, seed=0)
    sheet = _sheet(run).assign(fluency="4", meaning="4", attribute_guess="Republican", annotator="dana")
    sheet.loc[3, column] = value  # the 4th data row: row 5 in a spreadsheet (the header is row 1)
    path = _write(sheet, tmp_path / "dana.csv")
    with pytest.raises(InputError, match=re.escape(message)) as caught:
        import_sheets(run, [path])
    assert (caught.value.file, caught.value.row, caught.value.column) == (str(path), 5, column)
    assert str(caught.value).startswith(f"file {path}, column '{column}', row 5: ")
    assert not (run.human_eval_dir / "annotations.parquet").exists()  # nothing written


def test_duplicates_missing_columns_and_missing_export(run: RunFiles, tmp_path: Path) -> None:
    assert load_results(run) == {}
    with pytest.raises(InputError, match="synthugc annotate export"):
        import_sheets(run, [tmp_path / "x.csv"])
    export_sheet(run, per_strategy=3, seed=0)
    sheet = _sheet(run).assign(fluency="4", meaning="4", annotator="eve")
    first = _write(sheet, tmp_path / "eve1.csv")
    second = _write(sheet.iloc[[4]], tmp_path / "eve2.csv")
    twice = r"rated twice by annotator 'eve' \(also at .*eve1.csv row 6\)"
    with pytest.raises(InputError, match=twice) as caught:
        import_sheets(run, [first, second])
    assert (caught.value.file, caught.value.row) == (str(second), 2)
    with pytest.raises(InputError, match="missing column\\(s\\) meaning") as caught:
        import_sheets(run, [_write(sheet.drop(columns="meaning"), tmp_path / "short.csv")])
    assert caught.value.file == str(tmp_path / "short.csv")
    with pytest.raises(InputError, match="no ratings"):
        import_sheets(run, [_write(_sheet(run), tmp_path / "empty.csv")])
    with pytest.raises(InputError, match="no such file"):
        import_sheets(run, [tmp_path / "absent.csv"])


def test_a_sheet_of_an_earlier_export_is_refused(run: RunFiles, tmp_path: Path) -> None:
    export_sheet(run, per_strategy=4, seed=0)
    old = _write(_sheet(run).assign(fluency="4", meaning="4", annotator="gus"), tmp_path / "gus.csv")
    export_sheet(run, per_strategy=4, seed=1, overwrite=True)  # same item ids, other items
    with pytest.raises(InputError, match="comes from an earlier export") as caught:
        import_sheets(run, [old])
    assert caught.value.column == "synthetic_text" and caught.value.row >= 2
    # the current sheet passes, with its texts reflowed as a spreadsheet or a browser may (CRLF line ends,
    # runs of spaces); an emptied text cell is not checked
    current = _sheet(run).assign(fluency="3", meaning="3", annotator="gus")
    current["synthetic_text"] = current["synthetic_text"].str.replace("\n", "\r\n").str.replace(" ", "  ")
    current.loc[0, "synthetic_text"] = ""
    assert len(import_sheets(run, [_write(current, tmp_path / "gus.csv")]).annotations) == 8


def test_a_replacing_export_removes_the_ratings_of_the_old_items(run: RunFiles, tmp_path: Path) -> None:
    export_sheet(run, per_strategy=4, seed=0)
    import_sheets(run, [_write(_sheet(run).assign(fluency="4", meaning="4", annotator="gus"), tmp_path / "g.csv")])
    assert (run.human_eval_dir / "agreement.parquet").is_file()
    export_sheet(run, per_strategy=4, seed=0)  # the same export again keeps them
    assert (run.human_eval_dir / "annotations.parquet").is_file()
    export_sheet(run, per_strategy=4, seed=1, overwrite=True)
    assert not any((run.human_eval_dir / f"{n}.parquet").exists()
                   for n in ("annotations", "agreement", "strategy_scores", "metric_human_correlations"))


def test_cli_export_and_import(run: RunFiles, tmp_path: Path) -> None:
    runner = CliRunner()
    exported = runner.invoke(annotate_app, ["export", str(run.root), "--per-strategy", "6", "--seed", "2"])
    assert exported.exit_code == 0, exported.output
    assert f"sheet: {run.human_eval_dir / 'sheet.csv'}" in exported.stdout
    assert "12 items" in exported.stdout and (run.human_eval_dir / "form.html").is_file()

    sheet = _sheet(run).assign(fluency="9", meaning="4", annotator="fay")
    bad = _write(sheet, tmp_path / "fay.csv")
    failed = runner.invoke(annotate_app, ["import", str(run.root), str(bad)])
    assert failed.exit_code == 2
    assert failed.stderr.strip().splitlines() == [
        f"synthugc: error: file {bad}, column 'fluency', row 2: fluency must be a whole number from 1 to 5 "
        "(or empty = not rated), got '9'"]
    assert "Traceback" not in failed.output

    sheets = _fill(run, tmp_path)
    imported = runner.invoke(annotate_app, ["import", str(run.root), *map(str, sheets)])
    assert imported.exit_code == 0, imported.output
    lines = imported.stdout.splitlines()
    assert lines[1].split() == ["aspect", "alpha", "kappa", "items", "annotators", "note"]
    assert [line.split()[0] for line in lines[2:5]] == ["fluency", "meaning", "attribute_guess"]
    assert f"agreement: {run.human_eval_dir / 'agreement.parquet'}" in lines
    # this hand-made run has no report context in its manifest: the ratings are kept, the report is not rebuilt
    assert f"rebuild it with: synthugc report {run.root}" in imported.stderr

    missing = runner.invoke(annotate_app, ["export", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "not a run directory" in missing.stderr
