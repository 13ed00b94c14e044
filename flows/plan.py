"""The plan: a validated config as a list of stage calls, each with ONE typed options object built from its
config section (settings from the environment folded in, so they reach the cache keys).

The experiment flows, the progress bar and the deployments all run these calls through
:func:`flows.executor.execute`. Planning happens in two steps because the number of generation shards
depends on the corpus size: :func:`plan_prepare` (ingest, split), then :func:`plan_stages` for the rest.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows import stages
from flows.config_options import metric_options, privacy_options, protect_settings
from flows.config_sections import ExperimentConfig
from tasks.corpus.datasets import fetch_dataset
from tasks.errors import ConfigError, SynthUGCError
from tasks.generate.base import strategy_uses_llm, with_llm_settings
from tasks.layout import PROTECT_LABEL, StageResult, stage_kind
from tasks.metrics.catalogue import names as metric_names
from tasks.models.llm import llm_role_settings
from tasks.models.registry import model_id
from tasks.paths import absolute
from tasks.privacy.attacks import attack_class
from tasks.privacy.dp_audit import has_mechanism
from tasks.settings import LLM_CACHE_ENV, get_settings
from tasks.signatures import make_signature
from tasks.store import ArtifactRef, fingerprint_file
from tasks.training.utility import utility_design

#: Stage families after generation; a flow can run a subset (ingest, split and generate always run).
STAGE_FAMILIES: tuple[str, ...] = ("metrics", "privacy", "utility", "report")

#: The model roles a run honours, and where: any other role in ``models:`` is rejected with its key path.
HONOURED_ROLES: dict[str, str] = {
    "token_encoder": "metrics (BERTScore, FBD)",
    "sentence_encoder": "metrics (FBD-SBERT, FCSD, CPS, *_sbert) and dialogue/timeline utility",
    "pos_tagger": "metrics (POS) and the style vector",
    "style_encoder": "metrics (style_cosine, style_frechet)",
    "llm": "generation (llm, paraphrase, dp-prompt, syntax with generator: llm)",
    "profiling_llm": "privacy.llm_profiling",
}
_ROLE_ELSEWHERE = {
    "paraphraser": "generate.strategies.N.params.model of the paraphrase strategy",
    "translator": "generate.strategies.N.params.model_dir / model_template of the backtranslate strategy",
    "classifier_backbone": "metrics.transfer.classifier (STI); the utility and profiling encoders use the default",
}


def check_model_roles(cfg: ExperimentConfig) -> None:
    """One model-role mapping honoured everywhere: a role no stage of a run reads is an error naming it."""
    for role in cfg.models:
        if role not in HONOURED_ROLES:
            where = _ROLE_ELSEWHERE.get(role, "nothing")
            raise ConfigError(f"models.{role}: a run does not read this role; set {where} instead")


@dataclass(frozen=True)
class Use:
    """A stage input that is another call's output (``output``) or whole result (``output=None``)."""

    call: str
    output: str | None = None


@dataclass
class StageCall:
    """One stage call: which stage, its keys, its parameters (``Use`` where an input comes from another
    call) and the resource class it occupies (``cpu``, ``llm``: a served LLM, ``gpu``: an in-process model
    that a GPU worker would run)."""

    kind: str
    keys: dict[str, Any]
    task: Any
    params: dict[str, Any]
    resource: str = "cpu"
    #: Runs after every other call, whatever their states, with the params this returns then (the report).
    finally_: Callable[[Mapping[str, StageResult], Mapping[str, str]], dict[str, Any]] | None = None

    @property
    def name(self) -> str:
        return stage_kind(self.kind).display(self.keys)

    @property
    def needs(self) -> list[str]:
        """The calls whose results this one reads."""
        found: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, Use):
                found.append(value.call)
            elif isinstance(value, list | tuple):
                for v in value:
                    walk(v)

        for v in self.params.values():
            walk(v)
        return list(dict.fromkeys(found))


