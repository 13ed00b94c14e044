"""The Prefect layer: one coarse task per stage (x strategy x shard) that reads its input artifacts,
calls the plain functions in tasks/, and writes its output artifacts.

Every stage is cached with :func:`flows.caching.key_fn_for` (input content + config + code version)
and persists its small result (artifact references) to the local result folder, so a repeated or
retried run returns ``Cached`` for every stage whose inputs, settings and code are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from flows.caching import key_fn_for
from tasks.corpus.importers import read_corpus
from tasks.corpus.schema import corpus_level
from tasks.corpus.splits import assign_splits, cap_documents, undersample
from tasks.generate.base import build_strategy, generate_synthetic
from tasks.metrics.base import make_signature
from tasks.metrics.suite import MetricOptions, metaeval_metrics, score_strategy
from tasks.models.embeddings import EmbeddingCache
from tasks.models.llm import llm_backend_for
from tasks.parallel import dask_client
from tasks.privacy.audit import (
    PrivacyOptions,
    attack_timelines,
    audit_strategy,
    llm_profiling_rows,
    reidentification_rows,
    summary_frame,
)
from tasks.privacy.llm_profiling import llm_profile as run_llm_profiling
from tasks.privacy.reidentify import reidentify_signed, sign_histories
from tasks.report.build import collect_report_data
from tasks.report.recommend import parse_goal
from tasks.report.render import article_table_frames, render_markdown, render_report
from tasks.settings import get_settings
from tasks.store import ArtifactRef, ArtifactStore, fingerprint_config, fingerprint_file
from tasks.training.dialogue import sentence_embedder
from tasks.training.utility import run_one


@dataclass(frozen=True)
class IngestResult:
    corpus: ArtifactRef
    failures: ArtifactRef
    level: str


@dataclass(frozen=True)
class MetricsResult:
    sample_scores: ArtifactRef
    distribution_scores: ArtifactRef
    distributions: ArtifactRef
    signatures: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportResult:
    markdown: ArtifactRef
    html: ArtifactRef


def _stage(name: str, **options: Any):
    return task(name=name, cache_key_fn=key_fn_for(name), persist_result=True, **options)


@_stage("ingest")
def ingest(source: ArtifactRef, root: str, experiment: str, max_chars: int) -> IngestResult:
    """Read the source corpus, validate it, and write the valid rows and the failure records."""
    store = ArtifactStore(root)
    validated = read_corpus(source.path, max_chars=max_chars)
    return IngestResult(
        corpus=store.write_table(validated.corpus, experiment, "ingest", "corpus.parquet"),
        failures=store.write_table(validated.failures, experiment, "ingest", "failures.parquet"),
        level=corpus_level(validated.corpus).value,
    )


@_stage("split")
def split(corpus: ArtifactRef, root: str, experiment: str, fractions: dict[str, float], train_fraction: float,
          max_docs: int | None, seed: int) -> ArtifactRef:
    """Assign splits by group, cap the corpus size and undersample the training split."""
    store = ArtifactStore(root)
    df = assign_splits(store.read_table(corpus), fractions=(fractions["train"], fractions["val"], fractions["test"]),
                       seed=seed)
    if max_docs is not None:
        df = cap_documents(df, max_docs, seed=seed)
    if train_fraction < 1.0:
        df = undersample(df, train_fraction, seed=seed)
    df = df.sort_values("doc_id", kind="stable").reset_index(drop=True)
    return store.write_table(df, experiment, "split", "corpus.parquet")


@_stage("generate")
def generate(corpus: ArtifactRef, root: str, experiment: str, label: str, strategy: str, params: dict[str, Any],
             shard: int, shard_size: int, seed: int) -> ArtifactRef:
    """Rewrite one shard of the corpus with one strategy: one output row per input row."""
    store = ArtifactStore(root)
    whole = store.read_table(corpus)
    rewriter = build_strategy(strategy, params).fit(whole)
    out = generate_synthetic(rewriter, whole.iloc[shard * shard_size:(shard + 1) * shard_size], seed=seed)
    out["strategy"] = label
    return store.write_table(out, experiment, "generate", label, f"shard-{shard:05d}.parquet")


@_stage("metrics")
def metrics(corpus: ArtifactRef, shards: list[ArtifactRef], root: str, experiment: str, label: str,
            names: list[str], options: MetricOptions, cache_dir: str) -> MetricsResult:
    """Every requested intrinsic metric of one strategy's outputs, fanned out on Dask."""
    store = ArtifactStore(root)
    synthetic = pd.concat([store.read_table(s) for s in shards], ignore_index=True)
    with dask_client(get_settings().dask_address) as client:
        result = score_strategy(store.read_table(corpus), synthetic, names, options,
                                Path(cache_dir) / "embeddings.sqlite", client=client)
    return MetricsResult(
        sample_scores=store.write_table(result.sample_scores, experiment, "metrics", label, "sample_scores.parquet"),
        distribution_scores=store.write_table(result.distribution_scores, experiment, "metrics", label,
                                  "distribution_scores.parquet"),
        distributions=store.write_table(result.distributions, experiment, "metrics", label, "distributions.parquet"),
        signatures=result.signatures,
    )


