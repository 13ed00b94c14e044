"""Benchmark of in-process CPU generation (SmolLM2-135M, the offline default): old path vs batched path.

The requests are exactly those the ``llm`` and ``paraphrase`` strategies build (default params, per-text
seeds, so every request has its own seed) for N real texts (``real_sentences`` of benchmarks/generate.py:
convention sentences and debate turns, file order), with the same ``max_tokens`` on both paths.

- reference (the old path, as the strategies called it before issue 16): requests were batched only when
  all sampling parameters, seed included, were equal, so per-text seeds meant one ``model.generate`` per
  request (``set_seed``, ``num_return_sequences=n``, stop strings through generate), measured here by
  :func:`reference_generate`, a copy of that code;
- new: ``TransformersBackend.complete`` (length-sorted batches of ``--batch-size`` rows, left padding, one
  KV-cached decode loop, per-row seeded sampling, finished rows dropped from the batch).

Both run in the same process on the same texts, one after the other (model loaded once, before timing).
Prints texts/s and generated tokens/s of each and the ratio; ends with
``RESULT speedup=... texts_per_s=... reference_texts_per_s=...``. The machine is shared: quote the load.

Run: ``.venv/bin/python benchmarks/llm_inprocess.py [--texts 64] [--max-tokens 64] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT, ROOT / "benchmarks"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
from benchmarks.results import record  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from generate import load_average, real_sentences  # noqa: E402

from tasks.generate.llm import ASK_N_TEMPLATE, LLMParams, build_requests  # noqa: E402
from tasks.generate.paraphrase import ParaphraseParams  # noqa: E402
from tasks.models.llm import BATCH_ROWS, ChatRequest, TransformersBackend, _cut_at_stop  # noqa: E402
from tasks.models.loaders import load_causal_lm  # noqa: E402
from tasks.models.registry import resolve_model  # noqa: E402

REFERENCE = "one model.generate per request (per-text seeds), the pre-issue-16 TransformersBackend path"


def reference_generate(tokenizer: Any, model: Any, request: ChatRequest) -> list[str]:
    """The old path for one request: the pre-issue-16 ``TransformersBackend.generate`` on a batch of one."""
    import torch
    from transformers import set_seed

    prompt = tokenizer.apply_chat_template(request.messages, tokenize=False, add_generation_prompt=True)
    batch = tokenizer([prompt], return_tensors="pt", padding=True, padding_side="left",
                      add_special_tokens=False).to(model.device)
    kwargs: dict[str, Any] = {"max_new_tokens": request.max_tokens, "num_return_sequences": request.n,
                              "do_sample": request.temperature > 0, "pad_token_id": tokenizer.pad_token_id}
    if request.temperature > 0:
        kwargs.update(temperature=request.temperature, top_p=request.top_p, top_k=0)
    else:
        kwargs.update(temperature=None, top_p=None, top_k=None)
    if request.stop:
        kwargs.update(stop_strings=list(request.stop), tokenizer=tokenizer)
    with torch.inference_mode():
        if request.seed is not None:
            set_seed(request.seed)
        out = model.generate(**batch, **kwargs)
    decoded = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    return [_cut_at_stop(text, request.stop) for text in decoded]


def strategy_requests(texts: Sequence[str], max_tokens: int) -> dict[str, list[ChatRequest]]:
    """The requests the llm strategy (in-process: n asked for) and the paraphrase strategy (LLM path) build."""
    llm = LLMParams(max_tokens=max_tokens)
    para = ParaphraseParams(max_tokens=max_tokens)
    return {"llm": build_requests(texts, llm, seed=0, n=llm.n_outputs, template=ASK_N_TEMPLATE)[0],
            "paraphrase": build_requests(texts, para, seed=0, n=1)[0]}


def count_tokens(tokenizer: Any, answers: Sequence[Sequence[str]]) -> int:
    return sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for texts in answers for t in texts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=64, help="real texts per strategy")
    parser.add_argument("--max-tokens", type=int, default=64, help="max new tokens, both paths")
    parser.add_argument("--batch-size", type=int, default=BATCH_ROWS, help="rows per batch on the new path "
                        "(default: the backend's)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads, both paths")
    parser.add_argument("--strategies", default="llm,paraphrase")
    parser.add_argument("--data-dir", default=str(ROOT / "data"))
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    texts = real_sentences(args.texts, args.data_dir)["text"].astype(str).tolist()
    spec = resolve_model("llm")
    t0 = time.perf_counter()
    tokenizer, model = load_causal_lm(spec)
    print(f"model {spec.name} loaded in {time.perf_counter() - t0:.1f} s; {args.texts} texts, max_tokens "
          f"{args.max_tokens}, {args.threads} torch thread(s); load average before: {load_average()}")
    backend = TransformersBackend(spec, batch_size=args.batch_size, num_threads=args.threads)
    warm = strategy_requests(texts[:1], 4)["paraphrase"]
    reference_generate(tokenizer, model, warm[0])
    backend.complete(warm)

    ref_s = new_s = 0.0
    n_texts = 0
    for name, requests in strategy_requests(texts, args.max_tokens).items():
        if name not in args.strategies.split(","):
            continue
        t0 = time.perf_counter()
        ref = [reference_generate(tokenizer, model, r) for r in requests]
        ref_time = time.perf_counter() - t0
        t0 = time.perf_counter()
        results = backend.complete(requests)
        new_time = time.perf_counter() - t0
        failed = [r.error for r in results if not r.ok]
        new = [r.texts or [] for r in results]
        ref_tok, new_tok = count_tokens(tokenizer, ref), count_tokens(tokenizer, new)
        print(f"{name:>10}: reference {len(requests) / ref_time:6.2f} texts/s ({ref_tok / ref_time:6.1f} tokens/s, "
              f"{ref_time:.1f} s) | batched {len(requests) / new_time:6.2f} texts/s ({new_tok / new_time:6.1f} "
              f"tokens/s, {new_time:.1f} s, {len(failed)} failed) | speedup {ref_time / new_time:.2f}x")
        ref_s, new_s, n_texts = ref_s + ref_time, new_s + new_time, n_texts + len(requests)
    print(f"reference: {REFERENCE}; load average after: {load_average()} (machine shared with other agents)")
    record("llm_inprocess", f"speedup={ref_s / new_s:.2f} texts_per_s={n_texts / new_s:.2f} "
          f"reference_texts_per_s={n_texts / ref_s:.2f} texts={n_texts} max_tokens={args.max_tokens} "
          f"batch_size={args.batch_size} threads={args.threads} load={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