def resolve(value: Any, results: Mapping[str, StageResult]) -> Any:
    """A parameter with every :class:`Use` replaced by the result (or output) it names."""
    if isinstance(value, Use):
        result = results[value.call]
        return result if value.output is None else result.outputs[value.output]
    if isinstance(value, list):
        return [resolve(v, results) for v in value]
    return value


@dataclass
class Plan:
    """The calls of a run with their shared place; ``context`` is what the manifest records for the report."""

    place: stages.RunPlace
    calls: list[StageCall] = field(default_factory=list)

    def add(self, kind: str, task: Any, *, resource: str = "cpu", **params: Any) -> StageCall:
        keys = {k: params[k] for k in stage_kind(kind).keys}
        call = StageCall(kind=kind, keys=keys, task=task, params={**params, "place": self.place},
                         resource=resource)
        self.calls.append(call)
        return call


def planned_cache_dir() -> Path:
    """The cache folder a run planned here uses on every machine: this process's ``cache_dir`` setting made
    absolute where the run is planned (on a cluster, put it on storage every worker mounts at the same path).
    The stages' caches and the Prefect result records the executor looks stages up in are under it."""
    return get_settings().cache_dir.resolve()


def run_place(cfg: ExperimentConfig) -> stages.RunPlace:
    """Where the run's artifacts and caches go, planned here (absolute: a worker elsewhere uses the same)."""
    llm_cache = os.environ.get(LLM_CACHE_ENV)
    return stages.RunPlace(root=absolute(cfg.storage_root or get_settings().storage_root), experiment=cfg.experiment,
                           cache_dir=str(planned_cache_dir()), llm_cache=absolute(llm_cache) if llm_cache else None)


def source_ref(cfg: ExperimentConfig) -> ArtifactRef:
    """The corpus a run reads: a public dataset (fetched once) or the configured file."""
    if cfg.data.dataset:
        path = absolute(str(fetch_dataset(cfg.data.dataset, get_settings().data_dir)))
    else:
        path = cfg.data.path
        if not Path(path).is_file():
            raise SynthUGCError(f"data.path: corpus file {path} does not exist")
    return ArtifactRef(path=str(path), fingerprint=fingerprint_file(str(path)))


def histories_ref(path: str | None) -> ArtifactRef | Use:
    """The adversary's histories: a configured parquet file, or the corpus itself (the adversary holds the
    originals, the strongest setting, as in the article where the full posting history includes them)."""
    if path is None:
        return Use("split", "corpus")
    if not Path(path).is_file():
        raise SynthUGCError(f"privacy.reidentify.histories: file {path} does not exist")
    return ArtifactRef(path=str(Path(path).resolve()), fingerprint=fingerprint_file(path))


def plan_prepare(cfg: ExperimentConfig) -> Plan:
    """Ingest and split: what every run does first."""
    check_model_roles(cfg)
    plan = Plan(run_place(cfg))
    private = cfg.generate.pseudonymize is not None  # the raw corpus stays under private/
    plan.add("ingest", stages.ingest, source=source_ref(cfg),
             options=stages.IngestOptions(cfg.data.max_chars, private=private))
    s = cfg.split
    plan.add("split", stages.split, corpus=Use("ingest", "corpus"), options=stages.SplitOptions(
        train=s.train, val=s.val, test=s.test, train_fraction=s.train_fraction, max_docs=cfg.data.max_docs,
        seed=cfg.seed, private=private))
    return plan


def utility_signature(cfg: ExperimentConfig) -> str:
    """The signature of the run's utility numbers (task, model, seeds, test split, label)."""
    u = cfg.utility
    return make_signature(f"utility_{u.task}", model=u.model, seeds=len(u.seeds), test="real-test-split",
                          label=u.label, **({"coverage": u.coverage} if u.task == "timeline" else {}))


def generation_resource(name: str, params: Mapping[str, Any], llm: Mapping[str, str]) -> str:
    """``llm`` for a strategy that calls a served LLM, ``gpu`` for one that runs an LLM in process, else ``cpu``."""
    if not strategy_uses_llm(name, params):
        return "cpu"
    return "llm" if llm.get("endpoint") else "gpu"


