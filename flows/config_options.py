"""The tasks' options from a validated experiment configuration: the metric suite's, the privacy audit's and the
protect loop's (the CLI's protect flags over a config's ``protect:`` section).

Kept apart from flows/config.py (reading and validating) and flows/config_sections.py (the sections): these
translate a config into what the tasks take.
"""

from __future__ import annotations

from typing import Any

from flows.config_sections import ExperimentConfig
from tasks.errors import ConfigError, shown
from tasks.generate.base import available_strategies
from tasks.metrics.suite import MetricOptions
from tasks.models.llm import llm_role_settings
from tasks.models.registry import resolve_model
from tasks.privacy.audit import PrivacyOptions
from tasks.protect.moves import OWN_MOVES, default_ladder, parse_ladder
from tasks.protect.settings import EVERY_ATTACK, ProtectSettings


def metric_options(cfg: ExperimentConfig) -> MetricOptions:
    """The metric suite's options from a validated config (models resolved offline here)."""
    m = cfg.metrics
    return MetricOptions(
        token_encoder=resolve_model("token_encoder", cfg.models.get("token_encoder")),
        sentence_encoder=resolve_model("sentence_encoder", cfg.models.get("sentence_encoder")),
        style_encoder=cfg.models.get("style_encoder"),
        pos_tagger=resolve_model("pos_tagger", cfg.models.get("pos_tagger")),
        bertscore_layer=m.bertscore.layer, bertscore_idf=m.bertscore.idf, bertscore_baseline=m.bertscore.baseline,
        fbd_layer=m.fbd.layer, fbd_pooling=m.fbd.pooling,
        transfer_classifier=m.transfer.classifier, transfer_target=m.transfer.target,
        cps_mask=m.transfer.cps_mask, cps_threshold=m.transfer.cps_threshold,
        bag_group=m.bag_group, seed=cfg.seed, shard_size=m.shard_size, n_bootstrap=m.n_bootstrap,
        verbatim_min_chars=m.verbatim.min_chars, fluency_lm=cfg.models.get("fluency_lm"),
    )


def privacy_options(cfg: ExperimentConfig) -> PrivacyOptions:
    """The privacy audit's options from a validated config."""
    p = cfg.privacy
    return PrivacyOptions(
        attributes=tuple(p.profiling.attributes) if p.profiling.attributes is not None else None,
        profiling_models=tuple(p.profiling.models), profiling_level=p.profiling.level,
        membership=p.membership.enabled, membership_embed=p.membership.embed,
        n_bootstrap=p.membership.n_bootstrap, seed=cfg.seed,
    )


def protect_settings(cfg: ExperimentConfig | None = None, **overrides: Any) -> Any:
    """The protect loop's settings (tasks.protect.settings.ProtectSettings) from a run config's ``protect:`` section
    (its attack parameters, adversaries and timeline runs from ``privacy.reidentify`` unless set there), or the
    defaults without one; ``overrides`` (CLI flags) win. ConfigError naming the key on a bad value."""
    values: dict[str, Any] = {}
    params: dict[str, dict[str, Any]] = {}
    llm = llm_role_settings("llm", cfg.models.get("llm") if cfg is not None else None)
    values["ladder"] = default_ladder(llm_served=bool(llm.get("endpoint")))
    if cfg is not None:
        p, reid = cfg.protect, cfg.privacy.reidentify
        params = {name: dict(given) for name, given in reid.attack_params(cfg.seed)}
        floors = p.meaning_floor if isinstance(p.meaning_floor, list) else [p.meaning_floor]
        values = {**values, "budget": p.budget, "start": p.start, "max_rounds": p.max_rounds, "meaning_floors": tuple(floors),
                  "unit": p.unit, "fluency_floor": p.fluency_floor, "prefer": p.prefer,
                  "on_fail": p.on_fail, "decide_on": p.decide_on, "adversaries": tuple(p.adversaries),
                  "timeline_posts": p.timeline_posts or reid.timeline_posts, "seed": cfg.seed,
                  "docs_per_round": p.docs_per_round, "verbatim_chars": p.verbatim_chars,
                  "feedback": p.feedback, "judge": p.judge, "attack_params": params,
                  "ladder": parse_ladder(p.ladder, "protect.ladder") if p.ladder is not None else values["ladder"],
                  "llm": llm}
    values.update({k: v for k, v in overrides.items() if v is not None})
    if values.get("fluency_floor") == "off":  # the CLI's --fluency-floor off
        values["fluency_floor"] = None
    if values.get("judge") is not None and EVERY_ATTACK in values["judge"]:
        values["judge"] = None  # every registered attack (those named besides are among them)
    for role in ("feedback", "judge"):
        if values.get(role) is not None:
            values[role] = tuple((name, params.get(name, {})) for name in values[role])
    if isinstance(values.get("ladder"), (list, tuple)) and values["ladder"] and isinstance(values["ladder"][0], str):
        values["ladder"] = parse_ladder(values["ladder"], "--ladder")
    start = values.get("start")
    if start is not None and start not in (*OWN_MOVES, *available_strategies()):
        raise ConfigError(f"start: unknown move {shown(start)} (known: {', '.join((*OWN_MOVES, *available_strategies()))})")
    return ProtectSettings(**values)
