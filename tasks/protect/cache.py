"""What a protect point keeps on disk so that a rerun computes nothing again: each round as it ends (its documents,
its attacks and, written last, its meta file: a killed run resumes at the round it was in), and the point's other
figures as JSON keyed by what they depend on (:func:`_kept_in`). Round 0 is kept in the folder the points of a
frontier share."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.corpus.importers import write_parquet_atomic
from tasks.paths import write_bytes_atomic
from tasks.protect.rounds import RoundState
from tasks.store import fingerprint_config


def round_paths(folder: Path, zero_folder: Path, k: int) -> tuple[Path, Path, Path]:
    """Round ``k``'s documents, attacks and meta file (round 0's in ``zero_folder``)."""
    folder = zero_folder if k == 0 else folder
    return (folder / f"round-{k:03d}.docs.parquet", folder / f"round-{k:03d}.attacks.parquet",
            folder / f"round-{k:03d}.json")


def load_round(folder: Path, zero_folder: Path, k: int) -> RoundState | None:
    """Round ``k`` as it was saved (None where it is not complete)."""
    docs, attacks, meta = round_paths(folder, zero_folder, k)
    if not meta.exists():  # written last: a round without it is not complete
        return None
    info = json.loads(meta.read_text())
    return RoundState(k, pd.read_parquet(docs), pd.read_parquet(attacks), info["rewritten"], info["seconds"],
                      info.get("summaries"))


def mapping_of_round_zero(zero_folder: Path) -> Path:
    """Where round 0's pseudonym mapping is kept: a point or a rerun that reads round 0 from here writes the same
    mapping, and generalize leaves its surrogates alone, as where round 0 ran."""
    return zero_folder / "round-000.pii_mapping.parquet"


def load_mapping(zero_folder: Path) -> list[pd.DataFrame]:
    """Round 0's pseudonym mapping as it was saved (none where its start move made none)."""
    path = mapping_of_round_zero(zero_folder)
    return [pd.read_parquet(path)] if path.exists() else []


def save_round(folder: Path, zero_folder: Path, state: RoundState, mappings: Sequence[pd.DataFrame] = ()) -> None:
    """Round ``state`` written with its attacks' summaries (round 0 with its pseudonym ``mappings``), its meta file
    last."""
    docs, attacks, meta = round_paths(folder, zero_folder, state.round)
    meta.parent.mkdir(parents=True, exist_ok=True)
    if state.round == 0 and mappings:
        write_parquet_atomic(pd.concat(list(mappings), ignore_index=True), mapping_of_round_zero(zero_folder))
    write_parquet_atomic(state.docs, docs)
    write_parquet_atomic(state.attacks, attacks)
    _write_json_atomic(meta, {"rewritten": state.rewritten, "seconds": state.seconds,
                              "summaries": state.attack_summaries()})


def _write_json_atomic(path: Path, value: Any) -> None:
    write_bytes_atomic(json.dumps(value).encode(), path)


def _kept_in(folder: Path, name: str, key: Mapping[str, Any], compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What ``compute`` returns, kept in the point's folder under ``name`` and ``key``: a rerun of the same point
    reads it instead of computing it again."""
    path = folder / f"{name}-{fingerprint_config(dict(key))[:24]}.json"
    if path.is_file():
        return json.loads(path.read_text())
    value = compute()
    folder.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(path, value)
    return value