def plan_stages(cfg: ExperimentConfig, families: Collection[str], place: stages.RunPlace, *, corpus_rows: int,
                ingested: StageResult, human_eval: Callable[[], list[ArtifactRef]]) -> Plan:
    """Every call after the split: generation (strategy x shard), then per strategy the requested families,
    the meta-evaluation, the utility runs and the report."""
    unknown = sorted(set(families) - set(STAGE_FAMILIES))
    if unknown:
        raise ValueError(f"unknown stage families {unknown}; known: {', '.join(STAGE_FAMILIES)}")
    plan = Plan(place)
    corpus = Use("split", "corpus")
    n_shards = max(1, math.ceil(corpus_rows / cfg.generate.shard_size))
    do_privacy = "privacy" in families and cfg.privacy.enabled
    reid = cfg.privacy.reidentify
    metric_opts, privacy_opts = metric_options(cfg), privacy_options(cfg)
    llm = llm_role_settings("llm", cfg.models.get("llm"))
    histories = histories_ref(reid.histories) if do_privacy and reid.enabled else None
    attacks = tuple(reid.attack_params(cfg.seed))
    indexed = tuple(name for name, _ in attacks if attack_class(name).builds_index)
    reid_opts = stages.ReidentifyOptions(attacks=attacks, adversaries=tuple(reid.adversaries), indexed=indexed,
                                         timeline_posts=reid.timeline_posts, optional=reid.optional_attacks())
    index_calls = [plan.add("index-histories", stages.index_histories, histories=histories, attack=name,
                            params=params).name
                   for name, params in attacks if name in indexed and do_privacy and reid.enabled]
    pseudo = cfg.generate.pseudonymize
    if pseudo is not None and any(s.pseudonymize for s in cfg.generate.strategies):
        plan.add("pseudonymize", stages.pseudonymize, corpus=corpus, options=stages.PseudonymizeOptions(
            entities=tuple(pseudo.entities), scope=pseudo.scope, seed=cfg.seed))
    shards: dict[str, list[Use]] = {}
    for strategy in cfg.generate.strategies:
        label = strategy.key
        options = stages.GenerateOptions(strategy=strategy.name, params=strategy.params,
                                         shard_size=cfg.generate.shard_size, seed=cfg.seed,
                                         llm=llm if strategy_uses_llm(strategy.name, strategy.params) else {},
                                         private=pseudo is not None and not strategy.pseudonymize)
        resource = generation_resource(strategy.name, strategy.params, options.llm)
        source = Use("pseudonymize", "corpus") if pseudo is not None and strategy.pseudonymize else corpus
        shards[label] = [Use(plan.add("generate", stages.generate, resource=resource, corpus=source, label=label,
                                      shard=i, options=options).name, "shard") for i in range(n_shards)]
        if do_privacy and cfg.privacy.audit_dp.enabled and has_mechanism(strategy.name):
            audit = cfg.privacy.audit_dp
            plan.add("audit-dp", stages.audit_dp, resource=generation_resource(strategy.name, strategy.params, {}),
                     corpus=source, label=label, options=stages.AuditDPOptions(  # the model generation used
                         strategy=strategy.name, params=with_llm_settings(strategy.name, strategy.params, options.llm),
                         neighbours=audit.neighbours,
                         trials=audit.trials, max_docs=audit.max_docs, seed=cfg.seed))
    if cfg.protect.enabled:  # the protected output is evaluated like any strategy's

        protected = plan.add("protect", stages.protect, corpus=corpus, histories=histories_ref(reid.histories),
                             options=protect_settings(cfg), split=cfg.protect.split)
        shards[PROTECT_LABEL] = [Use(protected.name, "shard")]
    for label in shards:
        if "metrics" in families:
            plan.add("metrics", stages.metrics, corpus=corpus, shards=shards[label], label=label,
                     names=tuple(cfg.metrics.names), options=metric_opts)
        if do_privacy:
            plan.add("privacy", stages.privacy, corpus=corpus, shards=shards[label], label=label, options=privacy_opts)
        if do_privacy and cfg.privacy.llm_profiling.enabled:
            backend = llm_role_settings("profiling_llm", cfg.models.get("profiling_llm"))
            lp = cfg.privacy.llm_profiling
            plan.add("llm-profile", stages.llm_profile, resource="llm" if backend.get("endpoint") else "gpu",
                     corpus=corpus, shards=shards[label], label=label,
                     options=stages.LLMProfilingOptions(backend=backend, max_tokens=lp.max_tokens, n=lp.n,
                                                        seed=cfg.seed))
        if do_privacy and reid.enabled:
            plan.add("reidentify", stages.reidentify, histories=histories,
                     indexes=[Use(call, "index") for call in index_calls],
                     shards=shards[label], label=label, options=reid_opts)

    comparison_names = tuple(m for m in cfg.metrics.names if m in metric_names("distribution", "bag"))
    if "metrics" in families and cfg.metrics.metaeval.enabled and comparison_names:
        me = cfg.metrics.metaeval
        plan.add("metaeval", stages.metaeval, corpus=corpus, options=stages.MetaevalOptions(
            names=comparison_names, metrics=metric_opts, bag_size=me.bag_size, bags=me.bags))

    if "utility" in families and cfg.utility.enabled:  # the baseline runs once for every strategy
        u = cfg.utility
        utility_opts = stages.UtilityOptions(task=u.task, model=u.model, label=u.label, coverage=u.coverage)
        for label, setting, fraction, seed in utility_design(list(shards), u.settings, u.fractions, u.seeds):
            plan.add("utility", stages.utility, corpus=corpus, shards=shards.get(label, []), label=label,
                     setting=setting, fraction=fraction, seed=seed, options=utility_opts)

    if "report" in families:
        report = plan.add("report", stages.report)
        report.finally_ = lambda results, failed: report_params(cfg, results, failed, ingested, human_eval())
    return plan


