"""The one results file of the benchmarks, and the performance table made from it.

Every benchmark ends with :func:`record`: it prints the benchmark's one ``RESULT key=value ...`` line, as before,
and appends the same figures as one JSON record to ``benchmarks/results.jsonl``::

    {"benchmark": "demo", "command": "python benchmarks/demo.py", "commit": "<git rev-parse HEAD>",
     "machine": {"cpu": "<model name>", "cores": 2}, "load": [1.9, 1.7, 1.6], "utc": "...",
     "figures": {"first_s": 490.1, ...}}

``commit`` is ``unknown`` outside a git checkout; ``load`` is the 1, 5 and 15-minute load average when the
benchmark ended. ``SYNTHUGC_BENCHMARK_RESULTS`` names another file (a trial run that should not count).

``docs/performance.md`` is generated from the file: for each benchmark and machine, the latest record's key
figures, its load and its machine. ``tests/test_performance_table.py`` checks that the page is what the file
gives::

    .venv/bin/python -m benchmarks.results table            # print the page
    .venv/bin/python -m benchmarks.results table --write    # rewrite docs/performance.md
    .venv/bin/python -m benchmarks.results table --check    # exit 1 when docs/performance.md is stale
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results.jsonl"
TABLE = ROOT / "docs" / "performance.md"
ENV = "SYNTHUGC_BENCHMARK_RESULTS"

#: What each benchmark measures, in a few words, and the figures the table shows (in this order; the others stay in
#: results.jsonl). A benchmark not listed shows its first six figures.
BENCHMARKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "demo": ("first `make demo` on a fresh clone, and the cached rerun",
             ("first_s", "setup_s", "run_s", "rerun_s", "run_cpu_s", "first_over_target", "rerun_over_target")),
    "suite": ("`make test`'s steps (ruff, compileall, pytest)", ("suite_s", "tests", "failed", "over_target", "workers")),
    "metrics": ("the metric suite against one plain encoder forward; BERTScore against bert_score",
                ("pairs", "pairs_per_s", "suite_over_forward", "bertscore_speedup", "best_token_budget")),
    "meaning_floor": ("protect's meaning check against the CPU's matrix-multiply roofline",
                      ("texts", "fp32_s", "check_over_roofline", "bf16_speedup", "bf16_max_abs_df1")),
    "sentence_vectors": ("sentence vectors against SentenceTransformer.encode", ("texts", "ours_s", "encode_s", "speedup")),
    "reidentify": ("every re-identification attack at scale against scikit-learn's vectorizer",
                   ("scale_posts", "users", "slowest_attack_s", "slowest", "peak_rss_gb", "classifier_s")),
    "exact_fit": ("the exact classifier's C grid in processes against one after the other",
                  ("posts", "authors", "sequential_s", "processes_s", "speedup", "identical")),
    "conventions": ("every attack on the convention speakers against scikit-learn references",
                    ("seeds", "stylometric_acc", "classifier_acc", "delta_acc", "minhash_acc", "word_text_acc")),
    "delta": ("Burrows' Delta against the stylometric attack",
              ("posts", "users", "delta_profile_s", "stylometric_profile_s", "ratio")),
    "protect": ("protect's rounds at scale: later rounds against round 0",
                ("posts", "users", "first_round_s", "slowest_later_round_s", "certificate_s", "peak_rss_gb")),
    "demo_protect": ("the demo's protect and release against the code before the fluency floor",
                     ("released_share", "meaning_released", "fluency_released", "met", "protect_release_s",
                      "reference_s", "ratio")),
    "protect_feedback": ("protect's feedback with the classifier's evidence against stylometric alone",
                         ("worst_reference", "worst_with_classifier", "meaning_reference", "meaning_with_classifier")),
    "frontier": ("the convention speakers' risk-meaning frontier, default feedback against stylometric alone",
                 ("unit", "chosen_floor", "chosen_worst", "reference_chosen_worst", "worst_ratio_vs_reference")),
    "flow": ("the conventions flow at several sizes: seconds per stage kind and growth exponent",
             ("sizes", "total_s", "peak_rss_mib", "exponent_total", "worst_stage")),
    "flow_executor": ("LLM-bound stages at once against one at a time",
                      ("speedup", "sequential_s", "concurrent_s", "cached_ms_per_stage", "identical")),
    "generate": ("every generation strategy's texts/s", ()),
    "llm_client": ("the LLM client's throughput against a continuous-batching server's capacity",
                   ("ratio", "throughput", "capacity", "reference_ratio")),
    "llm_inprocess": ("batched in-process LLM generation against one generate call per request",
                      ("speedup", "texts_per_s", "reference_texts_per_s", "texts", "max_tokens")),
    "audit_dp": ("the DP-Prompt audit against DP-Prompt generation",
                 ("docs", "audit_docs_per_s", "generation_docs_per_s", "max_ratio", "violations", "device")),
    "training": ("the fine-tuned encoder's training throughput against the linear baseline", ()),
    "report": ("rebuilding a report against reading its artifacts", ()),
    "scores": ("the declared score schema against pandas.DataFrame(rows)",
               ("rows", "reference_ms", "score_frame_ms", "ratio")),
    "pii": ("PII detection: precision and recall, seconds against spaCy alone",
            ("precision", "recall", "detect_s_per_1k", "ratio_vs_spacy")),
    "verbatim": ("the verbatim flags at the article's scale", ()),
    "pivots": ("back-translation pivots and the syntax strategies' unchanged shares", ()),
}


def _number(value: str) -> Any:
    """A figure as JSON holds it: an int or a finite float when it reads as one, else the text."""
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        return value
    return number if math.isfinite(number) else value


def parse_figures(text: str) -> dict[str, Any]:
    """``key=value key=value ...`` as a dict (values without spaces, as every RESULT line writes them)."""
    figures: dict[str, Any] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key:
            figures[key] = _number(value)
    return figures


def commit() -> str:
    """The checkout's HEAD, or ``unknown``."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def machine() -> dict[str, Any]:
    """The CPU's model name (``/proc/cpuinfo``) and the core count."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count() or 1}


def results_path() -> Path:
    return Path(os.environ.get(ENV) or RESULTS)


def record(benchmark: str, figures: Mapping[str, Any] | str, *, command: str | None = None,
           path: Path | None = None) -> dict[str, Any]:
    """Print the benchmark's ``RESULT`` line and append its record to the results file; returns the record.

    ``figures`` is the RESULT line's ``key=value ...`` text or a mapping (its values written as given)."""
    pairs = parse_figures(figures) if isinstance(figures, str) else dict(figures)
    text = figures if isinstance(figures, str) else " ".join(f"{k}={v}" for k, v in pairs.items())
    print("RESULT " + " ".join(text.split()), flush=True)
    entry = {
        "benchmark": benchmark,
        "command": command or shlex.join(["python", *(_relative(a) for a in sys.argv)]),
        "commit": commit(),
        "machine": machine(),
        "load": [round(x, 2) for x in os.getloadavg()],
        "utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "figures": {k: _number(v) if isinstance(v, str) else v for k, v in pairs.items()},
    }
    target = path or results_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
    return entry


