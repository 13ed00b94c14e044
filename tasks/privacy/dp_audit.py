"""Empirical audit of the DP rewriters (tasks/generate/dp.py) on a user's own corpus: is the nominal epsilon
what the mechanism really spends on these documents?

**DP-Prompt** (the privacy loss of one output is exactly computable): for each document x the strategy's own
output y is sampled again (same prompt, same seed, same mechanism, so y is what ``generate`` emits), then
teacher-forced under x and under K neighbouring documents x' (other documents of the corpus, drawn with a
seeded RNG), with the same clipped-logit, temperature distribution the mechanism samples from. The loss of y
against x' is ``|log p(y|x) - log p(y|x')|`` (sum over its tokens). Theory: with logits clipped to
``[b_min, b_max]`` and temperature T, every token's loss is at most ``2 (b_max - b_min) / T = epsilon_token``
and a text's at most ``tokens * epsilon_token <= epsilon_nominal``. A row per output (:data:`DP_PROMPT_COLUMNS`):
``privacy_loss_max`` (max over the neighbours), ``privacy_loss_p99`` (99th percentile over the neighbours),
``token_loss_max`` (the largest single-token loss), ``violation`` (the text's loss above ``epsilon_nominal``
or a token's above ``epsilon_per_token``, beyond :data:`TOLERANCE`). A sound mechanism never violates; a
broken one (clipping off, temperature ignored: pass another ``distribution``) does.

**DP-BART** (noise on the encoder output): a distinguishing game (Jagielski, Ullman and Oprea, "Auditing
Differentially Private Machine Learning: How Private is Private SGD?", NeurIPS 2020; Nasr, Song, Thakurta,
Papernot and Carlini, "Adversary Instantiation: Lower Bounds for Differentially Private Machine Learning",
IEEE S&P 2021). For each document x and the most distant of its K neighbours x' (the attacker's best pair),
M trials release ``privatize_representation`` of x or of x' (half each, seeded order); the attacker scores each
release with the likelihood ratio of the two clipped representations (a projection for Gaussian noise, an L1
difference for Laplace) and says "x" above a threshold chosen on the first half of the trials. On the second
half, Clopper-Pearson upper bounds on its false positive and false negative rates give the lower bound
``eps_lb = max(log((1 - delta - FPR_u) / FNR_u), log((1 - delta - FNR_u) / FPR_u))``; a sound mechanism keeps
it at or below the nominal epsilon (with the bounds' confidence), one with too little noise does not. No BART
weights install offline, so the game runs on the mechanism itself applied to real encoder outputs of the
offline token encoder (MiniLM, role ``token_encoder``), padded to the strategy's ``max_input_tokens``: it audits
the clipping and noise calibration, not a particular BART. With a finite M the bound cannot exceed about
``log(M / 6)``: a large nominal epsilon can be refuted only by many trials.

**Composition**: per-document epsilons are composed from per-token ones with ``dp-accounting`` (a PLD of the
pure epsilon-DP per-token mechanism, composed exactly): :func:`composed_epsilon`.

A document the audit cannot score (empty after tokenization, no neighbour, its generation failed) keeps its
row, with ``reason`` saying why.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tasks.errors import ConfigError
from tasks.generate import available_strategies, build_strategy, validate_params
from tasks.generate.base import strategy_class
from tasks.models.loaders import load_token_encoder
from tasks.models.registry import resolve_model

#: Float slack when comparing a measured loss with its bound (float32 logits, float64 softmax).
TOLERANCE = 1e-6
#: Teacher-forced sequences per forward pass (document + neighbours, several documents together).
FORWARD_ROWS = 16
#: Thresholds the game's attacker tries on the selection half of the trials.
THRESHOLDS = 16
#: Noised representations drawn per call of the mechanism in the game (memory: rows x n x d floats).
TRIAL_CHUNK = 64
CONFIDENCE = 0.95
#: Compositions dp-accounting keeps exact (sparse PMFs of up to 1,000 points; beyond, its FFT loses the top).
MAX_COMPOSED = 499

EMPTY = "empty after tokenization"
NO_NEIGHBOUR = "no neighbouring document to compare with"

DP_PROMPT_COLUMNS = ("doc_id", "method", "epsilon_nominal", "epsilon_per_token", "tokens", "epsilon_spent",
                     "neighbours", "privacy_loss_max", "privacy_loss_p99", "token_loss_max", "worst_neighbour",
                     "violation", "reason")
DP_BART_COLUMNS = ("doc_id", "method", "mechanism", "epsilon_nominal", "delta", "neighbour", "distance",
                   "noise_scale", "trials", "fpr", "fnr", "epsilon_lower_bound", "violation", "reason")


def no_mechanism(strategy: str) -> ConfigError:
    """The error for a strategy that releases without a DP mechanism."""
    return ConfigError(f"strategy '{strategy}' has no privacy mechanism to audit")


def has_mechanism(name: str) -> bool:
    """Whether registered strategy ``name`` releases through a DP mechanism this audit can check."""
    # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
    from tasks.generate.dp import DPStrategy

    return issubclass(strategy_class(name), DPStrategy)


@functools.cache
def composed_epsilon(epsilon_token: float, count: int) -> float:
    """Pure-DP sequential composition of ``count`` epsilon_token-DP mechanisms, by dp-accounting: the PLD of a
    pure epsilon-DP mechanism (``from_privacy_parameters(epsilon, 0)``, discretised on epsilon itself, so with
    no rounding), composed ``count`` times without tail truncation; the smallest epsilon with delta 0.

    Composed pairwise (sparse PMFs, exact products) rather than ``self_compose``, whose FFT loses the
    tiny masses at the top of the support and would report less than the true composition; past
    :data:`MAX_COMPOSED` mechanisms dp-accounting switches to the FFT too, so that is refused (ValueError)."""
    from dp_accounting.pld import common, privacy_loss_distribution

    if count > MAX_COMPOSED:
        raise ValueError(f"dp-accounting composes at most {MAX_COMPOSED} per-token mechanisms exactly, not {count}")
    if count < 1:
        return 0.0
    one = privacy_loss_distribution.from_privacy_parameters(
        common.DifferentialPrivacyParameters(epsilon_token, 0.0), value_discretization_interval=epsilon_token)
    total = one
    for _ in range(count - 1):
        total = total.compose(one, tail_mass_truncation=0.0)
    return float(total.get_epsilon_for_delta(0.0))


def neighbour_indices(n: int, k: int, seed: int) -> list[list[int]]:
    """For each of ``n`` documents, ``min(k, n - 1)`` other documents drawn without replacement (seeded)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        others = np.delete(np.arange(n), i)
        out.append(sorted(rng.choice(others, size=min(k, n - 1), replace=False).tolist()) if n > 1 else [])
    return out


