"""`synthugc audit-dp` and tasks/privacy/dp_audit.py: DP-Prompt's exact privacy loss per output with the real
SmolLM2 (within the per-token and per-document bounds; a planted broken mechanism caught), the teacher-forced
probabilities against a plain step-by-step recomputation, DP-BART's distinguishing game on real MiniLM encoder
outputs (a sound mechanism not refuted; 10x too little noise refuted), the Clopper-Pearson bound against
scipy, dp-accounting's composition against the strategy's stated epsilon, and the command's errors."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import beta

from tasks.generate import build_strategy, generate_synthetic, validate_params
from tasks.generate.dp import clip_representation, dp_prompt_distribution, privatize_representation
from tasks.privacy.dp_audit import (
    DP_BART_COLUMNS,
    DP_PROMPT_COLUMNS,
    EMPTY,
    MAX_COMPOSED,
    TOLERANCE,
    audit_dp_bart,
    audit_dp_prompt,
    clopper_pearson_upper,
    composed_epsilon,
    epsilon_lower_bound,
    neighbour_indices,
)

CLI = Path(sys.executable).parent / "synthugc"
TEXTS = ["The bus was late again and nobody said sorry.", "I love the new cafe on Main Street.",
         "We will win the vote next week, trust me.", "My sister moved to Leeds for her job.",
         "Taxes should be lower for small shops."]


def corpus_file(folder: Path, texts: list[str]) -> Path:
    path = folder / "corpus.parquet"
    pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(texts))], "text": texts,
                  "author_id": [f"a{i}" for i in range(len(texts))]}).to_parquet(path)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> pd.DataFrame:
    from tasks.corpus.importers import read_corpus

    return read_corpus(corpus_file(tmp_path_factory.mktemp("audit"), TEXTS)).corpus


@pytest.fixture(scope="module")
def smollm2():
    """The offline SmolLM2, loaded once for the module (~15 s)."""
    from tasks.models.loaders import load_causal_lm

    torch.set_num_threads(1)
    strategy = build_strategy("dp", {"epsilon": 2.0, "max_tokens": 8})
    return load_causal_lm(strategy.spec)


# --- composition and the Clopper-Pearson bound --------------------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "max_tokens"), [(50.0, 64), (1.0, 64), (8.0, 16), (0.1, 400), (3.0, 1)])
def test_stated_epsilon_is_dp_accounting_composition_of_the_per_token_ones(epsilon, max_tokens):
    strategy = build_strategy("dp", {"epsilon": epsilon, "max_tokens": max_tokens})
    composed = composed_epsilon(strategy.epsilon_token, max_tokens)
    assert composed == pytest.approx(strategy.epsilon_doc_bound, rel=1e-12)
    assert composed == pytest.approx(epsilon, rel=1e-12)
    assert composed_epsilon(strategy.epsilon_token, 1) == pytest.approx(strategy.epsilon_token, rel=1e-12)


def test_composition_is_not_the_truncated_fft_one():
    """self_compose (FFT, tail truncation) reports less than the pure-DP composition at delta 0; ours does not."""
    from dp_accounting.pld import common, privacy_loss_distribution

    one = privacy_loss_distribution.from_privacy_parameters(common.DifferentialPrivacyParameters(1 / 64, 0.0),
                                                             value_discretization_interval=1 / 64)
    assert one.self_compose(64, tail_mass_truncation=0.0).get_epsilon_for_delta(0.0) < 0.95
    assert composed_epsilon(1 / 64, 64) == pytest.approx(1.0, rel=1e-12)
    assert composed_epsilon(0.01, MAX_COMPOSED) == pytest.approx(0.01 * MAX_COMPOSED, rel=1e-12)
    with pytest.raises(ValueError, match="at most 499"):
        composed_epsilon(0.1, 800)  # dp-accounting's FFT would say 33.2 instead of 80


def test_clopper_pearson_upper_is_the_beta_quantile():
    for k, n in [(0, 50), (3, 50), (25, 50), (50, 50), (7, 1000)]:
        reference = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
        assert clopper_pearson_upper(k, n) == pytest.approx(reference, rel=1e-9)


def test_epsilon_lower_bound_formula():
    fpr, fnr = clopper_pearson_upper(2, 500), clopper_pearson_upper(10, 500)
    expected = max(math.log((1 - 1e-5 - fpr) / fnr), math.log((1 - 1e-5 - fnr) / fpr))
    assert epsilon_lower_bound(2, 500, 10, 500, delta=1e-5) == pytest.approx(expected)
    assert epsilon_lower_bound(250, 500, 250, 500) == 0.0  # a coin flip proves nothing
    assert epsilon_lower_bound(0, 500, 0, 500) < math.log(500 / 3)  # what M trials can show at most


def test_neighbours_are_other_documents_and_seeded():
    near = neighbour_indices(6, 3, seed=1)
    assert all(i not in ns and len(ns) == len(set(ns)) == 3 for i, ns in enumerate(near))
    assert near == neighbour_indices(6, 3, seed=1) and near != neighbour_indices(6, 3, seed=2)
    assert neighbour_indices(2, 5, seed=0) == [[1], [0]] and neighbour_indices(1, 3, seed=0) == [[]]


# --- DP-Prompt with the real SmolLM2 ------------------------------------------------------------------------------


@pytest.mark.slow
def test_dp_prompt_losses_stay_within_the_bounds_and_audit_generates_output(smollm2, corpus):
    strategy = build_strategy("dp", {"epsilon": 2.0, "max_tokens": 8})
    table = audit_dp_prompt(strategy, corpus, neighbours=2, seed=0)
    assert tuple(table.columns) == DP_PROMPT_COLUMNS and len(table) == len(TEXTS)
    assert table["reason"].isna().all() and (table["neighbours"] == 2).all()
    assert (table["epsilon_nominal"] == 2.0).all() and table["epsilon_per_token"].tolist() == pytest.approx([0.25] * 5)
    assert not table["violation"].any()
    assert (table["token_loss_max"] <= 0.25 + TOLERANCE).all()
    assert (table["privacy_loss_max"] <= table["tokens"] * 0.25 + TOLERANCE).all()
    assert (table["privacy_loss_p99"] <= table["privacy_loss_max"] + 1e-12).all()
    assert (table["privacy_loss_max"] > 0).all()  # the documents do change the distribution
    assert table["epsilon_spent"].tolist() == pytest.approx((table["tokens"] * 0.25).tolist())
    # the outputs audited are the ones generate emits with the same seed
    generated = generate_synthetic(strategy, corpus, seed=0)
    assert table["tokens"].tolist() == generated["n_tokens"].astype(int).tolist()
    assert set(table["worst_neighbour"]) <= set(corpus["doc_id"])


@pytest.mark.slow
def test_teacher_forcing_matches_a_step_by_step_recomputation(smollm2, corpus):
    """Reference: log p(y_t | x, y_<t) from one unpadded forward per step (no cache, no batch), under the
    mechanism's distribution; the audit's batched, left-padded teacher forcing must give the same numbers."""
    from tasks.generate.dp import dp_prompt_sample
    from tasks.privacy.dp_audit import teacher_forced_log_probs

    tokenizer, model = smollm2
    strategy = build_strategy("dp", {"epsilon": 2.0, "max_tokens": 8})
    prompts, _ = strategy.prompts(tokenizer, corpus["text"].tolist()[:3])
    y = dp_prompt_sample(tokenizer, model, prompts[:1], b_min=5, b_max=25, temperature=strategy.temperature,
                         max_tokens=8, seeds=[3])[0]
    got = teacher_forced_log_probs(tokenizer, model, prompts, [y] * 3, b_min=5, b_max=25,
                                   temperature=strategy.temperature, distribution=dp_prompt_distribution)
    for prompt, row in zip(prompts, got, strict=True):
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        expected = []
        for t, token in enumerate(y):
            with torch.inference_mode():
                logits = model(input_ids=torch.tensor([ids + y[:t]])).logits[0, -1]
            expected.append(math.log(float(dp_prompt_distribution(logits, 5, 25, strategy.temperature)[token])))
        assert row == pytest.approx(np.array(expected), abs=1e-4)


@pytest.mark.slow
def test_planted_broken_mechanisms_are_caught(smollm2, corpus):
    """Temperature ignored (T = 1): each token can spend 2 (b_max - b_min) = 40, the budget is 2 per document.
    Clipping off with a narrow clip (b_max - b_min = 1, so T = 8 promises 0.25 per token): the raw logits of
    two documents differ by far more than the 2 the bound allows."""
    ignored_t = build_strategy("dp", {"epsilon": 2.0, "max_tokens": 8})
    table = audit_dp_prompt(ignored_t, corpus, neighbours=2, seed=0,
                            distribution=lambda logits, lo, hi, t: dp_prompt_distribution(logits, lo, hi, 1.0))
    assert table["violation"].all()
    assert (table["privacy_loss_max"] > table["epsilon_nominal"]).any()

    narrow = build_strategy("dp", {"epsilon": 2.0, "max_tokens": 8, "b_min": 10, "b_max": 11})
    sound = audit_dp_prompt(narrow, corpus, neighbours=2, seed=0)
    assert not sound["violation"].any()
    unclipped = audit_dp_prompt(narrow, corpus, neighbours=2, seed=0,
                                distribution=lambda logits, lo, hi, t: torch.softmax(logits.double() / t, dim=-1))
    assert unclipped["violation"].any()
    assert (unclipped["token_loss_max"] > unclipped["epsilon_per_token"]).any()


# --- DP-BART's distinguishing game on real MiniLM encoder outputs ------------------------------------------------


def ten_times_too_little_noise(hidden, **kwargs):
    """The mechanism with its noise scaled down 10x (the scale it reports is the nominal one)."""
    noised, scale = privatize_representation(hidden, **kwargs)
    clipped = clip_representation(hidden.double(), kwargs["clip"], kwargs["clipping"])
    return clipped + (noised.double() - clipped) / 10, scale


def test_dp_bart_game_refutes_too_little_noise_only(corpus):
    params = validate_params("dp", {"method": "dp-bart", "epsilon": 1.0, "max_input_tokens": 16})
    sound = audit_dp_bart(params, corpus, neighbours=3, trials=600, seed=0)
    assert tuple(sound.columns) == DP_BART_COLUMNS and len(sound) == len(TEXTS)
    assert sound["reason"].isna().all() and (sound["trials"] == 300).all()
    assert not sound["violation"].any() and (sound["epsilon_lower_bound"] <= 1.0).all()
    broken = audit_dp_bart(params, corpus, neighbours=3, trials=600, seed=0, privatize=ten_times_too_little_noise)
    assert broken["violation"].any() and broken["epsilon_lower_bound"].max() > 1.0
    assert broken["epsilon_lower_bound"].mean() > sound["epsilon_lower_bound"].mean()
    assert (broken["neighbour"] != broken["doc_id"]).all()


def test_dp_bart_records_a_document_without_tokens(tmp_path):
    from tasks.corpus.importers import read_corpus

    real = read_corpus(corpus_file(tmp_path, [*TEXTS[:3], "\u0301"])).corpus
    assert len(real) == 4  # a lone combining accent: valid, but the uncased encoder strips it to nothing
    params = validate_params("dp", {"method": "dp-bart", "epsilon": 1.0, "max_input_tokens": 8})
    table = audit_dp_bart(params, real, neighbours=2, trials=40, seed=0)
    assert table.loc[3, "reason"] == EMPTY and pd.isna(table.loc[3, "violation"])
    assert table.loc[:2, "reason"].isna().all()
    assert "d3" not in set(table["neighbour"].dropna())


def test_report_dp_table_sets_the_audited_epsilon_beside_the_nominal_one(tmp_path, corpus):
    """The report's DP table: an audited DP setting shows its audit's figures (here DP-BART's largest lower bound,
    as read back from the parquet the audit-dp stage writes), one without an audit its nominal epsilon and how to
    audit it; a strategy without an epsilon is no DP setting."""
    from tasks.report.tables import NOT_AUDITED, dp_table
    from tasks.scores import score_frame

    params = validate_params("dp", {"method": "dp-bart", "epsilon": 1.0, "max_input_tokens": 8})
    audit_dp_bart(params, corpus, neighbours=2, trials=40, seed=0).to_parquet(tmp_path / "dp_audit.parquet")
    audit = pd.read_parquet(tmp_path / "dp_audit.parquet")
    row = {"level": "sample-mean", "metric": "bleu_divergence", "value": 0.5, "n": 5, "n_failed": 0, "signature": "",
           "reason": None}
    summary = score_frame([{**row, "strategy": "bart", "variant": "dp-bart-eps1", "epsilon": 1.0},
                           {**row, "strategy": "prompt", "variant": "dp-prompt-eps8", "epsilon": 8.0},
                           {**row, "strategy": "stymask", "variant": "first"}])
    table = dp_table(summary, {"bart": audit}, order=["prompt", "bart", "stymask"]).set_index("strategy")
    assert list(table.index) == ["prompt (dp-prompt-eps8)", "bart (dp-bart-eps1)"]
    bound = audit.loc[audit["reason"].isna(), "epsilon_lower_bound"].max()
    assert table.loc["bart (dp-bart-eps1)"].tolist() == [
        "1", f"{bound:.4g} (dp-bart: largest epsilon lower bound)", str(len(TEXTS)),
        str(int(audit["violation"].sum()))]
    assert table.loc["prompt (dp-prompt-eps8)"].tolist() == ["8", NOT_AUDITED, "–", "–"]


# --- the command --------------------------------------------------------------------------------------------------


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), "audit-dp", *args], capture_output=True, text=True, env=dict(os.environ),
                          timeout=600)


@pytest.mark.parametrize(("args", "expected"), [
    (["--strategy", "stymask", "--set", "epsilon=1"], "strategy 'stymask' has no privacy mechanism to audit"),
    (["--strategy", "dp", "--set", "epsilon=0"], "strategy.dp.epsilon: Input should be greater than 0"),
    (["--strategy", "dp", "--set", "epsilon=-3"], "strategy.dp.epsilon: Input should be greater than 0"),
    (["--strategy", "dp", "--set", "epsilon=lots"], "strategy.dp.epsilon: Input should be a valid number"),
    (["--strategy", "dp", "--set", "epsilon=.inf"], "strategy.dp.epsilon: Input should be a finite number"),
    (["--strategy", "dp"], "strategy.dp.epsilon: Field required"),
    (["--strategy", "dp", "--set", "epsilon=1", "--set", "max_tokens=800"], "strategy.dp.max_tokens: the audit"),
    (["--strategy", "nope"], "unknown strategy 'nope'"),
])
def test_audit_dp_bad_arguments_exit_2_with_one_line(tmp_path, args, expected):
    out = tmp_path / "audit.parquet"
    proc = _run("--corpus", str(corpus_file(tmp_path, TEXTS)), "--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_audit_dp_command_writes_the_dp_bart_audit(tmp_path):
    out = tmp_path / "out" / "audit.parquet"
    proc = _run("--corpus", str(corpus_file(tmp_path, TEXTS)), "--strategy", "dp", "--set", "method=dp-bart",
                "--set", "epsilon=1", "--set", "max_input_tokens=16", "--trials", "200", "--neighbours", "2",
                "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "dp-bart: nominal epsilon 1 per document, audited (largest epsilon lower bound)" in proc.stdout
    assert "0 violation(s), 0 not scored" in proc.stdout
    table = pd.read_parquet(out)
    assert tuple(table.columns) == DP_BART_COLUMNS and table["doc_id"].tolist() == [f"d{i}" for i in range(5)]
    assert (table["trials"] == 100).all()


@pytest.mark.slow
def test_audit_dp_command_writes_the_dp_prompt_audit(tmp_path):
    out = tmp_path / "audit.parquet"
    proc = _run("--corpus", str(corpus_file(tmp_path, TEXTS[:3])), "--strategy", "dp", "--set", "epsilon=4",
                "--set", "max_tokens=6", "--neighbours", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "dp-prompt: nominal epsilon 4 per document" in proc.stdout and "0 violation(s)" in proc.stdout
    table = pd.read_parquet(out)
    assert tuple(table.columns) == DP_PROMPT_COLUMNS and len(table) == 3
    assert (table["privacy_loss_max"] <= 4.0).all() and not table["violation"].any()