def _relative(arg: str) -> str:
    """A script path relative to the repository root (``benchmarks/demo.py``), other arguments as given."""
    try:
        return str(Path(arg).resolve().relative_to(ROOT)) if arg.endswith(".py") else arg
    except ValueError:
        return arg


def read_records(path: Path = RESULTS) -> list[dict[str, Any]]:
    """Every record of the file, in file order (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _machine_label(entry: Mapping[str, Any]) -> str:
    found = entry.get("machine") or {}
    parts = [str(found.get("cpu") or "CPU not recorded")]
    if found.get("cores"):
        parts.append(f"{found['cores']} cores")
    if found.get("gpu"):
        parts.append(str(found["gpu"]))
    return ", ".join(parts)


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _load(entry: Mapping[str, Any]) -> str:
    load = entry.get("load")
    if isinstance(load, list | tuple):
        return " / ".join(_value(x) for x in load)
    return _value(load) if load is not None else "not recorded"


def latest(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The last record of each (benchmark, machine), in :data:`BENCHMARKS`' order (others after, by name), then by
    machine; records whose figures name an ``error`` are left out."""
    kept: dict[tuple[str, str], Mapping[str, Any]] = {}
    for entry in records:
        if "error" in entry.get("figures", {}):
            continue
        kept[(entry["benchmark"], _machine_label(entry))] = entry
    order = {name: n for n, name in enumerate(BENCHMARKS)}
    return [kept[key] for key in sorted(kept, key=lambda k: (order.get(k[0], len(order)), k[0], k[1]))]


def table(records: Iterable[Mapping[str, Any]], scripts: Iterable[str] = ()) -> str:
    """The markdown of docs/performance.md."""
    rows = latest(records)
    lines = [
        "# Performance",
        "",
        "<!-- Generated from benchmarks/results.jsonl by `python -m benchmarks.results table --write`; do not edit. -->",
        "",
        "Every figure the documentation quotes about speed comes from a benchmark and is written here once. Each",
        "benchmark ends with one `RESULT key=value ...` line and appends the same figures, with the command, the",
        "commit, the machine and the load average, to [benchmarks/results.jsonl](../benchmarks/results.jsonl). This",
        "page shows, for each benchmark and machine, the latest record's key figures (the other figures and the commit",
        "are in the file). How to run each benchmark and what it compares against:",
        "[benchmarks/README.md](../benchmarks/README.md).",
        "",
        "The machines are shared and the load average (1, 5 and 15 minutes, when the benchmark ended) moves the",
        "seconds: read a figure with its load, and compare figures of one machine only.",
        "",
        "| benchmark | what it measures | key figures | load | machine | command |",
        "|---|---|---|---|---|---|",
    ]
    for entry in rows:
        name = entry["benchmark"]
        what, keys = BENCHMARKS.get(name, ("", ()))
        figures = entry.get("figures", {})
        shown = [k for k in keys if k in figures] or list(figures)[:6]
        cells = ", ".join(f"{k}={_value(figures[k])}" for k in shown)
        lines.append(f"| `{name}` | {what} | {cells} | {_load(entry)} | {_machine_label(entry)} | "
                     f"`{entry.get('command', '')}` |")
    missing = sorted(set(scripts) - {e["benchmark"].split("_executor")[0] for e in rows})
    if missing:
        lines += ["", "Benchmarks with no record yet: " + ", ".join(f"`benchmarks/{n}.py`" for n in missing) + "."]
    return "\n".join(lines) + "\n"


def scripts() -> list[str]:
    """The benchmark scripts (every ``benchmarks/*.py`` but this module)."""
    return sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "results")


def render(path: Path = RESULTS) -> str:
    return table(read_records(path), scripts())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The benchmarks' results file and docs/performance.md.")
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("table", help="docs/performance.md from benchmarks/results.jsonl")
    action = make.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite docs/performance.md")
    action.add_argument("--check", action="store_true", help="exit 1 when docs/performance.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        TABLE.write_text(text, encoding="utf-8")
    elif args.check:
        if not TABLE.exists() or TABLE.read_text(encoding="utf-8") != text:
            print("docs/performance.md is stale: python -m benchmarks.results table --write", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