def report_facts(cfg: ExperimentConfig, results: Mapping[str, StageResult], ingested: StageResult) -> dict[str, str]:
    """The run's facts the report lists first."""
    corpus = results["split"].outputs["corpus"]
    return {"experiment": cfg.experiment, "data": cfg.data.dataset or str(cfg.data.path),
            "level": str(ingested.info.get("level", "")), "documents": str(corpus.rows),
            "strategies": ", ".join(s.key for s in cfg.generate.strategies),
            "token encoder": model_id(metric_options(cfg).token_encoder), "seed": str(cfg.seed),
            "input rows failed validation": str(ingested.outputs["failures"].rows or 0)}


def report_options(cfg: ExperimentConfig, facts: Mapping[str, str]) -> stages.ReportOptions:
    return stages.ReportOptions(
        title=cfg.report.title or f"synthugc report: {cfg.experiment}", facts=tuple(facts.items()),
        level=cfg.utility.task, families=tuple((s.key, s.name) for s in cfg.generate.strategies)
        + (((PROTECT_LABEL, PROTECT_LABEL),) if cfg.protect.enabled else ()),
        utility_signature=utility_signature(cfg), goals=tuple(cfg.report.goals), examples=cfg.report.examples,
        seed=cfg.seed, budget=cfg.report.require, decide_on=cfg.report.decide_on, n_bootstrap=cfg.utility.n_bootstrap,
        budget_adversaries=tuple(cfg.report.adversaries) if cfg.report.adversaries else None)


def report_params(cfg: ExperimentConfig, results: Mapping[str, StageResult], failed: Mapping[str, str],
                  ingested: StageResult, human_eval: list[ArtifactRef]) -> dict[str, Any]:
    """The report call's inputs once every other stage has ended: what succeeded, what failed and why.
    Ordered by stage name, not by completion order, so a rerun of the same stages has the same cache key."""
    done = [results[name] for name in sorted(results) if results[name].kind != "report"]
    return {"results": done, "human_eval": human_eval, "failed_stages": dict(sorted(failed.items())),
            "options": report_options(cfg, report_facts(cfg, results, ingested))}