# ---------------------------------------------------------------- DP-Prompt


def teacher_forced_log_probs(tokenizer: Any, model: Any, prompts: Sequence[str], outputs: Sequence[Sequence[int]], *,
                             b_min: float, b_max: float, temperature: float,
                             distribution: Callable[..., Any]) -> list[np.ndarray]:
    """``log p(y_t | prompt, y_<t)`` under ``distribution`` for each (prompt, output) pair, one array per pair.

    Left-padded batch with explicit position ids, as the sampler feeds the model; only the logits that predict
    the output are computed (``logits_to_keep``)."""
    import torch

    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] + list(y[:-1]) for p, y in zip(prompts, outputs, strict=True)]
    width = max(len(s) for s in ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.tensor([[pad] * (width - len(s)) + s for s in ids], device=model.device)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in ids], device=model.device)
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    keep = max(len(y) for y in outputs)
    with torch.inference_mode():
        logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False,
                       logits_to_keep=keep).logits
    out = []
    for row, y in enumerate(outputs):
        probs = distribution(logits[row, keep - len(y):, :], b_min, b_max, temperature)
        out.append(probs.gather(-1, torch.tensor(list(y), device=probs.device).unsqueeze(-1)).squeeze(-1)
                   .log().cpu().numpy())
    return out