@dataclass(frozen=True)
class PrivacyResult:
    profiling: ArtifactRef
    top_words: ArtifactRef
    word_bins: ArtifactRef
    membership: ArtifactRef
    summary: ArtifactRef


@_stage("privacy")
def privacy(corpus: ArtifactRef, shards: list[ArtifactRef], root: str, experiment: str, label: str,
            options: PrivacyOptions) -> PrivacyResult:
    """Attribute profiling and membership audit of one strategy's outputs."""
    store = ArtifactStore(root)
    synthetic = pd.concat([store.read_table(s) for s in shards], ignore_index=True)
    tables = audit_strategy(store.read_table(corpus), synthetic, label, options)

    def write(df: pd.DataFrame, name: str) -> ArtifactRef:
        return store.write_table(df, experiment, "privacy", label, name)

    return PrivacyResult(profiling=write(tables.profiling, "profiling.parquet"),
                         top_words=write(tables.top_words, "top_words.parquet"),
                         word_bins=write(tables.word_bins, "word_bins.parquet"),
                         membership=write(tables.membership, "membership.parquet"),
                         summary=write(tables.summary, "privacy_scores.parquet"))


@_stage("sign-histories")
def sign_adversary_histories(histories: ArtifactRef, root: str, experiment: str, lsh: dict[str, Any],
                             cache_dir: str) -> ArtifactRef:
    """Sign the adversary's posting histories once (MinHash band keys); every strategy's attack reuses them.

    Written under the local cache folder (the signer streams to a local file), keyed by the content
    fingerprint of the histories and the LSH parameters."""
    store = ArtifactStore(root)
    frame = store.read_table(histories)
    frame = frame.loc[frame["author_id"].notna(), ["author_id", "text"]]
    out = Path(cache_dir) / "signed-histories" / f"{histories.fingerprint[:16]}-{fingerprint_config(lsh)[:12]}.parquet"
    sign_histories(frame, out, **lsh)
    return ArtifactRef(path=str(out), fingerprint=fingerprint_file(str(out)), rows=len(frame))


@dataclass(frozen=True)
class ReidentifyResult:
    per_timeline: ArtifactRef
    summary: ArtifactRef


@_stage("reidentify")
def reidentify(signed: ArtifactRef, shards: list[ArtifactRef], root: str, experiment: str, label: str,
               jaccard_threshold: float | None) -> ReidentifyResult:
    """MinHash-LSH re-identification of one strategy's synthetic timelines against the signed histories."""
    store = ArtifactStore(root)
    synthetic = pd.concat([store.read_table(s) for s in shards], ignore_index=True)
    per_timeline, rows = [], []
    signature = ""
    for variant, part in synthetic.groupby("variant", sort=True):
        result = reidentify_signed(signed.path, attack_timelines(part), jaccard_threshold=jaccard_threshold)
        summary = result.summary
        signature = make_signature("reid", attack="minhash-lsh", **{k: summary.get(k) for k in (
            "n", "k", "bands", "rows", "seed", "scheme") if k in summary}, jaccard=jaccard_threshold,
                                   vote="unique-argmax", ties="failure")
        per_timeline.append(result.per_timeline.assign(strategy=label, variant=str(variant)))
        rows += reidentification_rows(summary, label, str(variant), signature)
    frame = pd.concat(per_timeline, ignore_index=True) if per_timeline else pd.DataFrame()
    return ReidentifyResult(
        per_timeline=store.write_table(frame, experiment, "privacy", label, "reidentification.parquet"),
        summary=store.write_table(summary_frame(rows), experiment, "privacy", label, "reid_scores.parquet"))


@_stage("llm-profile")
def llm_profile(corpus: ArtifactRef, shards: list[ArtifactRef], root: str, experiment: str, label: str,
                backend: dict[str, Any], max_tokens: int, n: int | None, seed: int) -> ArtifactRef:
    """Zero-shot LLM profiling (seed 000 §5.2.2, A.5) of the real and the synthetic transcripts.

    ``backend`` names the endpoint and model (part of the cache key: another model is another attack)."""
    store = ArtifactStore(root)
    synthetic = pd.concat([store.read_table(s) for s in shards], ignore_index=True).assign(strategy=label)
    result = run_llm_profiling(store.read_table(corpus), backend=llm_backend_for("profiling_llm", backend),
                               synthetic=synthetic, max_tokens=max_tokens, n=n, seed=seed)
    store.write_table(result.predictions, experiment, "privacy", label, "llm_profiling_predictions.parquet")
    return store.write_table(summary_frame(llm_profiling_rows(result, label)), experiment, "privacy", label,
                             "llm_profiling_scores.parquet")


