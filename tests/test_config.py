"""Experiment config validation: unknown keys and bad values are rejected with their key path."""

from __future__ import annotations

import pytest

from flows.cli import DEMO_CONFIG
from flows.config import load_config, parse_config
from tasks.errors import ConfigError


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