def output_losses(own: np.ndarray, others: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per neighbour: the output's privacy loss ``|sum_t (log p(y_t|x) - log p(y_t|x'))|`` and its largest
    single-token loss ``max_t |log p(y_t|x) - log p(y_t|x')|``."""
    diffs = np.stack([own - other for other in others])
    return np.abs(diffs.sum(axis=1)), np.abs(diffs).max(axis=1)


def audit_dp_prompt(strategy: Any, corpus: pd.DataFrame, *, neighbours: int = 3, seed: int = 0,
                    distribution: Callable[..., Any] | None = None) -> pd.DataFrame:
    """The DP-Prompt audit of a built ``dp`` strategy on ``corpus`` (doc_id, text): one row per document
    (:data:`DP_PROMPT_COLUMNS`). ``seed`` is the generation seed (the outputs audited are those ``generate``
    emits with it) and draws the neighbours; ``distribution`` replaces the mechanism's (to plant a broken one)."""
    # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
    from tasks.generate.dp import dp_prompt_distribution, dp_prompt_sample

    # deferred: looked up at call time, so a replaced loader is the one used
    from tasks.models.loaders import load_causal_lm

    p = strategy.params
    distribution = distribution or dp_prompt_distribution
    tokenizer, model = load_causal_lm(strategy.spec)
    texts = [str(t) for t in corpus["text"].tolist()]
    doc_ids = corpus["doc_id"].astype("string").tolist()
    seeds = strategy.seeds(texts, seed)
    prompts, _ = strategy.prompts(tokenizer, texts)
    scorable = [i for i, t in enumerate(texts) if tokenizer(t, add_special_tokens=False)["input_ids"]]
    near = neighbour_indices(len(scorable), neighbours, seed)
    eps_token, nominal = strategy.epsilon_token, strategy.epsilon_doc_bound
    rows: dict[int, dict[str, Any]] = {i: {"reason": EMPTY} for i in range(len(texts))}
    outputs: dict[int, list[int]] = {}
    for start in range(0, len(scorable), p.batch_size):
        chunk = scorable[start:start + p.batch_size]
        try:
            sampled = dp_prompt_sample(tokenizer, model, [prompts[i] for i in chunk], b_min=p.b_min, b_max=p.b_max,
                                       temperature=strategy.temperature, max_tokens=p.max_tokens,
                                       seeds=[seeds[i] for i in chunk], distribution=distribution)
        except Exception as exc:  # one bad chunk fails its rows, not the audit
            for i in chunk:
                rows[i] = {"reason": f"generation failed: {type(exc).__name__}: {exc}".splitlines()[0]}
            continue
        outputs.update(zip(chunk, sampled, strict=True))
    per_forward = max(1, FORWARD_ROWS // (neighbours + 1))
    ready = [(j, i) for j, i in enumerate(scorable) if i in outputs]
    for start in range(0, len(ready), per_forward):
        pairs, y_all = [], []
        for j, i in ready[start:start + per_forward]:
            pairs.append([i] + [scorable[m] for m in near[j]])
            y_all.extend([outputs[i]] * len(pairs[-1]))
        logp = teacher_forced_log_probs(tokenizer, model, [prompts[k] for group in pairs for k in group], y_all,
                                        b_min=p.b_min, b_max=p.b_max, temperature=strategy.temperature,
                                        distribution=distribution)
        at = 0
        for group in pairs:
            own, others = logp[at], logp[at + 1:at + len(group)]
            at += len(group)
            i, k = group[0], len(outputs[group[0]])
            row: dict[str, Any] = {"tokens": k, "epsilon_spent": composed_epsilon(eps_token, k),
                                   "neighbours": len(others)}
            if not others:
                rows[i] = {**row, "reason": NO_NEIGHBOUR}
                continue
            loss, token_loss = output_losses(own, others)
            row.update(privacy_loss_max=float(loss.max()), privacy_loss_p99=float(np.percentile(loss, 99)),
                       token_loss_max=float(token_loss.max()), worst_neighbour=doc_ids[group[1 + int(loss.argmax())]],
                       violation=bool(loss.max() > nominal + TOLERANCE or token_loss.max() > eps_token + TOLERANCE),
                       reason=None)
            rows[i] = row
    table = pd.DataFrame([{"doc_id": doc_ids[i], **rows[i]} for i in range(len(texts))])
    table = table.reindex(columns=DP_PROMPT_COLUMNS)
    table["method"] = "dp-prompt"
    table["epsilon_nominal"] = nominal
    table["epsilon_per_token"] = eps_token
    return _typed(table)


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    """Nullable dtypes: strings, Int64 counts, Float64 figures, boolean verdicts (null on unscored rows)."""
    kinds = {"doc_id": "string", "method": "string", "mechanism": "string", "worst_neighbour": "string",
             "neighbour": "string", "reason": "string", "violation": "boolean", "tokens": "Int64",
             "neighbours": "Int64", "trials": "Int64"}
    return table.astype({c: kinds.get(c, "Float64") for c in table.columns})


# ---------------------------------------------------------------- DP-BART


def clopper_pearson_upper(errors: int, trials: int, confidence: float = CONFIDENCE) -> float:
    """The exact (Clopper-Pearson) upper confidence bound of an error rate (scipy's binomtest)."""
    from scipy.stats import binomtest

    if trials == 0:
        return 1.0
    return float(binomtest(errors, trials).proportion_ci(confidence_level=confidence, method="exact").high)


def epsilon_lower_bound(false_positives: int, negatives: int, false_negatives: int, positives: int, *,
                        delta: float = 0.0, confidence: float = CONFIDENCE) -> float:
    """The epsilon an (epsilon, delta)-DP mechanism must at least have for an attacker to reach these error
    counts (Jagielski et al. 2020, Nasr et al. 2021): ``max(log((1 - delta - FPR_u) / FNR_u),
    log((1 - delta - FNR_u) / FPR_u))`` with Clopper-Pearson upper bounds FPR_u, FNR_u; 0 when neither ratio
    exceeds 1 (no evidence)."""
    fpr = clopper_pearson_upper(false_positives, negatives, confidence)
    fnr = clopper_pearson_upper(false_negatives, positives, confidence)
    best = 0.0
    for num, den in ((1 - delta - fpr, fnr), (1 - delta - fnr, fpr)):
        if num > 0 and den > 0:
            best = max(best, math.log(num / den))
    return best


def likelihood_ratio_scores(released: Any, x: Any, x_prime: Any, mechanism: str) -> np.ndarray:
    """The attacker's score per released representation, higher = more likely from ``x`` than ``x_prime``
    (both clipped): the log likelihood ratio up to a positive factor and an offset."""
    if mechanism == "gaussian":
        return ((released - (x + x_prime) / 2) * (x - x_prime)).flatten(1).sum(-1).double().numpy()
    return ((released - x_prime).abs() - (released - x).abs()).flatten(1).sum(-1).double().numpy()


def _error_counts(scores: np.ndarray, labels: np.ndarray, threshold: float) -> tuple[int, int, int, int]:
    """(false positives, negatives, false negatives, positives) of 'x when score > threshold'."""
    said = scores > threshold
    return (int((said & (labels == 0)).sum()), int((labels == 0).sum()),
            int((~said & (labels == 1)).sum()), int((labels == 1).sum()))


def distinguishing_game(x: Any, x_prime: Any, *, params: Any, trials: int, seed: int,
                        privatize: Callable[..., Any]) -> dict[str, Any]:
    """M = ``trials`` releases of ``privatize(x)`` or ``privatize(x')`` (half each, shuffled); the attacker's
    threshold is chosen on the first half, its error rates and the epsilon lower bound measured on the second."""
    import torch

    # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
    from tasks.generate.dp import clip_representation

    gen = torch.Generator().manual_seed(seed)
    labels = np.random.default_rng(seed).permutation(np.arange(trials) % 2)
    cx, cx_prime = (clip_representation(h.double(), params.clip, params.clipping) for h in (x, x_prime))
    scores, scale = np.empty(trials), float("nan")
    for start in range(0, trials, TRIAL_CHUNK):
        part = labels[start:start + TRIAL_CHUNK]
        source = torch.stack([x if b else x_prime for b in part]).double()
        released, scale = privatize(source, epsilon=params.epsilon, clip=params.clip, clipping=params.clipping,
                                    mechanism=params.mechanism, delta=params.delta, generator=gen)
        scores[start:start + len(part)] = likelihood_ratio_scores(released.double(), cx, cx_prime, params.mechanism)
    delta = params.delta if params.mechanism == "gaussian" else 0.0
    half = trials // 2
    pick, pick_labels = scores[:half], labels[:half]
    candidates = np.unique(np.quantile(pick, np.linspace(0, 1, THRESHOLDS)))
    threshold = max(candidates, key=lambda t: epsilon_lower_bound(*_error_counts(pick, pick_labels, t), delta=delta))
    fp, neg, fn, pos = _error_counts(scores[half:], labels[half:], threshold)
    return {"noise_scale": scale, "trials": trials - half, "fpr": fp / max(neg, 1), "fnr": fn / max(pos, 1),
            "epsilon_lower_bound": epsilon_lower_bound(fp, neg, fn, pos, delta=delta)}


def encoder_representations(texts: Sequence[str], n: int) -> tuple[list[Any], list[bool]]:
    """The offline token encoder's last hidden states, each padded/cut to exactly ``n`` positions (as DP-BART
    releases them), and whether each text has any token."""
    import torch

    tokenizer, model = load_token_encoder(resolve_model("token_encoder"))
    n = min(n, getattr(model.config, "max_position_embeddings", None) or n)
    reps, nonempty = [], []
    for text in texts:
        nonempty.append(bool(tokenizer(text, add_special_tokens=False)["input_ids"]))
        enc = tokenizer([text], return_tensors="pt", padding="max_length", truncation=True, max_length=n).to(model.device)
        with torch.inference_mode():
            reps.append(model(**enc).last_hidden_state[0].cpu())
    return reps, nonempty


def audit_dp_bart(params: Any, corpus: pd.DataFrame, *, neighbours: int = 3, trials: int = 1000, seed: int = 0,
                  privatize: Callable[..., Any] | None = None) -> pd.DataFrame:
    """The DP-BART audit of validated ``dp`` params (method dp-bart) on ``corpus``: one game per document
    against the most distant of its neighbours (:data:`DP_BART_COLUMNS`); ``privatize`` replaces the
    mechanism (to plant a broken one)."""
    # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
    from tasks.generate.dp import clip_representation, privatize_representation

    privatize = privatize or privatize_representation
    texts = [str(t) for t in corpus["text"].tolist()]
    doc_ids = corpus["doc_id"].astype("string").tolist()
    reps, nonempty = encoder_representations(texts, params.max_input_tokens)
    scorable = [i for i, ok in enumerate(nonempty) if ok]
    near = neighbour_indices(len(scorable), neighbours, seed)
    order = 2 if params.mechanism == "gaussian" else 1
    clipped = {i: clip_representation(reps[i].double(), params.clip, params.clipping) for i in scorable}
    rows: dict[int, dict[str, Any]] = {i: {"reason": EMPTY} for i in range(len(texts))}
    for j, i in enumerate(scorable):
        if not near[j]:
            rows[i] = {"reason": NO_NEIGHBOUR}
            continue
        distances = {scorable[m]: float((clipped[i] - clipped[scorable[m]]).norm(p=order)) for m in near[j]}
        other = max(distances, key=distances.__getitem__)
        game = distinguishing_game(reps[i], reps[other], params=params, trials=trials, seed=seed + i,
                                   privatize=privatize)
        rows[i] = {**game, "neighbour": doc_ids[other], "distance": distances[other], "reason": None,
                   "violation": bool(game["epsilon_lower_bound"] > params.epsilon + TOLERANCE)}
    table = pd.DataFrame([{"doc_id": doc_ids[i], **rows[i]} for i in range(len(texts))]).reindex(columns=DP_BART_COLUMNS)
    table["method"] = "dp-bart"
    table["mechanism"] = params.mechanism
    table["epsilon_nominal"] = params.epsilon
    table["delta"] = params.delta if params.mechanism == "gaussian" else 0.0
    return _typed(table)


# ---------------------------------------------------------------- the strategy's audit


def audit_strategy(name: str, params: dict[str, Any], corpus: pd.DataFrame, *, neighbours: int = 3,
                   trials: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Audit strategy ``name`` with ``params`` on ``corpus``: DP-Prompt's exact losses or DP-BART's game.
    ConfigError for a strategy without a privacy mechanism or bad params (epsilon <= 0, not a number)."""
    if name not in available_strategies():
        validate_params(name, params, root="strategy")  # raises the unknown-strategy error, with the list
    if not has_mechanism(name):
        raise no_mechanism(name)
    if neighbours < 1 or trials < 2:
        raise ConfigError(f"--neighbours ({neighbours}) must be at least 1 and --trials ({trials}) at least 2")
    validated = validate_params(name, params, root="strategy")
    if validated.method == "dp-prompt" and validated.max_tokens > MAX_COMPOSED:
        raise ConfigError(f"strategy.{name}.max_tokens: the audit composes at most {MAX_COMPOSED} per-token "
                          f"epsilons exactly (dp-accounting), got {validated.max_tokens}")
    if validated.method == "dp-bart":
        return audit_dp_bart(validated, corpus, neighbours=neighbours, trials=trials, seed=seed)
    return audit_dp_prompt(build_strategy(name, params, root="strategy"), corpus, neighbours=neighbours, seed=seed)


#: Per method: the column whose largest scored value is the audited epsilon, and what it is called.
AUDITED: dict[str, tuple[str, str]] = {"dp-prompt": ("privacy_loss_max", "largest privacy loss"),
                                       "dp-bart": ("epsilon_lower_bound", "largest epsilon lower bound")}


def audited_epsilon(table: pd.DataFrame) -> dict[str, Any]:
    """An audit table's figures: ``method``, ``nominal`` epsilon per document, ``audited`` epsilon (the largest
    measured loss, or the largest lower bound; nan with nothing scored), what it is (``what``), the documents
    ``scored`` and ``not_scored``, and the ``violations``."""
    scored = table[table["reason"].isna()]
    method = str(table["method"].iloc[0])
    column, what = AUDITED[method]
    return {"method": method, "nominal": float(table["epsilon_nominal"].iloc[0]),
            "audited": float(scored[column].max()) if len(scored) else float("nan"), "what": what,
            "scored": len(scored), "not_scored": len(table) - len(scored),
            "violations": int(scored["violation"].sum())}


def audit_summary(table: pd.DataFrame) -> str:
    """One line: the nominal epsilon against the audited one (largest measured loss, or largest lower bound)."""
    f = audited_epsilon(table)
    return (f"{f['method']}: nominal epsilon {f['nominal']:g} per document, audited ({f['what']}) {f['audited']:.4g} "
            f"over {f['scored']} document(s); {f['violations']} violation(s), {f['not_scored']} not scored")