@_stage("utility")
def utility(corpus: ArtifactRef, shards: list[ArtifactRef], root: str, experiment: str, label: str, setting: str,
            fraction: float, seed: int, config: dict[str, Any], cache_dir: str) -> ArtifactRef:
    """One downstream run: train on the (setting, fraction) training set of one strategy (or the real
    baseline, ``label='original'`` without shards) with one seed, test on the real test split."""
    store = ArtifactStore(root)
    synthetic = pd.concat([store.read_table(s) for s in shards], ignore_index=True) if shards else None
    task = config["task"]
    embed = None if task == "post" else sentence_embedder(cache=EmbeddingCache(Path(cache_dir) / "embeddings.sqlite"))
    results = run_one(store.read_table(corpus), synthetic, label, setting, fraction, seed, task=task,
                      model=config["model"], label_col=config["label"], embed=embed)
    return store.write_table(results, experiment, "utility", label,
                             f"{setting}-{round(100 * fraction):03d}pct-seed{seed}.parquet")


@_stage("metaeval")
def metaeval(corpus: ArtifactRef, root: str, experiment: str, names: list[str], options: MetricOptions,
             bag_size: int, bags: int, cache_dir: str) -> ArtifactRef:
    """Meta-evaluate the run's distribution- and bag-level metrics on manipulated bags of the real corpus;
    returns the summary (rho per metric x manipulation), with the per-bag rows and correlations beside it."""
    store = ArtifactStore(root)
    texts = store.read_table(corpus)["text"].tolist()
    result = metaeval_metrics(texts, names, options, Path(cache_dir) / "embeddings.sqlite", bag_size=bag_size,
                              bags=bags, seed=options.seed)
    store.write_table(result.rows, experiment, "metaeval", "rows.parquet")
    store.write_table(result.correlations, experiment, "metaeval", "metric_correlations.parquet")
    return store.write_table(result.summary, experiment, "metaeval", "summary.parquet")


@_stage("report")
def report(artifacts: dict[str, ArtifactRef], human_eval: list[ArtifactRef], root: str, experiment: str,
           title: str, facts: dict[str, str], level: str, families: list[list[str]], failed_stages: dict[str, str],
           utility_signature: str, goals: list[str], examples: int, seed: int) -> ReportResult:
    """Render the markdown and HTML report from the run's artifacts and publish them (and the article
    tables) as Prefect artifacts. ``human_eval`` are the imported human ratings (part of the cache key);
    ``families`` pairs each strategy label with its registered name, in config order (the tables' row order)."""
    store = ArtifactStore(root)
    data = collect_report_data(
        artifacts, store.read_table, title=title, facts=facts, level=level, families=dict(families), failed_stages=failed_stages, utility_signature=utility_signature,
        human_eval_dir=Path(human_eval[0].path).parent if human_eval else None, examples=examples, seed=seed,
        goals=[parse_goal(g) for g in goals])
    if data.utility_runs is not None:
        store.write_table(data.utility_runs, experiment, "utility", "utility_runs.parquet")
        store.write_table(data.summary[data.summary["level"] == "utility"], experiment, "utility",
                          "utility_scores.parquet")
    # written every time (empty when undefined) so a file from an earlier run never passes for this one's
    store.write_table(data.correlations if data.correlations is not None else pd.DataFrame({"metric": []}),
                      experiment, "metric_correlations.parquet")
    markdown, page = render_report(data)
    result = ReportResult(markdown=store.write_text(markdown, experiment, "report.md"),
                          html=store.write_text(page, experiment, "report.html"))
    key = experiment.lower().replace("_", "-").replace(".", "-")
    # the example outputs are real text: they stay in the run's files, not on a (possibly remote) Prefect API
    published = markdown if data.examples is None else render_markdown(replace(data, examples=None))
    create_markdown_artifact(markdown=published + f"\n\nHTML report: `{result.html.path}`\n",
                             key=f"{key}-report", description=f"synthugc report for {experiment}")
    html_link = Path(result.html.path).as_uri() if "://" not in result.html.path else result.html.path
    create_link_artifact(link=html_link, link_text=f"{experiment} report (HTML, self-contained)",
                         key=f"{key}-report-html", description=f"the HTML report of {experiment}")
    if not data.summary.empty:
        create_table_artifact(table=data.summary.drop(columns=["signature"]).round(6).to_dict(orient="records"),
                              key=f"{key}-scores", description=f"every score of {experiment}")
    for table_key, frame in article_table_frames(data).items():
        create_table_artifact(table=frame.round(6).to_dict(orient="records"), key=f"{key}-{table_key}",
                              description=f"{table_key} of {experiment}")
    return result
