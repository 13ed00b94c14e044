"""Experiment config validation: unknown keys and bad values are rejected with their key path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.cli.runs import DEMO_CONFIG
from flows.config import MAX_CONFIG_BYTES, MAX_YAML_EXPANSION, load_config, parse_config
from tasks.errors import SHOWN_CHARS, ConfigError, shown
from tasks.limits import MAX_DOCS, MAX_HASHES, MAX_SEED, MAX_UTILITY_SEEDS


def _raw(**changes) -> dict:
    raw = {"experiment": "x", "data": {"dataset": "debates"},
           "generate": {"strategies": [{"name": "stymask"}]}}
    raw.update(changes)
    return raw


def test_demo_config_is_valid():
    cfg = load_config(DEMO_CONFIG)
    assert cfg.data.dataset == "debates"
    assert [s.key for s in cfg.generate.strategies] == ["backtranslate", "stymask", "synsim"]
    assert cfg.report.examples == 0  # example outputs show real text: off unless switched on
    assert cfg.metrics.metaeval.enabled
    assert len(cfg.utility.seeds) >= 3  # fewer than the article's 5 for speed, still a spread to report


@pytest.mark.parametrize(("raw", "path"), [
    (_raw(extra_key=1), "extra_key"),
    (_raw(data={"dataset": "debates", "max_docs": -3}), "data.max_docs"),
    (_raw(data={"dataset": "debates", "path": "x.parquet"}), "data"),
    (_raw(split={"train": 0.9, "val": 0.2, "test": 0.1}), "split"),
    (_raw(metrics={"names": ["bertscore_f1", "no_such_metric"]}), "metrics.names: unknown metric 'no_such_metric'"),
    (_raw(models={"no_such_role": "minilm"}), "models"),
    (_raw(generate={"strategies": [{"name": "nope"}]}), "generate.strategies.0.name"),
    (_raw(generate={"strategies": [{"name": "stymask", "params": {"intensity": 3}}]}),
     "generate.strategies.0.params.stymask.intensity"),
    (_raw(generate={"strategies": [{"name": "stymask"}, {"name": "stymask"}]}), "generate.strategies"),
    (_raw(experiment="has space"), "experiment"),
    (_raw(experiment=".."), "experiment: '..' cannot name a folder"),
    (_raw(experiment="."), "experiment: '.' cannot name a folder"),
    (_raw(experiment=".tmp-x"), "experiment"),
    (_raw(generate={"strategies": [{"name": "stymask", "label": "../../escaped"}]}), "generate.strategies.0.label"),
    (_raw(generate={"strategies": [{"name": "stymask", "label": "a/b"}]}), "generate.strategies.0.label"),
    (_raw(generate={"strategies": [{"name": "../stymask"}]}), "generate.strategies.0.name"),
    (_raw(privacy={"profiling": {"attributes": ["party", "../x"]}}), "privacy.profiling.attributes"),
    (_raw(report={"goals": ["augment", "share_everything"]}), "report.goals"),
    (_raw(report={"examples": -1}), "report.examples"),
    (_raw(metrics={"metaeval": {"bag_size": 1}}), "metrics.metaeval.bag_size"),
])
def test_bad_configs_name_their_key_path(raw, path):
    with pytest.raises(ConfigError) as err:
        parse_config(raw, source="c.yaml")
    message = str(err.value)
    assert message.startswith("c.yaml: ")
    assert path in message
    assert "\n" not in message


def test_overrides_are_applied_before_validation_and_do_not_touch_the_input():
    raw = _raw()
    cfg = parse_config(raw, overrides=["seed=7", "data.max_docs=50", "generate.strategies.0.params.intensity=0.5"])
    assert (cfg.seed, cfg.data.max_docs, cfg.generate.strategies[0].params) == (7, 50, {"intensity": 0.5})
    assert "params" not in raw["generate"]["strategies"][0]
    with pytest.raises(ConfigError, match=r"key\.path=value"):
        parse_config(raw, overrides=["seed"])
    with pytest.raises(ConfigError, match="does not name a settable key"):
        parse_config(raw, overrides=["generate.strategies.5.name=x"])


def test_yaml_errors_and_missing_files_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiment: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML") as err:
        load_config(bad)
    assert "\n" not in str(err.value)


def _laughs(levels: int) -> str:
    """A billion-laughs document: each level an anchored list of nine aliases to the level below."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


