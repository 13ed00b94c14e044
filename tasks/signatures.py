"""Signatures: a sacrebleu-style string naming everything a number depends on (metric, model, layer, n,
tokenizer, package version and any option), so two numbers are comparable exactly when their signatures are
equal. The function that computes a number builds its signature: the fields it names are the ones it used.
Metrics, attacks, strategies and the protect loop all sign their numbers here (it imports nothing of theirs)."""

from __future__ import annotations

SIGNATURE_VERSION = "synthugc-0.1"


def make_signature(metric: str, **fields: object) -> str:
    """``metric:NAME|key:value|...|version:...`` with keys in the given order, None values left out,
    booleans as yes/no (sacrebleu's style)."""
    parts = [f"metric:{metric}"]
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "yes" if value else "no"
        parts.append(f"{key}:{value}")
    if "version" not in fields:
        parts.append(f"version:{SIGNATURE_VERSION}")
    return "|".join(parts)
