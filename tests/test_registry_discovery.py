"""One module is all a new strategy, metric or attack needs: each registry imports every module of its
package, so a module dropped into the package (here: a folder added to the package's path, in a fresh
process) is listed by ``synthugc strategies|metrics|attacks`` and accepted by the config check, with no
other file edited."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STRATEGY = '''
from pydantic import BaseModel
from tasks.generate.base import Strategy, register_strategy

class EchoParams(BaseModel):
    loud: bool = False

@register_strategy("toy-echo", params=EchoParams)
class Echo(Strategy):
    """Echo: returns its input (a toy strategy for the discovery test)."""

    def generate(self, batch, *, seed):
        return batch["text"].tolist()
'''

METRIC = '''
from tasks.metrics.base import MetricResult
from tasks.metrics.catalogue import Metric, register

def toy_length(sources, outputs, options, cache):
    import pandas as pd
    return MetricResult(pd.DataFrame({"toy_length": [float(len(o)) for o in outputs]}))

register(Metric("toy_length", "sample", "style", 1, "Len", "output length (toy)", (), toy_length))
'''

ATTACK = '''
from dataclasses import dataclass
from tasks.privacy.attacks import Attack, register_attack

@dataclass(frozen=True)
class GuessParams:
    seed: int = 0

@register_attack("toy-guess", params=GuessParams)
class Guess(Attack):
    """Guess: a toy attack for the discovery test."""

    signature = "metric:reid_toy"

    def prepare(self, histories, setting, held_out, *, index=None):
        return None

    def run(self, prepared, timelines):
        raise NotImplementedError
'''

PROBE = '''
import json, sys
import tasks.generate, tasks.metrics, tasks.privacy.attacks
folders = json.loads(sys.argv[1])
for package, folder in folders.items():
    sys.modules[package].__path__.append(folder)
from flows.config import parse_config
from tasks.catalogues import listing_lines
listed = {r: [line.split()[0] for line in listing_lines(r)[1:]] for r in ("strategies", "metrics", "attacks")}
cfg = parse_config({"experiment": "toy", "storage_root": sys.argv[2], "data": {"path": sys.argv[3]},
                    "generate": {"strategies": [{"name": "toy-echo", "params": {"loud": True}}]},
                    "metrics": {"names": ["toy_length"]},
                    "privacy": {"reidentify": {"attacks": ["toy-guess"]}}})
print(json.dumps({"listed": listed, "strategy": cfg.generate.strategies[0].name}))
'''


def test_a_module_dropped_into_a_registry_package_is_found_everywhere(tmp_path):
    folders = {}
    for package, source in (("tasks.generate", STRATEGY), ("tasks.metrics", METRIC),
                            ("tasks.privacy.attacks", ATTACK)):
        folder = tmp_path / package.replace(".", "_")
        folder.mkdir()
        (folder / "toy.py").write_text(textwrap.dedent(source), encoding="utf-8")
        folders[package] = str(folder)
    corpus = tmp_path / "c.csv"
    corpus.write_text("doc_id,text\na,hello\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(folders), str(tmp_path / "runs"), str(corpus)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert "toy-echo" in out["listed"]["strategies"]
    assert "toy_length" in out["listed"]["metrics"]
    assert "toy-guess" in out["listed"]["attacks"]
    assert out["strategy"] == "toy-echo"


def test_the_built_in_entries_are_all_found_without_the_package_listing_them():
    """The packages' ``__init__`` files name no entry module: the registries still hold every shipped one."""
    from tasks.generate import available_strategies
    from tasks.metrics.catalogue import CATALOGUE
    from tasks.privacy.attacks import available_attacks

    assert {"backtranslate", "dp", "llm", "paraphrase", "stymask", "synsim", "syndiff", "synorig",
            "syntr"} <= set(available_strategies())
    assert {"bertscore_f1", "pii_leakage", "verbatim"} <= set(CATALOGUE)
    assert {"minhash", "stylometric", "delta", "embedding"} <= set(available_attacks())
    init = (ROOT / "tasks" / "generate" / "__init__.py").read_text(encoding="utf-8")
    assert "from tasks.generate import" not in init  # no strategy module imported by name