BOMB_UNDER_A_STRATEGY_SETTING = _laughs(9) + (
    "experiment: x\ndata: {dataset: debates}\ngenerate:\n  strategies:\n    - name: stymask\n"
    "      params: {intensity: *l9}\n")


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path):
    """9^10 'lol's under a validated key: refused while composing, in a subprocess whose traced memory stays
    under 20 MB (today's parser would build a multi-gigabyte error line)."""
    config = tmp_path / "bomb.yaml"
    config.write_text(BOMB_UNDER_A_STRATEGY_SETTING)
    probe = ("import sys, tracemalloc\nfrom flows.config import load_config\nfrom tasks.errors import ConfigError\n"
             "tracemalloc.start()\ntry:\n    load_config(sys.argv[1])\nexcept ConfigError as exc:\n    print(exc)\n"
             "print(tracemalloc.get_traced_memory()[1])\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(config)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    message, peak = proc.stdout.splitlines()
    assert message == f"{config}: its aliases expand it past {MAX_YAML_EXPANSION} characters (an alias bomb?); " \
                      "write the values out instead", proc.stderr[-2000:]
    assert int(peak) < 20_000_000


def test_aliases_within_the_budget_still_work(tmp_path):
    config = tmp_path / "anchors.yaml"
    config.write_text("experiment: x\ndata: {dataset: debates}\n"
                      "generate:\n  strategies:\n    - {name: stymask, label: a, params: &p {intensity: 0.5}}\n"
                      "    - {name: stymask, label: b, params: *p}\n")
    cfg = load_config(config)
    assert [s.params for s in cfg.generate.strategies] == [{"intensity": 0.5}, {"intensity": 0.5}]


@pytest.mark.parametrize(("text", "expected"), [
    ("", "the file is empty"),
    ("- experiment\n- x\n", "the top level must be a mapping of settings (experiment, data, generate ...); got list"),
    ("42\n", "got int"),
    ("just words\n", "got str"),
    ("a: &a [*a]\n", "an alias refers to a node that contains it"),
    ("a: " + "[" * 20_000 + "]" * 20_000 + "\n", "collections nest deeper than 100 levels"),  # was a RecursionError
])
def test_a_config_not_a_mapping_recursive_or_too_deep_names_the_file(tmp_path, text, expected):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert str(err.value).startswith(f"{config}: ") and expected in str(err.value)


def test_a_config_over_the_size_limit_is_refused_before_parsing(tmp_path):
    config = tmp_path / "big.yaml"
    config.write_text("experiment: x\n# " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match=f"larger than {MAX_CONFIG_BYTES} bytes"):
        load_config(config)


def _strategy(params: dict, name: str = "stymask") -> dict:
    return {"strategies": [{"name": name, "params": params}]}


@pytest.mark.parametrize(("raw", "expected"), [
    # booleans and strings are not numbers (pydantic's lax mode took true as 1 and '5' as 5)
    (_raw(seed=True), "seed: Input should be a valid integer (got True)"),
    (_raw(seed="5"), "seed: Input should be a valid integer (got '5')"),
    (_raw(generate={"shard_size": "250", **_strategy({})}), "generate.shard_size: Input should be a valid integer"),
    (_raw(split={"train_fraction": True}), "split.train_fraction: Input should be a valid number (got True)"),
    (_raw(generate=_strategy({"epsilon": True}, "dp")), "generate.strategies.0.params.dp.epsilon: Input should be "
                                                       "a valid number (got True)"),
    (_raw(generate=_strategy({"epsilon": "5"}, "dp")), "params.dp.epsilon: Input should be a valid number (got '5')"),
    (_raw(utility={"seeds": [0, True]}), "utility.seeds.1: Input should be a valid integer (got True)"),
    (_raw(privacy={"reidentify": {"params": {"minhash": {"k": "64"}}}}), "privacy.reidentify.params.minhash.k: "
                                                                          "Input should be a valid integer"),
    # non-finite numbers (epsilon .inf was accepted, and generate failed every row)
    (_raw(generate=_strategy({"epsilon": float("inf")}, "dp")), "params.dp.epsilon: Input should be a finite number"),
    (_raw(generate=_strategy({"intensity": float("nan")})), "params.stymask.intensity: Input should be a finite"),
    (_raw(split={"train_fraction": float("nan")}), "split.train_fraction: Input should be a finite number"),
    (_raw(privacy={"reidentify": {"attacks": ["minhash"], "params": {"minhash": {"jaccard_threshold": float("inf")}}}}),
     "privacy.reidentify.params.minhash.jaccard_threshold: Input should be a finite number"),
    # past each documented upper bound (tasks/limits.py)
    (_raw(seed=2**32), f"seed: Input should be less than or equal to {MAX_SEED}"),
    (_raw(seed=-1), "seed: Input should be greater than or equal to 0"),
    (_raw(data={"dataset": "debates", "max_docs": 10**9}), f"data.max_docs: Input should be less than or equal to "
                                                             f"{MAX_DOCS}"),
    (_raw(generate={"shard_size": 10**7, **_strategy({})}), "generate.shard_size: Input should be less than or equal"),
    (_raw(metrics={"shard_size": 0}), "metrics.shard_size: Input should be greater than 0"),
    (_raw(privacy={"membership": {"n_bootstrap": 10**9}}), "privacy.membership.n_bootstrap: Input should be less"),
    (_raw(metrics={"n_bootstrap": 10**9}), "metrics.n_bootstrap: Input should be less"),
    (_raw(utility={"n_bootstrap": 5}), "utility.n_bootstrap: Input should be greater than or equal to 10"),
    (_raw(privacy={"audit_dp": {"enabled": "yes"}}), "privacy.audit_dp.enabled: Input should be a valid boolean"),
    (_raw(privacy={"audit_dp": {"neighbours": 0}}), "privacy.audit_dp.neighbours: Input should be greater than or equal"),
    (_raw(privacy={"audit_dp": {"trials": 1}}), "privacy.audit_dp.trials: Input should be greater than or equal to 2"),
    (_raw(privacy={"audit_dp": {"max_docs": 10**9}}), "privacy.audit_dp.max_docs: Input should be less than or equal"),
    (_raw(privacy={"audit_dp": {"max_doc": 5}}), "privacy.audit_dp.max_doc: Extra inputs are not permitted"),
    (_raw(utility={"seeds": list(range(MAX_UTILITY_SEEDS + 1))}), "utility.seeds: List should have at most"),
    (_raw(report={"examples": 10**6}), "report.examples: Input should be less than or equal"),
    (_raw(generate=_strategy({"epsilon": 1e9}, "dp")), "params.dp.epsilon: Input should be less than or equal"),
    (_raw(generate=_strategy({"k": 10**6}, "synsim")), "params.synsim.k: Input should be less than or equal"),
    (_raw(generate=_strategy({"temperature": 50.0}, "llm")), "params.llm.temperature: Input should be less"),
    (_raw(privacy={"reidentify": {"params": {"minhash": {"k": 10**6}}}}), f"privacy.reidentify.params.minhash: "
                                                                           f"k must be in [1, {MAX_HASHES}]"),
    (_raw(privacy={"reidentify": {"params": {"minhash": {"bands": 64, "rows": 8}}}}), "bands*rows <= k"),
    # report.budget in a config names the config key, not the CLI flag
    (_raw(report={"budget": "privacy is fine"}), "report.budget: cannot read 'privacy is fine'"),
    (_raw(report={"budget": "nope<=0.1"}), "report.budget: unknown budget figure 'nope'"),
    (_raw(report={"budget": "utility>=1e999"}), "report.budget: 'utility>=1e999': the limit must be a finite"),
])
def test_numbers_are_strict_finite_and_bounded(raw, expected):
    with pytest.raises(ConfigError) as err:
        parse_config(raw, source="c.yaml")
    assert str(err.value).startswith("c.yaml: ") and expected in str(err.value), str(err.value)
    assert "--budget" not in str(err.value) and "--require" not in str(err.value)


def test_report_budget_is_read_and_its_former_key_is_refused_naming_it():
    """report.budget is the run's budget (recorded as report.require, where release and the report rebuild read it);
    report.require, its former name, is refused in a file and in an override, naming report.budget."""
    cfg = parse_config(_raw(report={"budget": "reidentification<=0.10"}))
    assert cfg.report.require == "reidentification<=0.10"
    assert cfg.model_dump(mode="json")["report"]["require"] == "reidentification<=0.10"
    assert parse_config(_raw(), overrides=["report.budget=utility>=0.9"]).report.require == "utility>=0.9"
    with pytest.raises(ConfigError) as err:
        parse_config(_raw(report={"require": "reidentification<=0.10"}), source="c.yaml")
    assert str(err.value) == "c.yaml: report.require: renamed: write the budget as report.budget (the same syntax)"
    with pytest.raises(ConfigError) as err:
        parse_config(_raw(), source="c.yaml", overrides=["report.require=reidentification<=0.10"])
    assert "report.require: renamed: write the budget as report.budget" in str(err.value)


def test_yaml_ints_and_exponent_floats_validate_as_floats_also_through_overrides():
    cfg = parse_config(_raw(split={"train_fraction": 1}, generate=_strategy({"epsilon": 3}, "dp")),
                       overrides=["generate.strategies.0.params.epsilon=2", "split.train_fraction=1", "seed=0",
                                  "utility.fractions=[1, 0.5]"])
    assert cfg.split.train_fraction == 1.0 and cfg.generate.strategies[0].params == {"epsilon": 2}
    assert cfg.utility.fractions == [1.0, 0.5] and cfg.seed == 0
    cfg = parse_config(_raw(generate=_strategy({"epsilon": 3}, "dp")),
                       overrides=["generate.strategies.0.params.delta=1e-6", "generate.strategies.0.params.b_min=-.5"])
    assert cfg.generate.strategies[0].params == {"epsilon": 3, "delta": 1e-6, "b_min": -0.5}  # YAML 1.1 said '1e-6'
    with pytest.raises(ConfigError, match=r"^--set seed: its aliases expand it past"):
        parse_config(_raw(), overrides=["seed=" + _laughs(9).replace("\n", ", ").join("{}")])
    with pytest.raises(ConfigError, match="seed: Input should be a valid integer"):
        parse_config(_raw(), overrides=["seed=yes"])


@pytest.mark.parametrize(("overrides", "raw", "expected"), [
    (["seed=yes"], _raw(), "--set 'seed=yes': seed: Input should be a valid integer (got True)"),
    (["generate.strategies.0.params.intensity=7"], _raw(),
     "--set 'generate.strategies.0.params.intensity=7': generate.strategies.0.params.stymask.intensity: Input "
     "should be less than or equal to 1"),
    (["split.train=0.9"], _raw(), "--set 'split.train=0.9': split: split.train + split.val + split.test must be 1"),
    (["seed=3"], _raw(report={"examples": -1}), "c.yaml: report.examples: Input should be greater than or equal to 0"),
    (["seed"], _raw(), "--set 'seed': not key.path=value"),
])
def test_errors_name_the_override_flag_or_the_file_the_bad_value_came_from(overrides, raw, expected):
    with pytest.raises(ConfigError) as err:
        parse_config(raw, source="c.yaml", overrides=overrides)
    assert str(err.value).startswith(expected), str(err.value)


def test_echoed_values_are_cut_to_80_characters():
    """Every echo of an input value goes through tasks.errors.shown: a megabyte name is a short line."""
    long = "x" * 1_000_000
    cases = [_raw(generate={"strategies": [{"name": long}]}), _raw(**{long: 1}), _raw(experiment=long),
             _raw(models={long: "minilm"}), _raw(metrics={"names": [long]}), _raw(report={"goals": [long]}),
             _raw(report={"budget": long}), _raw(report={"require": long}),
             _raw(generate=_strategy({"intensity": long})),
             _raw(generate=_strategy({long: 1})), _raw(privacy={"reidentify": {"attacks": [long]}}),
             _raw(privacy={"reidentify": {"params": {"minhash": {"k": long}}}})]
    for raw in cases:
        with pytest.raises(ConfigError) as err:
            parse_config(raw, source="c.yaml")
        assert len(str(err.value)) < 600 and "x" * (SHOWN_CHARS + 1) not in str(err.value), str(err.value)[:300]
    assert shown(long) == "'" + "x" * (SHOWN_CHARS - 4) + "..." and len(shown([[long] * 10**6])) <= SHOWN_CHARS
