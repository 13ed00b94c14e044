"""The attack registry: one registration is all a new attack needs (config check, plan, flow stage, CLI
listing), parameters are validated against what the attack declares, and the registry tables of docs/reference.md are
generated from the registries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prefect import flow

import tasks.privacy.attacks as registry
from flows.config import parse_config
from flows.experiment import run_experiment
from tasks.catalogues import REGISTRIES, listing_lines, update_readme
from tasks.errors import ConfigError
from tasks.layout import read_stage_tables
from tasks.privacy.attacks import (
    Attack,
    attack_names,
    available_attacks,
    build_attack,
    catalogue_rows,
    register_attack,
    run_attacks,
)
from tasks.privacy.attribution import attribute_scores, timeline_codes
from tasks.privacy.reidentify import ReidResult

ROOT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "synthugc"


@dataclass(frozen=True)
class LengthParams:
    scale: float = 1.0


class PostLength(Attack):
    """Post length: the author whose mean post length is closest (a toy attack for the registry's tests)."""

    @property
    def signature(self) -> str:
        return f"metric:reid_length|scale:{self.params.scale}"

    def prepare(self, histories, setting, held_out, *, index=None):
        hist = pd.read_parquet(histories) if not isinstance(histories, pd.DataFrame) else histories
        if held_out is not None:
            hist = hist[~hist["doc_id"].astype(str).isin(held_out)]
        means = hist.groupby("author_id")["text"].apply(lambda t: t.str.len().mean())
        return means.index.to_numpy(dtype=object), means.to_numpy(dtype=float)

    def run(self, prepared, timelines) -> ReidResult:
        authors, means = prepared
        codes, groups, true_author, n_posts = timeline_codes(timelines)
        lengths = np.bincount(codes, weights=timelines["text"].str.len().to_numpy(), minlength=len(groups)) / n_posts
        scores = -np.abs(lengths[:, None] - means[None, :]) * self.params.scale
        per, summary = attribute_scores(scores, authors, groups, true_author, n_posts)
        return ReidResult(per_timeline=per, summary={**summary, "accuracy": summary["accuracy_at_1"]})


@pytest.fixture()
def length_attack():
    register_attack("length", params=LengthParams)(PostLength)
    yield "length"
    registry._REGISTRY.pop("length", None)


def _corpus(path: Path) -> Path:
    rows = [{"doc_id": f"a{a}-{i}", "text": ("word " * (3 + 6 * a)).strip() + f" {i}.", "author_id": f"a{a}",
             "group_id": f"a{a}"} for a in range(4) for i in range(6)]
    pd.DataFrame(rows).to_parquet(path)
    return path


def _config(corpus: Path, root: Path, attacks: list[str], **reid) -> dict:
    return {"experiment": "reg", "seed": 3, "storage_root": str(root), "data": {"path": str(corpus)},
            "generate": {"shard_size": 50, "strategies": [{"name": "stymask"}]},
            "privacy": {"profiling": {"attributes": []}, "membership": {"enabled": False},
                        "reidentify": {"attacks": attacks, **reid}},
            "utility": {"enabled": False}}


def test_a_registered_attack_is_known_everywhere_and_runs_in_the_flow(length_attack, tmp_path, monkeypatch):
    """Registering is all: the config accepts it, `all` includes it, the plan runs it as part of the
    reidentify stage (no index stage: it builds none), and its rows land in the long score table."""
    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    assert "length" in available_attacks() and "length" in attack_names("all")
    cfg = parse_config(_config(_corpus(tmp_path / "c.parquet"), tmp_path / "runs", ["length"],
                               params={"length": {"scale": 2.0}}))

    @flow(name="registry-test")
    def run():
        return run_experiment(cfg, families=("privacy",), max_parallel=2)

    result = run()
    assert set(result.stages) >= {"generate[stymask][0]", "reidentify[stymask]"}
    assert not any(name.startswith("index-histories") for name in result.stages)
    assert result.stages["reidentify[stymask]"] == "Completed"
    tables = read_stage_tables(tmp_path / "runs" / "reg" / "privacy" / "stymask", "reidentify")
    scores = tables["scores"]
    assert set(scores["attack"]) == {"length"} and set(scores["adversary"]) == {"full", "disjoint"}
    assert scores["signature"].str.contains("scale:2.0").all()
    accuracy = scores[(scores["metric"] == "reid_accuracy") & (scores["strategy"] == "stymask")]
    full = accuracy.loc[accuracy["adversary"] == "full", "value"].item()
    assert full == 1.0  # four authors, four well-separated post lengths, lengths barely touched by stymask
    assert set(tables["per_timeline"]["attack"]) == {"length"}


def test_the_plan_indexes_histories_only_for_an_attack_that_builds_an_index(tmp_path):
    from flows.plan import plan_stages, run_place

    corpus = _corpus(tmp_path / "c.parquet")
    for attacks, indexed in ((["stylometric"], []), (["minhash", "stylometric"], ["index-histories[minhash]"])):
        cfg = parse_config(_config(corpus, tmp_path / "runs", attacks))
        plan = plan_stages(cfg, ("privacy",), run_place(cfg), corpus_rows=24, ingested=None, human_eval=list)
        names = [call.name for call in plan.calls]
        assert [n for n in names if n.startswith("index-histories")] == indexed
        [reid] = [call for call in plan.calls if call.kind == "reidentify"]
        assert [name for name, _ in reid.params["options"].attacks] == attacks
        assert all(params["seed"] == 3 for _, params in reid.params["options"].attacks)  # the run's seed


@pytest.mark.parametrize(("reid", "message"), [
    ({"attacks": ["ngram"]}, r"privacy\.reidentify\.attacks\.0: unknown attack 'ngram' \(available: .*minhash"),
    ({"attacks": ["minhash"], "params": {"stylometric": {"mode": "exact"}}},
     r"privacy\.reidentify\.params\.stylometric: attack 'stylometric' is not in privacy\.reidentify\.attacks"),
    ({"attacks": ["minhash"], "params": {"minhash": {"kk": 3}}},
     r"privacy\.reidentify\.params\.minhash\.kk: unknown parameter \(known: bands, "),
    ({"attacks": ["minhash"], "params": {"minhash": {"k": "64"}}},
     r"privacy\.reidentify\.params\.minhash\.k: Input should be a valid integer \(got '64'\)"),
    ({"attacks": ["minhash"], "params": {"minhash": {"k": True}}},
     r"privacy\.reidentify\.params\.minhash\.k: Input should be a valid integer"),
    ({"attacks": ["stylometric"], "params": {"stylometric": {"width": 1000}}},
     r"privacy\.reidentify\.params\.stylometric: width must be a power of two"),
])
def test_config_errors_name_the_key_path(tmp_path, reid, message):
    with pytest.raises(ConfigError, match=r"^c\.yaml: " + message):
        parse_config(_config(_corpus(tmp_path / "c.parquet"), tmp_path, **reid), source="c.yaml")


def test_registration_is_checked():
    with pytest.raises(ValueError, match="registered twice"):
        register_attack("minhash", params=LengthParams)(PostLength)
    with pytest.raises(ValueError, match=r"attack name '\.\./escape'"):  # it names the history index's folder
        register_attack("../escape", params=LengthParams)
    with pytest.raises(TypeError, match="must be a dataclass"):
        register_attack("other", params=dict)

    class NoDoc(PostLength):
        __doc__ = None

    with pytest.raises(TypeError, match="needs a docstring"):
        register_attack("nodoc", params=LengthParams)(NoDoc)
    assert "nodoc" not in available_attacks()


def test_run_attacks_names_attack_adversary_and_signature(length_attack, tmp_path):
    corpus = pd.read_parquet(_corpus(tmp_path / "c.parquet"))
    [full, disjoint] = run_attacks(corpus, corpus, [build_attack("length")], ["full", "disjoint"])
    assert (full.summary["attack"], full.summary["adversary"]) == ("length", "full")
    assert disjoint.summary["adversary"] == "disjoint" and full.summary["signature"] == "metric:reid_length|scale:1.0"
    assert full.summary["accuracy_at_1"] == 1.0
    assert disjoint.summary["n_no_history"] == 4  # every post is held out: nothing left of any author


def test_attacks_listing_is_the_registry(length_attack):
    proc = subprocess.run([str(CLI), "attacks", "--json"], capture_output=True, text=True, env=dict(os.environ),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert [r["name"] for r in listed] == [n for n in available_attacks() if n != "length"]  # another process
    minhash = next(r for r in listed if r["name"] == "minhash")
    assert minhash["params"]["k"] == 128 and minhash["needs_gpu"] is False
    assert next(r for r in listed if r["name"] == "embedding")["needs_gpu"] is True
    lines = listing_lines("attacks")
    assert lines[0].split()[:3] == ["attack", "GPU", "evidence"]
    assert [line.split()[0] for line in lines[1:]] == [r["name"] for r in catalogue_rows()]


def test_strategies_listing_is_the_registry():
    from tasks.generate import available_strategies
    from tasks.generate.base import strategy_class

    shipped = [n for n in available_strategies() if strategy_class(n).__module__.startswith("tasks.generate")]
    proc = subprocess.run([str(CLI), "strategies"], capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("strategy") and [line.split()[0] for line in lines[1:]] == shipped  # another process
    stymask = next(line for line in lines if line.startswith("stymask"))
    assert "intensity=1.0" in stymask and " no " in stymask


def test_the_registry_tables_are_generated_from_the_registries(tmp_path):
    """docs/reference.md holds each registry's table exactly as generated (python -m tasks.catalogues
    docs/reference.md), checked in a fresh process: this one's registries hold the tests' own registrations."""
    page = ROOT / "docs" / "reference.md"
    check = [sys.executable, "-m", "tasks.catalogues", "--check"]
    proc = subprocess.run([*check, str(page)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    stale = tmp_path / "reference.md"
    stale.write_text(page.read_text(encoding="utf-8").replace("| `stymask` |", "| `stymask2` |"))
    proc = subprocess.run([*check, str(stale)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "a registry table is stale" in proc.stderr
    text = page.read_text(encoding="utf-8")
    assert all(text.count(f"<!-- registry:{name} -->") == 1 for name in REGISTRIES)  # each table once
    with pytest.raises(ValueError, match="no <!-- registry:strategies -->"):
        update_readme("no blocks here")


def test_the_privacy_table_describes_its_attacks_from_the_registry(length_attack):
    from tasks.report.tables import privacy_table

    rows = [{"strategy": s, "variant": "first", "level": "privacy", "metric": "reid_accuracy", "value": v, "n": 10,
             "n_failed": 0, "signature": "", "reason": None, "attack": attack, "adversary": "full"}
            for s, v in (("a", 0.3), ("b", 0.6)) for attack in ("length", "stylometric")]
    caption = privacy_table(pd.DataFrame(rows)).caption
    assert "length: Post length: the author whose mean post length is closest" in caption
    assert "stylometric: Writing style: TF-IDF author profiles" in caption and "minhash" not in caption


def test_all_runs_every_registered_attack_that_can_run_and_names_the_others_with_why(monkeypatch):
    """``all`` is every registered attack; a GPU attack runs on CPU only up to its declared history size (or
    SYNTHUGC_CPU_ATTACK_POSTS) and is otherwise left out with the reason; named attacks run as asked and the
    others are named as not asked for."""
    from tasks.privacy.attacks import attack_class, plan_attacks

    monkeypatch.delenv("SYNTHUGC_CPU_ATTACK_POSTS", raising=False)  # the attack's own limit

    embedding = attack_class("embedding")
    small, large = embedding.cpu_posts, embedding.cpu_posts + 1
    on_cpu = plan_attacks("all", small, gpu=False)
    assert set(on_cpu.names) == set(available_attacks()) and not on_cpu.left_out
    big = plan_attacks("all", large, gpu=False)
    assert "embedding" not in big.names and set(big.names) | {"embedding"} == set(available_attacks())
    assert big.left_out == {"embedding": f"needs a GPU for {large:,} history posts (on CPU it runs up to "
                                         f"{small:,}), and none is present"}
    assert plan_attacks("all", large, gpu=True).names == tuple(sorted(available_attacks()))
    narrowed = plan_attacks(["delta", "embedding"], large, gpu=False, asked="--judge")
    assert narrowed.names == ("delta", "embedding")  # asked by name: it runs, however slow
    assert narrowed.left_out["minhash"] == "not asked for (--judge delta,embedding)"
    twice = plan_attacks(["delta", "delta"], large, gpu=False, asked="--judge")  # a judge that is the feedback too
    assert twice.names == ("delta",) and twice.left_out["minhash"] == "not asked for (--judge delta)"
    with pytest.raises(ValueError, match=r"attack must be one of .* or all; got 'nope'"):
        plan_attacks("nope", 10)
    monkeypatch.setenv("SYNTHUGC_CPU_ATTACK_POSTS", "0")  # never on CPU
    assert plan_attacks("all", 1, gpu=False).left_out == {"embedding": "needs a GPU, and none is present"}


def test_reidentify_all_names_the_attack_it_left_out_in_the_log_and_the_scores(tmp_path):
    """`synthugc reidentify --attack all` on histories too large for the embedding attack on CPU: every other
    attack runs, the log says which was left out and why, and the scores carry it with the reason and no value."""
    from tasks.corpus.simulate import simulate_histories, simulate_synthetic
    n_posts = 2_000
    histories = simulate_histories(40, n_posts, seed=3, out_path=tmp_path / "h.parquet")
    synthetic = simulate_synthetic(histories, n_timelines=8, n_posts=40, rewrite_strength=0.2, seed=4)
    synthetic.assign(strategy="copy", variant="first", status="ok").to_parquet(tmp_path / "s.parquet")
    done = subprocess.run([str(CLI), "reidentify", "--histories", str(histories), "--synthetic",
                           str(tmp_path / "s.parquet"), "--out", str(tmp_path / "reid"), "--attack", "all",
                           "--adversary", "disjoint"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SYNTHUGC_CPU_ATTACK_POSTS": "1000"})
    assert done.returncode == 0, done.stderr
    assert (f"synthugc: attack left out: embedding: needs a GPU for {n_posts:,} history posts (on CPU it runs up "
            "to 1,000)") in done.stderr
    scores = pd.read_parquet(next((tmp_path / "reid").glob("*scores.parquet")))
    ran = set(scores.loc[scores["value"].notna() & (scores["metric"] == "reid_accuracy"), "attack"])
    assert ran == set(available_attacks()) - {"embedding"}
    skipped = scores[(scores["attack"] == "embedding") & (scores["strategy"] != "chance")]
    assert set(skipped["metric"]) == {"reid_accuracy", "reid_residual_risk"} and skipped["value"].isna().all()
    assert skipped["reason"].str.startswith("not run: needs a GPU").all()


def test_forgetting_a_history_file_frees_what_every_attack_built_from_it_and_nothing_else(tmp_path):
    from tasks.corpus.simulate import simulate_histories
    from tasks.privacy.attacks import forget_histories

    one = simulate_histories(10, 300, seed=1, out_path=tmp_path / "one.parquet")
    two = simulate_histories(10, 300, seed=2, out_path=tmp_path / "two.parquet")
    attack = build_attack("delta")
    first, other = attack.prepare(one, "full", None), attack.prepare(two, "full", None)
    assert attack.prepare(one, "full", None).profiles is first.profiles  # remembered
    forget_histories(one)
    assert attack.prepare(one, "full", None).profiles is not first.profiles  # built again
    assert attack.prepare(two, "full", None).profiles is other.profiles  # the other file's kept
